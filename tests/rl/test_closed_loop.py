"""Closed loop: the RL loop raises how often a policy reads a tool's result, from its advantages
alone.

Every other RL test checks plumbing (shapes, masks, resume, equal parameters across hosts); this
one checks that the loop learns. It runs the real loop (``rl/loop.run`` with ``rl/experience``:
the sampler, the agent loop running the tools, the noise-free rubric judge on the world's
checker, seeded single elimination, the tournament's advantages, the train step) on a 2-layer
model in the lookup world (``tests/rl/lookup_env.py``: look ``key0`` up, answer with the value
the lookup returned, which changes with every lookup, so only reading it answers), and measures
the strict verifier on rollouts of held-out prompts at the training temperature (never the
training reward). Like the main job, RL starts from a policy that can sometimes do the task: a
short supervised warm start (``WARM_STEPS`` updates on solved trajectories in the rollout's own
ids) leaves it copying the value in about a third of the held-out rollouts. For each of two
seeds (world and model):
  - the run's solved rate rises by at least ``GAIN`` within ``STEPS`` RL steps;
  - its twin, the same run with ``rl.advantage_control="permute"`` (each group's advantages
    shuffled among its members: the same magnitudes, no information), never rises above its
    start. So the gain comes from the judge's ranking, not from the update's mechanics.
The twins of a seed share every compiled program (same shapes: the second run compiles
nothing); the curves are printed (``pytest -s``). The world's partial credit is checked by hand
first.

The runs go in one subprocess (``python tests/rl/test_closed_loop.py OUT.json``) on one CPU device
with XLA's default flags: the loop's run time dominates, and the suite's fast-compile flags
(``arenarl_jax/testing/xla_flags.py``) and eight fake devices would make it slower.
"""
import asyncio
import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest
from flax import nnx

import lookup_env  # tests/rl/lookup_env.py
from arenarl_jax import config_tree, pipeline, types
from arenarl_jax.judges.rubric_judge import RubricJudge
from arenarl_jax.models.config import ModelConfig
from arenarl_jax.models.transformer import make_model
from arenarl_jax.rl import loop
from arenarl_jax.rollout.agent_loop import Rollout
from arenarl_jax.sampling import policy_sampler
from arenarl_jax.sft import stage
from arenarl_jax.sft.policy import Policy, with_params

SEEDS = (0, 1)
WARM_STEPS = 40
STEPS = 40
EVAL_EVERY = 20
GAIN = 0.25
PROMPTS, GROUP = 8, 16


def make_config(control: str, seed: int):
  c = config_tree.make_base_config()
  c.seed = seed
  # Turns of at most 2 ids: the call is one (it ends its turn), the answer its value and the end.
  c.sampling.update(dict(group_size=GROUP, temperature=1.0, max_new_tokens=2, max_turns=1,
                         cache_len=64))
  c.rollout.max_observation_tokens = 8
  # With a noise-free judge a solved group is all ties, which single elimination breaks by seed:
  # the greedy anchor wins them. Left untrained, its wins do not sharpen a plateau's mode; the
  # cosine decay then keeps the solved policy where it is.
  c.rl.update(dict(prompts_per_step=PROMPTS, steps=STEPS, minibatches_per_rollout=4, bucket=16,
                   logprob_chunk=32, train_anchor=False, advantage_control=control))
  c.optim.update(dict(lr=1e-3, weight_decay=0.0, schedule="cosine", warmup_steps=0))
  c.loss.kl_coef = 0.0  # no reference pass: the twins differ in their advantages alone
  c.sft.update(dict(steps=WARM_STEPS, lr=3e-3, warmup_steps=0))
  c.model.remat = "none"
  c.checkpoint.update(dict(every=10**6, keep=1, resume=False))
  c.metrics.update(dict(tensorboard=False, jsonl=False, progress=False))
  return c


def make_policy(tok, seed: int):
  cfg = ModelConfig(vocab_size=tok.vocab_size, d_model=64, n_layers=2, n_heads=2, n_kv_heads=1,
                    head_dim=32, ffn_dim=128, tie_embeddings=True)
  # The reference attention: at these sizes the fastest on CPU.
  return Policy(cfg, make_model(cfg, seed=seed, attention="reference"), tok)


def warm_start(config, env, policy, mesh, rollout, seed: int) -> None:
  """``sft.steps`` supervised updates of ``policy.model`` (in place) with the SFT stage's trainer
  on ``lookup_env.warm_rows`` of the training prompts."""
  settings = pipeline.sft_settings(config)
  graphdef, params = nnx.split(policy.model)
  params = nnx.to_pure_dict(params)
  trainer = stage.make_trainer(settings, graphdef, params, mesh)
  state = trainer.init_state(params)
  rng, tools = np.random.default_rng(seed), env.tool_source().tools()
  for _ in range(settings.steps):
    rows = lookup_env.warm_rows(rollout, env.tasks("train"), tools, rng, width=40)
    state, _ = trainer.step(state, None, trainer.put_batch(rows))
  nnx.update(policy.model, nnx.state(with_params(policy.model, state.params)))


def run(control: str, seed: int, workdir: str) -> list[tuple[int, float]]:
  """(step, solved rate on the held-out prompts) at step 0, every EVAL_EVERY steps and the end."""
  config, env = make_config(control, seed), lookup_env.LookupEnv(seed)
  tok = lookup_env.make_tokenizer()
  policy = make_policy(tok, seed)
  mesh = pipeline.make_mesh(config)
  # Each held-out prompt as often as fills a training batch: the same shapes, no new compiles.
  held_out = env.tasks("test_lookup")
  held_out = held_out * (PROMPTS // len(held_out))
  sampling, rollout_settings = pipeline.rollout_settings(config)
  sampler = policy_sampler.make_sampler(sampling, policy.model, mesh)
  rollout = Rollout(sampler, tok, rollout_settings,
                    policy_sampler.sampling_settings(sampling, tok))
  warm_start(config, env, policy, mesh, rollout, seed)
  source = pipeline.make_experience(config, env, policy, env.tasks("train"),
                                    RubricJudge(env.checker, lookup_env.RUBRIC, seed=seed), mesh)
  curve = []

  def evaluate(step, params):
    policy_sampler.set_policy(sampler, params)
    batch = rollout.run(held_out, env.tool_source(), group_size=GROUP, valid=env.valid,
                        key=jax.random.fold_in(jax.random.key(seed + 1), step))
    curve.append((step, float(np.mean([env.verify(t).solved
                                       for group in batch.trajectories for t in group]))))

  def on_step(step, state, writer):
    del writer
    if step % EVAL_EVERY == 0 or step == STEPS:
      evaluate(step, state.params)

  evaluate(0, nnx.to_pure_dict(nnx.split(policy.model)[1]))
  loop.run(pipeline.rl_settings(config), workdir, source, mesh=mesh, model=policy.model,
           on_step=on_step)
  return curve


def _trajectory(finish: str, *steps: types.Step) -> types.Trajectory:
  return types.Trajectory("find read key0", steps=steps, finish_reason=finish,
                          metadata={"task_id": "lookup/12"})


def test_the_worlds_credit_is_a_ladder_and_its_verifier_is_strict():
  env = lookup_env.LookupEnv(0)
  value, call = "val2", types.ToolCall("lookup", {"key": lookup_env.KEY})
  looked = types.Step(tool_calls=(call,), tool_results=(value,))
  ladder = [_trajectory("answer", types.Step(content=value)),  # a guess: no lookup
            _trajectory("max_turns", looked, types.Step(tool_calls=(call,))),
            _trajectory("length", looked, types.Step(content="fetch")),
            _trajectory("length", looked, types.Step(content=f"{value} fetch")),
            _trajectory("answer", looked, types.Step(content=value))]
  scores = RubricJudge(env.checker, lookup_env.RUBRIC).score(ladder).scores
  np.testing.assert_array_equal(scores, [1.5, 3.5, 5.0, 6.5, 10.0])
  assert [env.verify(t).solved for t in ladder] == [False] * 4 + [True]
  assert env.verify(ladder[0]).unmet == ("lookup", "value")  # a guess is never the value
  wrong = next(v for v in lookup_env.VALUES if v != value)
  assert env.verify(_trajectory("answer", looked, types.Step(content=wrong))).unmet == ("value",)


def test_every_lookup_draws_its_value_and_a_seeded_world_draws_the_same():
  async def values(env, n):
    store = env.tool_source()
    return [(await store.call("lookup", {"key": lookup_env.KEY})).text for _ in range(n)]

  first = asyncio.run(values(lookup_env.LookupEnv(0), 64))
  assert set(first) == set(lookup_env.VALUES)  # not one value per world
  assert asyncio.run(values(lookup_env.LookupEnv(0), 64)) == first
  assert asyncio.run(values(lookup_env.LookupEnv(1), 64)) != first
  env = lookup_env.LookupEnv(0)
  env.tool_source()
  assert asyncio.run(values(env, 64)) != first  # the next store draws anew
  store = env.tool_source()
  assert not asyncio.run(store.call("lookup", {"key": "key9"})).ok


CONTROLS = ("none", "permute")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def run_twins(workdir: str) -> dict[str, list[tuple[int, float]]]:
  return {f"{control}_s{seed}": run(control, seed, os.path.join(workdir, f"{control}_s{seed}"))
          for seed in SEEDS for control in CONTROLS}


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
    json.dump(run_twins(os.path.dirname(os.path.abspath(sys.argv[1]))), f)
