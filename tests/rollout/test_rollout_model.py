"""The rollout with the real sampler on a tiny random model steered into tool calls: end to end,
compile counts, and the recorded log-probs against a teacher-forced pass."""
import functools
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from arenarl_jax.envs.base import Task
from arenarl_jax.models.config import PRESETS
from arenarl_jax.models.logprobs import token_logprobs
from arenarl_jax.models.transformer import make_model
from arenarl_jax.rollout.agent_loop import CompileCounter, Rollout
from arenarl_jax.rollout.settings import RolloutSettings
from arenarl_jax.sampling.sampler import Sampler, SamplingSettings
from arenarl_jax.testing.rollout_fakes import FakeToolSource, Steered, smollm2_tokenizer


def tasks(offset):
  # Same token lengths in both rollouts (one digit changes), so the shapes repeat.
  return [Task(id=f"fake/t/{b}", env="fake", subtask="t", query=f"Trip plan number {b + offset}?")
          for b in range(2)]


@pytest.fixture(scope="module")
def rolled():
  tok = smollm2_tokenizer()
  model = Steered(make_model(PRESETS["tiny"], seed=3), tok, boost=16.0)
  # One cache size in use (160 slots per row's own tokens) keeps the compiles, and the test, short.
  sampler = Sampler(model, cache_len=384, cache_sizes=(160,))
  sampling = SamplingSettings(temperature=0.9, max_new_tokens=24, eos_ids=(tok.eos_id,))
  rollout = Rollout(sampler, tok, RolloutSettings(max_turns=2, tool_timeout_s=5.0), sampling)
  source = FakeToolSource(names=("lookup",))
  batches, counts, shared = [], [], []
  # The second rollout is a later wave of an evaluation (its rows start at global group 7):
  # the row offset is traced, so it must not recompile anything.
  for k, (offset, first_group) in enumerate(((0, 0), (5, 7))):
    with CompileCounter() as counter:
      batches.append(rollout.run(tasks(offset), source, group_size=4, key=jax.random.key(k),
                                 first_group=first_group))
    counts.append(counter.count)
    shared.append(set(sampler.shared_group_sizes))
  return model, tok, batches, counts, shared


def test_end_to_end_tasks_by_four(rolled):
  _, tok, batches, _, _ = rolled
  batch = batches[0]
  finishes = [t.finish_reason for g in batch.trajectories for t in g]
  assert len(finishes) == 8 and "error" not in finishes
  assert batch.stats["tool_calls"] > 0 and batch.stats["turns"] >= 2
  answered = [s for g in batch.trajectories for t in g for s in t.steps if s.tool_results]
  assert answered and all(s.tool_calls[0].name == "lookup"
                          and s.tool_results == ("lookup result for {}",) for s in answered)
  for g in batch.trajectories:
    for i, t in enumerate(g):
      assert t.metadata["greedy"] == (i == 0)
      spans = t.metadata["turn_spans"]
      mask = np.zeros(len(t.tokens), np.int32)
      for a, b in spans:
        mask[a:b] = 1
      np.testing.assert_array_equal(t.loss_mask, mask)
      assert t.tokens[:t.metadata["prompt_len"]].tolist() == t.tokens[:spans[0][0]].tolist()
  # The anchors of both groups are greedy on the same prompt shape: same path.
  assert batch.trajectories[0][0].metadata["turn_stop_reasons"] == (
      batch.trajectories[1][0].metadata["turn_stop_reasons"])


def test_compiles_are_bounded_and_a_second_rollout_compiles_nothing(rolled):
  _, _, batches, counts, shared = rolled
  first, second = (b.stats for b in batches)
  assert set(second["cache_sizes"]) <= set(first["cache_sizes"])
  assert set(second["obs_buckets"]) <= set(first["obs_buckets"])
  assert shared[1] == shared[0]  # the second roll-out's shared extends had the first's shapes
  # prefill (one prompt bucket), begin/end of a turn, fold_in; per cache size a decode and a
  # resize, and an extend per observation bucket; per size of a shared extend's groups
  # (sampling/shared_rows.py) the same again: its take, put and extends.
  sizes, obs = len(first["cache_sizes"]), len(first["obs_buckets"])
  bound = 4 + (1 + len(shared[0])) * sizes * (2 + obs)
  assert counts[0] <= bound, (counts, first["cache_sizes"], first["obs_buckets"], shared[0])
  assert counts[1] == 0


def test_recorded_logprobs_equal_a_teacher_forced_pass(rolled):
  model, _, batches, _, _ = rolled
  trajs = [t for g in batches[0].trajectories for t in g]
  n = max(len(t.tokens) for t in trajs)
  tokens = np.zeros((len(trajs), n), np.int32)
  for k, t in enumerate(trajs):
    tokens[k, :len(t.tokens)] = t.tokens  # padding after a row does not change its log-probs
  temperature = np.asarray([t.metadata["logprob_temperature"] for t in trajs], np.float32)
  assert set(temperature.tolist()) == {1.0, np.float32(0.9).item()}  # greedy anchors at T = 1, sampled rows at theirs
  forced = jax.jit(functools.partial(token_logprobs, model))
  want = np.asarray(forced(jnp.asarray(tokens), temperature=jnp.asarray(temperature)))
  for k, t in enumerate(trajs):
    m = t.loss_mask.astype(bool)
    np.testing.assert_allclose(t.logprobs[m], want[k, :len(t.tokens)][m], atol=1e-4, rtol=0)
    assert not t.logprobs[~m].any()


def test_a_program_loaded_from_the_persistent_cache_counts_as_built(tmp_path):
  """A fresh process with its own persistent compilation cache compiles one program, clears its
  in-memory caches and calls it again: the second build is a load from the cache, and the
  counter counts both (the suite's processes share one cache, so a count that left loads out
  would depend on which tests ran first)."""
  code = textwrap.dedent("""
      import jax, jax.numpy as jnp
      from arenarl_jax.rollout.agent_loop import CompileCounter
      loads = []
      jax.monitoring.register_event_listener(
          lambda event, **_: loads.append(event) if event == "/jax/compilation_cache/cache_hits" else None)
      x = jnp.arange(3.0)
      with CompileCounter() as counter:
        jax.jit(lambda v: jnp.sin(v) * 3)(x).block_until_ready()
        jax.clear_caches()
        jax.jit(lambda v: jnp.sin(v) * 3)(x).block_until_ready()
      print(counter.count, len(loads))
      """)
  env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": str(tmp_path),
         "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
         "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120, check=True)
  assert out.stdout.split() == ["2", "1"], out.stdout + out.stderr[-2000:]
