"""A stand-in rollout: random token sequences with masks, sampler log-probs and judged advantages.

It has the real rollout's interface and the state a resume must restore: a stateful judge-noise
generator and a judge reply cache, both in ``state_dict()``. Everything else is a pure function of
(seed, step, prompt id), so any split of the prompts over hosts gives the same rows.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from arenarl_jax.tournament import rewards
from arenarl_jax.types import Trajectory


class FakeRollout:
  """Groups of G random trajectories per prompt id; row 0 of a group is the greedy anchor."""

  def __init__(self, *, vocab_size: int, group_size: int, num_prompts: int, prompt_len: int = 6,
               max_new_tokens: int = 20, temperature: float = 0.8, seed: int = 0,
               judge_noise: float = 0.3):
    if group_size < 2:
      raise ValueError(f"FakeRollout: group_size must be >= 2, got {group_size}")
    self.vocab_size, self.group_size, self.num_prompts = vocab_size, group_size, num_prompts
    self.prompt_len, self.max_new_tokens = prompt_len, max_new_tokens
    self.temperature, self.seed, self.judge_noise = temperature, seed, judge_noise
    self._noise = np.random.default_rng([seed, 7])  # advances every step: must be checkpointed
    self._cache: dict[str, list[float]] = {}  # judge replies by (step, prompt): restored on resume

  def state_dict(self) -> dict[str, Any]:
    return {"noise": self._noise.bit_generator.state, "cache": dict(self._cache)}

  def load_state_dict(self, state: Mapping[str, Any]) -> None:
    self._noise.bit_generator.state = dict(state["noise"])
    self._cache = {k: list(v) for k, v in state["cache"].items()}

  def _group(self, step: int, prompt: int) -> list[Trajectory]:
    rng = np.random.default_rng([self.seed, step, prompt])
    prompt_ids = rng.integers(0, self.vocab_size, self.prompt_len)
    rows = []
    for g in range(self.group_size):
      new = int(rng.integers(1, self.max_new_tokens + 1))
      tokens = np.concatenate([prompt_ids, rng.integers(0, self.vocab_size, new)]).astype(np.int32)
      mask = np.r_[np.zeros(self.prompt_len), np.ones(new)].astype(np.int32)
      logprobs = np.where(mask > 0, -rng.gamma(2.0, 1.0, len(tokens)), 0.0).astype(np.float32)
      rows.append(Trajectory(query=f"prompt {prompt}", tokens=tokens, loss_mask=mask,
                             logprobs=logprobs, finish_reason="answer",
                             metadata={"task_id": f"fake/{prompt}", "policy_step": step,
                                       "greedy": g == 0,
                                       "temperature": 0.0 if g == 0 else self.temperature}))
    return rows

  def __call__(self, params, *, step: int, prompt_ids: Sequence[int], all_prompt_ids: Sequence[int],
               key=None):
    """(trajectories, advantages_N, stats) for ``prompt_ids`` (this host's share of the step's
    ``all_prompt_ids``). ``params`` and ``key`` are unused: the rows do not depend on the policy."""
    del params, key
    # One noise draw per prompt of the whole step, on every host: the same whatever the split.
    noise = self._noise.normal(size=(len(all_prompt_ids), self.group_size)) * self.judge_noise
    trajectories, adv, hits = [], [], 0
    for p in prompt_ids:
      group = self._group(step, p)
      cache_key = f"{step}/{p}"
      if cache_key in self._cache:
        hits += 1
      else:
        quality = [float(np.mean(t.tokens[t.loss_mask > 0]) / self.vocab_size) for t in group]
        self._cache[cache_key] = quality
      scores = np.asarray(self._cache[cache_key]) + noise[list(all_prompt_ids).index(p)]
      trajectories += group
      adv.append(rewards.standardize(scores))
    stats = {"rollout/judge_cache_hits": hits, "rollout/judge_cache_size": len(self._cache),
             "rollout/mean_new_tokens": float(np.mean([t.loss_mask.sum() for t in trajectories]))}
    return trajectories, np.concatenate(adv).astype(np.float32), stats
