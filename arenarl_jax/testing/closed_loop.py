"""The closed loop: twin RL runs in the lookup world (``testing/lookup_world.py``), one on the
judge's advantages and one on a control (``rl.advantage_control``), from one warm start.

Both ``tests/rl/test_closed_loop.py`` (the suite's settings) and ``benchmarks/closed_loop.py``
(the quickstart's RL settings, too slow for the suite) run them. A run is the real loop
(``rl/loop.run`` with ``rl/experience``: the sampler, the agent loop running the tools, the
noise-free rubric judge on the world's checker, seeded single elimination, the tournament's
advantages, the train step) on a 2-layer model, and its measure is the strict verifier on
rollouts of held-out prompts (never the training reward). RL starts, as the main job does,
from a policy that can sometimes do the task: ``sft.steps`` supervised updates with the SFT
stage's trainer on solved trajectories in the rollout's own ids (``lookup_world.warm_rows``).
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any

import jax
import numpy as np
from flax import nnx

from arenarl_jax import config_tree, pipeline
from arenarl_jax.judges.rubric_judge import RubricJudge
from arenarl_jax.models.config import ModelConfig
from arenarl_jax.models.transformer import make_model
from arenarl_jax.rl import loop
from arenarl_jax.rollout.agent_loop import Rollout
from arenarl_jax.sampling import policy_sampler
from arenarl_jax.sft import stage
from arenarl_jax.sft.policy import Policy, with_params
from arenarl_jax.testing import lookup_world


@dataclasses.dataclass(frozen=True)
class Settings:
  """What a pair of twins runs: RL steps, the evaluation points, and the RL keys they differ in."""

  steps: int
  eval_every: int
  prompts: int  # per step; the held-out prompts repeat to fill one such batch
  group: int
  eval_repeats: int  # held-out batches per evaluation (their solved rates pooled)
  warm_steps: int
  rl: dict


SETTINGS = {
    # The suite's: a learning rate that moves a 2-layer model in 40 steps, no KL (no reference
    # pass; the twins differ in their advantages alone), the greedy anchor untrained (with a
    # noise-free judge a solved group is all ties, which single elimination breaks by seed: the
    # anchor wins them, and left untrained its wins do not sharpen a plateau's mode).
    "test": Settings(steps=40, eval_every=20, prompts=8, group=16, eval_repeats=1,
                     warm_steps=40,
                     rl={"sampling.temperature": 1.0, "optim.lr": 1e-3,
                         "optim.schedule": "cosine", "loss.kl_coef": 0.0,
                         "rl.train_anchor": False, "rl.minibatches_per_rollout": 4}),
    # configs/quickstart.py's RL keys: lr, its constant schedule, KL, the trained anchor,
    # temperature, group size, prompts per step and minibatches.
    "quickstart": Settings(steps=600, eval_every=100, prompts=4, group=4, eval_repeats=8,
                           warm_steps=30,
                           rl={"sampling.temperature": 0.8, "optim.lr": 5e-5,
                               "optim.schedule": "constant", "loss.kl_coef": 0.02,
                               "rl.train_anchor": True, "rl.minibatches_per_rollout": 2}),
}


def make_config(settings: Settings, control: str, seed: int):
  c = config_tree.make_base_config()
  c.seed = seed
  # Turns of at most 2 ids: the call is one (it ends its turn), the answer its value and the end.
  c.sampling.update(dict(group_size=settings.group, max_new_tokens=2, max_turns=1, cache_len=64))
  c.rollout.max_observation_tokens = 8
  c.rl.update(dict(prompts_per_step=settings.prompts, steps=settings.steps, bucket=16,
                   logprob_chunk=32, advantage_control=control))
  c.optim.update(dict(weight_decay=0.0, warmup_steps=0))
  c.update_from_flattened_dict(settings.rl)
  c.sft.update(dict(steps=settings.warm_steps, lr=3e-3, warmup_steps=0))
  c.model.remat = "none"
  c.checkpoint.update(dict(every=10**6, keep=1, resume=False))
  c.metrics.update(dict(tensorboard=False, jsonl=False, progress=False))
  return c


def make_policy(tok, seed: int) -> Policy:
  cfg = ModelConfig(vocab_size=tok.vocab_size, d_model=64, n_layers=2, n_heads=2, n_kv_heads=1,
                    head_dim=32, ffn_dim=128, tie_embeddings=True)
  # The reference attention: at these sizes the fastest on CPU.
  return Policy(cfg, make_model(cfg, seed=seed, attention="reference"), tok)


@dataclasses.dataclass
class WarmStarts:
  """What the runs of ``run_twins`` share: the SFT trainer (its step compiled once; every seed's
  model has the same shapes) and the warm-started parameters per seed (twins start from one)."""

  trainer: Any = None
  params: dict = dataclasses.field(default_factory=dict)


def warm_start(config, env, policy: Policy, mesh, rollout: Rollout, seed: int,
               cache: WarmStarts) -> None:
  """``policy.model`` (in place) after ``sft.steps`` supervised updates with the SFT stage's
  trainer on ``lookup_world.warm_rows`` of the training prompts; a seed ``cache`` has seen
  takes its parameters from it."""
  if seed not in cache.params:
    settings = pipeline.sft_settings(config)
    graphdef, params = nnx.split(policy.model)
    params = nnx.to_pure_dict(params)
    if cache.trainer is None:
      cache.trainer = stage.make_trainer(settings, graphdef, params, mesh)
    state = cache.trainer.init_state(params)
    rng, tools = np.random.default_rng(seed), [dict(lookup_world.TOOL)]  # no store drawn
    for _ in range(settings.steps):
      rows = lookup_world.warm_rows(rollout, env.tasks("train"), tools, rng, width=40)
      state, _ = cache.trainer.step(state, None, cache.trainer.put_batch(rows))
    cache.params[seed] = state.params
  nnx.update(policy.model, nnx.state(with_params(policy.model, cache.params[seed])))


def run(settings: Settings, control: str, seed: int, workdir: str,
        warm: WarmStarts | None = None) -> list[tuple[int, float]]:
  """(step, solved rate on the held-out prompts) at step 0, every ``eval_every`` steps and the
  end; ``warm``: the warm starts shared with other runs."""
  config, env = make_config(settings, control, seed), lookup_world.LookupEnv(seed)
  tok = lookup_world.make_tokenizer()
  policy = make_policy(tok, seed)
  mesh = pipeline.make_mesh(config)
  # Each held-out prompt as often as fills a training batch: the same shapes, no new compiles.
  held_out = env.tasks("test_lookup")
  held_out = held_out * (settings.prompts // len(held_out))
  sampling, rollout_settings = pipeline.rollout_settings(config)
  sampler = policy_sampler.make_sampler(sampling, policy.model, mesh)
  rollout = Rollout(sampler, tok, rollout_settings,
                    policy_sampler.sampling_settings(sampling, tok))
  warm_start(config, env, policy, mesh, rollout, seed, WarmStarts() if warm is None else warm)
  source = pipeline.make_experience(config, env, policy, env.tasks("train"),
                                    RubricJudge(env.checker, lookup_world.RUBRIC, seed=seed), mesh)
  curve = []

  def evaluate(step, params):
    policy_sampler.set_policy(sampler, params)
    solved = []
    for r in range(settings.eval_repeats):
      key = jax.random.fold_in(jax.random.key(seed + 1), step * settings.eval_repeats + r)
      batch = rollout.run(held_out, env.tool_source(), group_size=settings.group,
                          valid=env.valid, key=key)
      solved += [env.verify(t).solved for group in batch.trajectories for t in group]
    curve.append((step, float(np.mean(solved))))

  def on_step(step, state, writer):
    del writer
    if step % settings.eval_every == 0 or step == settings.steps:
      evaluate(step, state.params)

  evaluate(0, nnx.to_pure_dict(nnx.split(policy.model)[1]))
  loop.run(pipeline.rl_settings(config), workdir, source, mesh=mesh, model=policy.model,
           on_step=on_step)
  return curve


def run_twins(settings: Settings, seeds, workdir: str,
              controls=("none", "permute")) -> dict[str, list[tuple[int, float]]]:
  """{"<control>_s<seed>": curve} for every seed and control."""
  warm = WarmStarts()
  return {f"{c}_s{seed}": run(settings, c, seed, os.path.join(workdir, f"{c}_s{seed}"), warm)
          for seed in seeds for c in controls}
