"""What a topology is: a per-group generator that yields rounds of pairs and returns a Standing.

A topology's ``play(n, rng)`` is a generator. Each ``yield`` is one round: a non-empty list of
(i, j) pairs (i plays as P, j as Q). The engine sends back a float64 array ``scores_M2`` with one
row (score_p, score_q) per pair, failed matches already turned into (10, 10) ties, and the
generator finally returns a ``Standing``. The engine interleaves the generators of all groups, so
every round of every group goes to the judge in one batch.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Generator

import numpy as np

from arenarl_jax import advantages

Pairs = list[tuple[int, int]]
Play = Generator[Pairs, np.ndarray, "Standing"]

# Scores closer than this are equal: judge sums carry one decimal per direction, and float error
# (e.g. in the anchor's mean score) must not decide a match.
_DECIMALS = 6


@dataclasses.dataclass(frozen=True)
class Standing:
  """A topology's verdict for one group."""

  order: tuple[int, ...]  # best first
  ranks: np.ndarray  # int32 [G], 1 = best, min ranks for ties
  rewards: np.ndarray  # float32 [G] base rewards x in [0, 1]


@dataclasses.dataclass(frozen=True)
class Topology:
  """A registry entry: the generator and its exact match count (ARENARL.md §4)."""

  name: str
  play: Callable[[int, np.random.Generator | None], Play]
  num_matches: Callable[[int], int]
  uses_rng: bool


def quantize(scores: np.ndarray) -> np.ndarray:
  """Scores rounded so that float noise cannot break a tie."""
  return np.round(np.asarray(scores, np.float64), _DECIMALS)


def quantize_one(score: float) -> float:
  """``quantize`` for one Python float (hot loops: no numpy call per match)."""
  return round(score, _DECIMALS)


def p_points(scores_M2: np.ndarray) -> np.ndarray:
  """Points P gets per match: 1 win, 0.5 tie, 0 loss (Q gets 1 minus that)."""
  diff_M = quantize(scores_M2[:, 0]) - quantize(scores_M2[:, 1])
  return np.where(diff_M > 0, 1.0, np.where(diff_M == 0, 0.5, 0.0))


def standing_from_scores(scores_G: np.ndarray) -> Standing:
  """Min-rank standing by score, best first, equal scores by index (anchor, round robin)."""
  ranks_G = advantages.min_ranks(quantize(scores_G))
  order = np.lexsort((np.arange(len(ranks_G)), ranks_G))
  return Standing(tuple(order.tolist()), ranks_G, advantages.rewards_from_ranks(ranks_G))


def standing_from_order(order: list[int]) -> Standing:
  """Strict standing from a best-first order (elimination topologies)."""
  ranks_G = np.empty(len(order), np.int32)
  ranks_G[np.asarray(order)] = np.arange(1, len(order) + 1, dtype=np.int32)
  return Standing(tuple(order), ranks_G, advantages.rewards_from_order(order))


def ceil_log2(n: int) -> int:
  """Smallest k with 2**k >= n (n >= 1)."""
  return (n - 1).bit_length()
