"""Closed loop: the RL loop raises how often a policy reads a tool's result, from its advantages
alone.

Every other RL test checks plumbing (shapes, masks, resume, equal parameters across hosts); this
one checks that the loop learns. ``arenarl_jax/testing/closed_loop.py`` runs the real loop on a
2-layer model in the lookup world (``arenarl_jax/testing/lookup_world.py``: look ``key0`` up,
answer with the value the lookup returned, which changes with every lookup, so only reading it
answers) and measures the strict verifier on rollouts of held-out prompts at the training
temperature (never the training reward). Like the main job, RL starts from a policy that can
sometimes do the task: a short supervised warm start leaves it copying the value in a third to a
half of the held-out rollouts. For each of two seeds (world and model), at the suite's settings
(``closed_loop.SETTINGS["test"]``):
  - the run's solved rate rises by at least ``GAIN``;
  - its twin, the same run with ``rl.advantage_control="permute"`` (each group's advantages
    shuffled among its members: the same magnitudes, no information), never rises above its
    start. So the gain comes from the judge's ranking, not from the update's mechanics.
The twins of a seed share every compiled program (same shapes: the second run compiles
nothing); the curves are printed (``pytest -s``). The world's partial credit and its store are
checked by hand first. The quickstart's RL settings learn too slowly for the suite:
``benchmarks/closed_loop.py`` runs their twins.

The runs go in one subprocess (``python tests/rl/test_closed_loop.py OUT.json``) on one CPU device
with XLA's default flags: the loop's run time dominates, and the suite's fast-compile flags
(``arenarl_jax/testing/xla_flags.py``) and eight fake devices would make it slower.
"""
import asyncio
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from arenarl_jax import types
from arenarl_jax.judges.rubric_judge import RubricJudge
from arenarl_jax.testing import closed_loop, lookup_world

SEEDS = (0, 1)
GAIN = 0.25
SETTINGS = closed_loop.SETTINGS["test"]


def _trajectory(finish: str, *steps: types.Step) -> types.Trajectory:
  return types.Trajectory("find read key0", steps=steps, finish_reason=finish,
                          metadata={"task_id": "lookup/12"})


def test_the_worlds_credit_is_a_ladder_and_its_verifier_is_strict():
  env = lookup_world.LookupEnv(0)
  value, call = "val2", types.ToolCall("lookup", {"key": lookup_world.KEY})
  looked = types.Step(tool_calls=(call,), tool_results=(value,))
  ladder = [_trajectory("answer", types.Step(content=value)),  # a guess: no lookup
            _trajectory("max_turns", looked, types.Step(tool_calls=(call,))),
            _trajectory("length", looked, types.Step(content="fetch")),
            _trajectory("length", looked, types.Step(content=f"{value} fetch")),
            _trajectory("answer", looked, types.Step(content=value))]
  scores = RubricJudge(env.checker, lookup_world.RUBRIC).score(ladder).scores
  np.testing.assert_array_equal(scores, [1.5, 3.5, 5.0, 6.5, 10.0])
  assert [env.verify(t).solved for t in ladder] == [False] * 4 + [True]
  assert env.verify(ladder[0]).unmet == ("lookup", "value")  # a guess is never the value
  wrong = next(v for v in lookup_world.VALUES if v != value)
  assert env.verify(_trajectory("answer", looked, types.Step(content=wrong))).unmet == ("value",)


def test_every_lookup_draws_its_value_and_a_seeded_world_draws_the_same():
  async def values(env, n):
    store = env.tool_source()
    return [(await store.call("lookup", {"key": lookup_world.KEY})).text for _ in range(n)]

  first = asyncio.run(values(lookup_world.LookupEnv(0), 64))
  assert set(first) == set(lookup_world.VALUES)  # not one value per world
  assert asyncio.run(values(lookup_world.LookupEnv(0), 64)) == first
  assert asyncio.run(values(lookup_world.LookupEnv(1), 64)) != first
  env = lookup_world.LookupEnv(0)
  env.tool_source()
  assert asyncio.run(values(env, 64)) != first  # the next store draws anew
  store = env.tool_source()
  assert not asyncio.run(store.call("lookup", {"key": "key9"})).ok


HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


@pytest.fixture(scope="module")
def curves(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("closed_loop")
  env = dict(os.environ, XLA_FLAGS="", PYTHONPATH=ROOT)
  proc = subprocess.run([sys.executable, os.path.abspath(__file__), str(tmp / "curves.json")],
                        env=env, cwd=tmp, capture_output=True, text=True, timeout=900,
                        check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  out = json.load(open(tmp / "curves.json", encoding="utf-8"))
  for name, curve in out.items():
    print(f"\nCURVES {name}: " + " ".join(f"{s}:{r:.2f}" for s, r in curve))
  return out


def test_the_warm_start_sometimes_reads_the_value(curves):
  for seed in SEEDS:
    start = curves[f"none_s{seed}"][0][1]
    assert 0.1 < start < 0.6, curves[f"none_s{seed}"]
    assert curves[f"permute_s{seed}"][0][1] == start  # the twins start from one policy


@pytest.mark.parametrize("seed", SEEDS)
def test_the_loop_learns_to_read_the_value_on_held_out_prompts(curves, seed):
  rates = [r for _, r in curves[f"none_s{seed}"]]
  assert rates[-1] >= rates[0] + GAIN, curves[f"none_s{seed}"]


@pytest.mark.parametrize("seed", SEEDS)
def test_permuted_advantages_teach_nothing(curves, seed):
  rates = [r for _, r in curves[f"permute_s{seed}"]]
  assert max(rates[1:]) <= rates[0], curves[f"permute_s{seed}"]


if __name__ == "__main__":  # the fixture's subprocess (its directory is on sys.path)
  with open(sys.argv[1], "w", encoding="utf-8") as f:
    json.dump(closed_loop.run_twins(SETTINGS, SEEDS, os.path.dirname(os.path.abspath(sys.argv[1]))),
              f)
