"""Trajectories + advantages -> the training batch (ARCHITECTURE.md "Training batch"), host numpy.

Keys: tokens_NT int32, loss_mask_NT float32, advantages_N float32, temperature_N float32 (greedy
rows at T = 1, the distribution their log-probs are scored at), sampler_logp_NT float32,
policy_step_N int32. Rows are right-padded with token 0 and mask 0 to a multiple of ``bucket``
tokens (a few static shapes, few compiles); extra all-padding rows (mask 0, counted by no
normaliser) bring the row count to a multiple of ``rows_multiple`` (the shard count).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from arenarl_jax.types import Trajectory

BATCH_KEYS = ("tokens_NT", "loss_mask_NT", "advantages_N", "temperature_N", "sampler_logp_NT",
              "policy_step_N")  # make_batch's keys, in its order


def bucket_length(t: int, bucket: int) -> int:
  """The smallest multiple of ``bucket`` >= t (at least one bucket)."""
  return max(1, -(-t // bucket)) * bucket


def make_batch(trajectories: Sequence[Trajectory], advantages_N, *, bucket: int = 64,
               rows_multiple: int = 1, train_anchor: bool = True,
               default_temperature: float = 1.0) -> dict[str, np.ndarray]:
  """The training batch for ``trajectories`` (one row each, in order) and their advantages.

  ``train_anchor=False`` zeroes the loss mask of greedy rows (``metadata["greedy"]``). Rows
  without rank evidence (``metadata["ranked"]`` False: a failed judge match or score) always get
  loss mask 0: no policy or KL gradient, and no normaliser counts them.
  """
  advantages_N = np.asarray(advantages_N, np.float32)
  if advantages_N.shape != (len(trajectories),):
    raise ValueError(f"make_batch: {len(trajectories)} trajectories but advantages of shape "
                     f"{advantages_N.shape}")
  if not trajectories:
    raise ValueError("make_batch: no trajectories")
  if not np.all(np.isfinite(advantages_N)):
    raise ValueError(f"make_batch: non-finite advantages at rows "
                     f"{np.flatnonzero(~np.isfinite(advantages_N)).tolist()}")
  for r, traj in enumerate(trajectories):
    if traj.tokens is None or traj.loss_mask is None:
      raise ValueError(f"make_batch: row {r} has no tokens or loss_mask")
    t = len(traj.tokens)
    if len(traj.loss_mask) != t or (traj.logprobs is not None and len(traj.logprobs) != t):
      raise ValueError(f"make_batch: row {r}: tokens ({t}), loss_mask ({len(traj.loss_mask)}) "
                       f"and logprobs ({None if traj.logprobs is None else len(traj.logprobs)}) "
                       "differ in length")
  t_max = bucket_length(max(len(traj.tokens) for traj in trajectories), bucket)
  n = -(-len(trajectories) // rows_multiple) * rows_multiple
  out = {
      "tokens_NT": np.zeros((n, t_max), np.int32),
      "loss_mask_NT": np.zeros((n, t_max), np.float32),
      "advantages_N": np.zeros((n,), np.float32),
      "temperature_N": np.ones((n,), np.float32),
      "sampler_logp_NT": np.zeros((n, t_max), np.float32),
      "policy_step_N": np.zeros((n,), np.int32),
  }
  for r, traj in enumerate(trajectories):
    t = len(traj.tokens)
    meta = traj.metadata or {}
    greedy = bool(meta.get("greedy", False))
    out["tokens_NT"][r, :t] = traj.tokens
    out["loss_mask_NT"][r, :t] = np.asarray(traj.loss_mask, np.float32)
    if (greedy and not train_anchor) or not bool(meta.get("ranked", True)):
      out["loss_mask_NT"][r] = 0.0
    if traj.logprobs is not None:
      out["sampler_logp_NT"][r, :t] = traj.logprobs
    temperature = float(meta.get("temperature", default_temperature))
    out["temperature_N"][r] = 1.0 if greedy or temperature <= 0 else temperature
    out["advantages_N"][r] = advantages_N[r]
    out["policy_step_N"][r] = int(meta.get("policy_step", 0))
  return out


def split_rows(batch: dict[str, np.ndarray], parts: int) -> list[dict[str, np.ndarray]]:
  """The minibatches of one rollout batch: rows ``m::parts`` go to minibatch m, so the padding
  rows at the end are spread over all of them (no minibatch of padding only)."""
  n = batch["tokens_NT"].shape[0]
  if n % parts:
    raise ValueError(f"split_rows: {n} rows do not split into rl.minibatches_per_rollout={parts}")
  return [{k: v[m::parts] for k, v in batch.items()} for m in range(parts)]
