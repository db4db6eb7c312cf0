"""Ranks or a final order -> base rewards in [0, 1] -> group-normalized advantages (ARENARL.md §2).

All functions are host-side numpy. Rewards and advantages are float32; the math runs in float64.
``standardize_ranked`` normalizes over the trajectories that have evidence (a tournament's ranked
players, GRPO's judged scores) and gives the others 0; ``trainable`` is the loss mask that goes
with it: a group with fewer than two such trajectories is dropped whole.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

EPS = 1e-6  # added to the unbiased std, as in the paper and the reference code


def _check_group(values: np.ndarray, name: str) -> None:
  if values.ndim < 1 or values.shape[-1] < 2:
    raise ValueError(f"{name}: a group needs at least 2 trajectories, got shape {values.shape}")
  if not np.all(np.isfinite(values)):
    raise ValueError(f"{name}: non-finite values {values!r}")


def min_ranks(scores_G: np.ndarray) -> np.ndarray:
  """Ranks with 1 = highest score; equal scores share the smallest rank ([1, 1, 3, 3])."""
  scores_G = np.asarray(scores_G, np.float64)
  if scores_G.ndim != 1:
    raise ValueError(f"min_ranks: expected a 1-D score vector, got shape {scores_G.shape}")
  _check_group(scores_G, "min_ranks")
  # Rank = 1 + how many scores are strictly greater.
  return (np.searchsorted(np.sort(-scores_G), -scores_G, side="left") + 1).astype(np.int32)


def rewards_from_ranks(ranks_G: np.ndarray) -> np.ndarray:
  """x = (max_rank - rank) / (max_rank - 1); all tied (max_rank 1) gives zeros."""
  ranks_G = np.asarray(ranks_G)
  if ranks_G.ndim != 1:
    raise ValueError(f"rewards_from_ranks: expected 1-D ranks, got shape {ranks_G.shape}")
  _check_group(ranks_G, "rewards_from_ranks")
  if ranks_G.min() != 1:
    raise ValueError(f"rewards_from_ranks: the best rank must be 1, got {ranks_G.tolist()}")
  max_rank = int(ranks_G.max())
  if max_rank == 1:
    return np.zeros(ranks_G.shape, np.float32)
  return ((max_rank - ranks_G) / (max_rank - 1)).astype(np.float32)


def rewards_from_order(order: Sequence[int], ranks_G: np.ndarray | None = None) -> np.ndarray:
  """x_i = 1 - pos_i / (G - 1) for a best-first order of all G indices.

  With ``ranks_G``, players of equal rank are full ties: they must sit next to each other in
  ``order`` and they share the average of their positions' x.
  """
  order_G = np.asarray(order, np.int64)
  g = order_G.shape[0] if order_G.ndim == 1 else 0
  if g < 2 or not np.array_equal(np.sort(order_G), np.arange(g)):
    raise ValueError(f"rewards_from_order: order must be a permutation of 0..G-1 (G >= 2), "
                     f"got {list(order)}")
  x_at_pos = 1.0 - np.arange(g) / (g - 1)
  if ranks_G is not None:
    ranks_at_pos = np.asarray(ranks_G)[order_G]
    if np.any(np.diff(ranks_at_pos) < 0):
      raise ValueError(f"rewards_from_order: ranks {np.asarray(ranks_G).tolist()} do not follow "
                       f"the order {order_G.tolist()}")
    # Average x over each run of equal ranks along the order.
    starts = np.flatnonzero(np.r_[True, np.diff(ranks_at_pos) != 0])
    sums = np.add.reduceat(x_at_pos, starts)
    counts = np.diff(np.r_[starts, g])
    x_at_pos = np.repeat(sums / counts, counts)
  x_G = np.empty(g, np.float64)
  x_G[order_G] = x_at_pos
  return x_G.astype(np.float32)


def standardize(rewards_xG: np.ndarray) -> np.ndarray:
  """(x - mean) / (unbiased std + 1e-6) over the last (group) axis, float32."""
  x = np.asarray(rewards_xG, np.float64)
  _check_group(x, "standardize")
  mean = x.mean(axis=-1, keepdims=True)
  std = x.std(axis=-1, ddof=1, keepdims=True)
  return ((x - mean) / (std + EPS)).astype(np.float32)


MIN_RANKED = 2  # fewer ranked trajectories than this in a group: the group is dropped


def trainable(ranked_xG: np.ndarray) -> np.ndarray:
  """bool [..., G]: ``ranked_xG`` where the group has at least two ranked entries, else False."""
  ranked_xG = np.asarray(ranked_xG, bool)
  return ranked_xG & (ranked_xG.sum(axis=-1, keepdims=True) >= MIN_RANKED)


def standardize_ranked(rewards_xG: np.ndarray, ranked_xG: np.ndarray) -> np.ndarray:
  """``standardize`` over the ranked entries of each group only, float32; unranked entries and
  every entry of a group with fewer than two ranked get 0 (their values are ignored, NaN too).

  A group whose entries are all ranked gives exactly ``standardize``'s values.
  """
  x = np.asarray(rewards_xG, np.float64)
  if x.ndim < 1 or x.shape[-1] < 2:
    raise ValueError(f"standardize_ranked: a group needs at least 2 trajectories, got shape "
                     f"{x.shape}")
  ranked = np.asarray(ranked_xG, bool)
  if ranked.shape != x.shape:
    raise ValueError(f"standardize_ranked: ranked {ranked.shape} does not match rewards "
                     f"{x.shape}")
  if not np.all(np.isfinite(x[ranked])):
    raise ValueError(f"standardize_ranked: non-finite ranked values {x!r}")
  keep = trainable(ranked)
  x = np.where(keep, x, 0.0)
  count = keep.sum(axis=-1, keepdims=True)
  mean = x.sum(axis=-1, keepdims=True) / np.maximum(count, 1)
  var = (np.where(keep, x - mean, 0.0)**2).sum(axis=-1, keepdims=True) / np.maximum(count - 1, 1)
  out = np.where(keep, (x - mean) / (np.sqrt(var) + EPS), 0.0)
  full = keep.all(axis=-1)
  if full.any():  # the unmasked formula, bit for bit
    out[full] = standardize(x[full])
  return out.astype(np.float32)
