"""Closed loop: the RL loop learns a tool-using task from scratch, and from its advantages alone.

Every other RL test checks plumbing (shapes, masks, resume, equal parameters across hosts); this
one checks that the loop learns. It runs the real loop (``rl/loop.run`` with ``rl/experience``:
the sampler, the agent loop running the tools, the noise-free rubric judge on the world's
checker, seeded single elimination, the tournament's advantages, the train step) on a 2-layer
random model in the lookup world (``tests/rl/lookup_env.py``: look ``key0`` up, answer with its
value), and measures the strict verifier on rollouts of held-out prompts at the training
temperature (never the training reward):
  - the run's solved rate rises from below 0.2 to above 0.8 within ``STEPS`` RL steps;
  - its twin, the same run with ``rl.advantage_control="permute"`` (each group's advantages
    shuffled among its members: the same magnitudes, no information), stays below 0.2. So the
    learning comes from the judge's ranking, not from the update's mechanics.
The twins share every compiled program (same shapes: the second run compiles nothing); both
curves are printed (``pytest -s``). The world's partial credit is checked by hand first.

The twins run in one subprocess (``python tests/rl/test_closed_loop.py OUT.json``) on one CPU device
with XLA's default flags: the loop's run time dominates, and the suite's fast-compile flags
(``arenarl_jax/testing/xla_flags.py``) and eight fake devices would make it slower.
"""
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
from arenarl_jax.sft.policy import Policy

SEED = 0
STEPS = 40
EVAL_EVERY = 8
PROMPTS, GROUP = 8, 16


def make_config(control: str):
  c = config_tree.make_base_config()
  c.seed = SEED
  # Turns of at most 2 ids: the call is one (it ends its turn), the answer its value and the end.
  c.sampling.update(dict(group_size=GROUP, temperature=1.0, max_new_tokens=2, max_turns=1,
                         cache_len=64))
  c.rollout.max_observation_tokens = 8
  # With a noise-free judge a solved group is all ties, which single elimination breaks by seed:
  # the greedy anchor wins them. Left untrained, its wins do not sharpen a plateau's mode; the
  # cosine decay then keeps the solved policy where it is.
  c.rl.update(dict(prompts_per_step=PROMPTS, steps=STEPS, minibatches_per_rollout=4, bucket=16,
                   logprob_chunk=32, train_anchor=False, advantage_control=control))
  c.optim.update(dict(lr=5e-3, weight_decay=0.0, schedule="cosine", warmup_steps=0))
  c.loss.kl_coef = 0.0  # a random start is nothing to stay near; no reference pass
  c.model.remat = "none"
  c.checkpoint.update(dict(every=10**6, keep=1, resume=False))
  c.metrics.update(dict(tensorboard=False, jsonl=False, progress=False))
  return c


def make_policy(tok):
  cfg = ModelConfig(vocab_size=tok.vocab_size, d_model=64, n_layers=2, n_heads=2, n_kv_heads=1,
                    head_dim=32, ffn_dim=128, tie_embeddings=True)
  # The reference attention: at these sizes the fastest on CPU.
  return Policy(cfg, make_model(cfg, seed=SEED, attention="reference"), tok)


def run(control: str, workdir: str) -> list[tuple[int, float]]:
  """(step, solved rate on the held-out prompts) at step 0, every EVAL_EVERY steps and the end."""
  config, env, tok = make_config(control), lookup_env.LookupEnv(SEED), lookup_env.make_tokenizer()
  policy = make_policy(tok)
  mesh = pipeline.make_mesh(config)
  source = pipeline.make_experience(config, env, policy, env.tasks("train"),
                                    RubricJudge(env.checker, lookup_env.RUBRIC, seed=SEED), mesh)
  # Each held-out prompt as often as fills a training batch: the same shapes, no new compiles.
  held_out = env.tasks("test_lookup")
  held_out = held_out * (PROMPTS // len(held_out))
  sampling, rollout_settings = pipeline.rollout_settings(config)
  sampler = policy_sampler.make_sampler(sampling, policy.model, mesh)
  rollout = Rollout(sampler, tok, rollout_settings,
                    policy_sampler.sampling_settings(sampling, tok))
  curve = []

  def evaluate(step, params):
    policy_sampler.set_policy(sampler, params)
    batch = rollout.run(held_out, env.tool_source(), group_size=GROUP, valid=env.valid,
                        key=jax.random.fold_in(jax.random.key(SEED + 1), step))
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
  env = lookup_env.LookupEnv(SEED)
  value, call = env.value, types.ToolCall("lookup", {"key": lookup_env.KEY})
  looked = types.Step(tool_calls=(call,), tool_results=(value,))
  ladder = [_trajectory("answer", types.Step(content=value)),  # a guess: no lookup
            _trajectory("max_turns", looked, types.Step(tool_calls=(call,))),
            _trajectory("length", looked, types.Step(content="fetch")),
            _trajectory("length", looked, types.Step(content=f"{value} fetch")),
            _trajectory("answer", looked, types.Step(content=value))]
  scores = RubricJudge(env.checker, lookup_env.RUBRIC).score(ladder).scores
  np.testing.assert_array_equal(scores, [1.5, 3.5, 5.0, 6.5, 10.0])
  assert [env.verify(t).solved for t in ladder] == [False] * 4 + [True]
  assert env.verify(ladder[0]).unmet == ("lookup",)
  wrong = next(v for v in lookup_env.VALUES if v != value)
  assert env.verify(_trajectory("answer", looked, types.Step(content=wrong))).unmet == ("value",)


CONTROLS = ("none", "permute")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def run_twins(workdir: str) -> dict[str, list[tuple[int, float]]]:
  return {control: run(control, os.path.join(workdir, control)) for control in CONTROLS}


@pytest.fixture(scope="module")
def curves(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("closed_loop")
  env = dict(os.environ, XLA_FLAGS="", PYTHONPATH=ROOT)
  proc = subprocess.run([sys.executable, os.path.abspath(__file__), str(tmp / "curves.json")],
                        env=env, cwd=tmp, capture_output=True, text=True, timeout=900,
                        check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  out = json.load(open(tmp / "curves.json", encoding="utf-8"))
  for control, curve in out.items():
    print(f"\nCURVES {control}: " + " ".join(f"{s}:{r:.2f}" for s, r in curve))
  return out


def test_the_loop_learns_the_lookup_on_held_out_prompts(curves):
  rates = [r for _, r in curves["none"]]
  assert rates[0] < 0.2 and rates[-1] > 0.8, curves["none"]


def test_permuted_advantages_teach_nothing(curves):
  assert max(r for _, r in curves["permute"]) < 0.2, curves["permute"]


if __name__ == "__main__":  # the fixture's subprocess (its directory is on sys.path)
  with open(sys.argv[1], "w", encoding="utf-8") as f:
    json.dump(run_twins(os.path.dirname(os.path.abspath(sys.argv[1]))), f)
