"""tools/query_reading: the first assistant turn's NLL under the task's own query and a swapped
one."""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from arenarl_jax.envs import base
from arenarl_jax.models import config as model_config
from arenarl_jax.models.transformer import make_model
from arenarl_jax.text import task_tokenizer
from arenarl_jax.tools import query_reading


def test_first_turn_is_the_first_run_of_trained_tokens():
  assert query_reading.first_turn([0, 0, 1, 1, 0, 1]) == (2, 4)
  assert query_reading.first_turn([0, 1, 1]) == (1, 3)
  with pytest.raises(ValueError, match="no assistant turn"):
    query_reading.first_turn([0, 0])


def test_first_turn_nll_scores_exactly_the_turns_tokens():
  # logp[t] scores ids[t + 1]: the turn at positions 2 and 3 is scored by logp[1] and logp[2].
  logp = np.array([-9.0, -1.0, -3.0, -9.0])
  nll = query_reading.first_turn_nll(lambda ids: logp, [5, 6, 7, 8, 9], [0, 0, 1, 1, 0])
  assert nll == pytest.approx(2.0)


@pytest.fixture(scope="module")
def travel():
  env = base.make_environment("travel")
  conversations = query_reading.validation_conversations(env, per_subtask=2, seed=0)
  texts = [c[1] for rows in conversations.values() for c in rows] * 10
  tok = task_tokenizer.train_bpe(texts, vocab_size=400, whole=env.names())
  return env, conversations, tok


def _copying(ids):
  """A model that reads: a token seen before is likely, an unseen one is not."""
  return np.array([-0.1 if ids[t + 1] in ids[:t + 1] else -3.0 for t in range(len(ids) - 1)])


def test_a_model_that_reads_the_query_has_a_gap_and_one_that_ignores_it_none(travel):
  _, conversations, tok = travel
  reading = query_reading.measure(_copying, tok, conversations)
  assert len(reading.task_ids) == 10 and (reading.swapped_K > reading.own_K).sum() >= 8
  summary = reading.summary(samples=200)
  assert summary["gap"] > 0.01 and summary["gap_ci_low"] > 0 and summary["tasks"] == 10
  blind = query_reading.measure(lambda ids: -np.ones(len(ids) - 1), tok, conversations)
  np.testing.assert_array_equal(blind.own_K, blind.swapped_K)
  assert blind.summary(samples=200)["gap"] == 0.0
  with pytest.raises(ValueError, match="two tasks"):
    query_reading.measure(_copying, tok, {"search": conversations["search"][:1]})


def test_swapping_replaces_the_query_only(travel):
  _, conversations, _ = travel
  _, query, messages = conversations["search"][0]
  swapped = query_reading.with_query(messages, "another query")
  assert messages[0]["content"] == query and swapped[0]["content"] == "another query"
  assert swapped[1:] == [dict(m) for m in messages[1:]]


def test_model_logprobs_are_the_unpadded_forwards():
  cfg = dataclasses.replace(model_config.get_preset("tiny"), vocab_size=64)
  model = make_model(cfg, seed=0)
  ids = list(np.random.default_rng(0).integers(0, 64, 37))
  got = query_reading.model_logprobs(model, bucket=16)(ids)
  logits, _ = model(jnp.asarray([ids], jnp.int32))
  logp = jax.nn.log_softmax(logits[0, :-1], axis=-1)
  want = np.asarray(logp)[np.arange(36), ids[1:]]
  assert got.shape == (36,)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
