"""tools/answer_reading: the expert's answer turn, teacher-forced, by token kind."""
from __future__ import annotations

import numpy as np
import pytest

from arenarl_jax.data import pipeline as data_pipeline
from arenarl_jax.envs import base
from arenarl_jax.text import task_tokenizer
from arenarl_jax.tools import answer_reading, query_reading


def test_token_kinds_by_characters():
  pieces = ["1.", " Cedar", " River", " Temple", ":", " rating", " 4", ".", "2", ", at", " Pelar"]
  kinds = answer_reading.token_kinds(pieces, ["Cedar River Temple", "Pelar", "Cedar"])
  assert kinds == ["figure", "name", "name", "name", "template", "template", "figure",
                   "template", "figure", "template", "name"]
  assert answer_reading.token_kinds([" a", " b"], []) == ["template", "template"]


def test_answer_turn_is_the_last_run_of_trained_tokens():
  assert answer_reading.answer_turn([0, 1, 1, 0, 0, 1, 1, 1, 0]) == (5, 8)
  assert answer_reading.answer_turn([0, 1, 1]) == (1, 3)
  with pytest.raises(ValueError, match="no assistant turn"):
    answer_reading.answer_turn([0, 0])


def test_sft_view_keeps_reasoning_where_the_setting_does():
  call = {"role": "assistant", "content": "", "reasoning_content": "r", "tool_calls": [{}]}
  answer = {"role": "assistant", "content": "a", "reasoning_content": "r"}
  view = data_pipeline.sft_messages([call, answer], "calls")
  assert "reasoning_content" in view[0] and "reasoning_content" not in view[1]
  assert all("reasoning_content" in m for m in data_pipeline.sft_messages([call, answer], "all"))


@pytest.fixture(scope="module")
def travel():
  env = base.make_environment("travel")
  conversations = query_reading.validation_conversations(env, per_subtask=1, seed=0)
  texts = [str(m.get("content", "")) for rows in conversations.values() for c in rows
           for m in c[2]] * 3
  tok = task_tokenizer.train_bpe(texts, vocab_size=600, whole=env.names())
  return env, conversations, tok


def _copying(ids):
  """A model that reads: a token seen before is likely, an unseen one is not."""
  return np.array([-0.1 if ids[t + 1] in ids[:t + 1] else -3.0 for t in range(len(ids) - 1)])


def test_a_model_that_copies_reads_names_and_figures_one_that_guesses_does_not(travel):
  env, conversations, tok = travel
  nll = answer_reading.measure(_copying, tok, conversations, env.names(), reasoning="calls")
  assert {s for _, s in nll} == set(env.subtasks)
  reads = answer_reading.summary(nll)
  # Every name of an answer was in a tool result: copied, all of them; figures mostly.
  assert reads["name_acc"] == 1.0 and reads["figure_acc"] > 0.8
  assert reads["name_nll"] == pytest.approx(0.1)
  guess = answer_reading.summary(answer_reading.measure(
      lambda ids: np.full(len(ids) - 1, np.log(0.4)), tok, conversations, env.names()))
  assert guess["name_acc"] == guess["figure_acc"] == guess["template_acc"] == 0.0
  assert guess["tokens"] > reads["tokens"]  # reasoning kept on the answer turn: more tokens
  one = answer_reading.summary(nll, "search")
  assert 0 < one["tokens"] < reads["tokens"]


def test_the_command_on_a_configs_model(capsys):
  out = answer_reading.main(["--config=configs/quickstart.py:smoke", "--per_subtask=1",
                             "--set=sft.reasoning=calls"])
  printed = capsys.readouterr().out.strip().splitlines()
  assert printed[-1].startswith("RESULT template_acc=") and "figure_nll=" in printed[-1]
  assert out["tokens"] > 0 and 0.0 <= out["figure_acc"] <= 1.0
  assert any(line.startswith("| overall |") for line in printed)
  with pytest.raises(SystemExit):
    answer_reading.main([])
