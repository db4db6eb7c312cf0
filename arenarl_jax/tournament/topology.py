"""What a topology is: a per-group generator that yields rounds of pairs and returns a Standing.

A topology's ``play(n, rng)`` is a generator. Each ``yield`` is one round: a non-empty list of
(i, j) pairs (i plays as P, j as Q). The engine sends back one entry per pair: a (score_p,
score_q) tuple of floats, or ``None`` for a failed match, and the generator finally returns a
``Standing``.

The failure rule (every topology): the judge could not say which side broke a failed match, so
the rule must hold for both sides, and a failure teaches nothing. A failed match is left out of
the ranking evidence (no points, no entry in any average; where a bracket must advance someone,
the better seed advances, or P, who is random, in double elimination), and both of its players
are UNRANKED (``Standing.ranked`` False): they carry no rank evidence, so training gives them
advantage 0 and loss mask 0 (no reward, no punishment). The others are ranked among themselves:
their base rewards are their standing among the ranked players only, in [0, 1], as if the
unranked were not in the group; the unranked are listed after them, share the rank after the
last ranked one and get the placeholder reward 0. The engine interleaves the generators of all
groups, so each round of every group goes to the judge in one batch. Plain Python lists keep
the per-group cost low: the host bookkeeping for 256 groups must stay far below one judge round
trip.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Collection, Generator

import numpy as np

Pairs = list[tuple[int, int]]
Scores = list[tuple[float, float] | None]  # None = a failed match
Play = Generator[Pairs, Scores, "Standing"]

# Judge sums carry one decimal per direction; float error (e.g. in a mean) must not decide.
TOLERANCE = 1e-6
_DECIMALS = 6
_SCALE = 10**_DECIMALS
_BELOW_ALL = 1 << 62  # sort key (negated score) below every real score


@dataclasses.dataclass(frozen=True)
class Standing:
  """A topology's verdict for one group (failure rule above)."""

  order: tuple[int, ...]  # best first; unranked players last
  ranks: np.ndarray  # int32 [G], 1 = best, min ranks for ties; the unranked share the last
  rewards: np.ndarray  # float32 [G] base rewards x in [0, 1] among the ranked; unranked 0
  ranked: np.ndarray  # bool [G]: False for the players of a failed match (no rank evidence)


@dataclasses.dataclass(frozen=True)
class Topology:
  """A registry entry: the generator and its exact match count (ARENARL.md §4)."""

  name: str
  play: Callable[[int, np.random.Generator | None], Play]
  num_matches: Callable[[int], int]
  uses_rng: bool
  # Its first round is the anchor pass: (i, 0) for i = 1..N-1, in that order, whose scores seed
  # (or, for ``anchor``, are) the final order (tournament/diagnostics.py reads it).
  anchor_seeded: bool = False


def p_points(score_p: float, score_q: float) -> float:
  """Points P gets: 1 win, 0.5 tie (equal within TOLERANCE), 0 loss; Q gets 1 minus that."""
  diff = score_p - score_q
  return 1.0 if diff > TOLERANCE else 0.0 if diff < -TOLERANCE else 0.5


def sort_key(score: float) -> int:
  """A score in [0, 20] quantized so that float noise cannot reorder equal averages."""
  return int(score * _SCALE + 0.5)


def _ranked_mask(n: int, failed: Collection[int]) -> np.ndarray:
  return np.array([p not in failed for p in range(n)], bool)


def standing_from_scores(scores: list[float], failed: Collection[int] = ()) -> Standing:
  """Min ranks by score (anchor, round robin): x = (max_rank - rank) / (max_rank - 1).

  Same as ``rewards.min_ranks`` + ``rewards_from_ranks`` on the quantized scores of the ranked
  players, in plain Python because a group is small and there are hundreds of them. Players in
  ``failed`` are unranked: after everyone else, tied at the next rank, x = 0.
  """
  n = len(scores)
  keys = [_BELOW_ALL if p in failed else -sort_key(s) for p, s in enumerate(scores)]
  order = sorted(range(n), key=keys.__getitem__)  # stable: equal scores by index
  ranks = [0] * n
  rank, previous, max_rank = 0, None, 0
  for position, player in enumerate(order):
    if keys[player] != previous:
      rank, previous = position + 1, keys[player]
    ranks[player] = rank
    if player not in failed:
      max_rank = rank
  x = [(max_rank - r) / (max_rank - 1) if max_rank > 1 and p not in failed else 0.0
       for p, r in enumerate(ranks)]
  return Standing(tuple(order), np.array(ranks, np.int32), np.array(x, np.float32),
                  _ranked_mask(n, failed))


def standing_from_tiers(keys: list[tuple[float, ...]], failed: Collection[int] = ()) -> Standing:
  """Order by descending ``keys`` (then index); equal keys are full ties that share the average
  x of their positions and the smallest rank (Swiss). Same as ``rewards.rewards_from_order`` over
  the ranked players. Players in ``failed`` are unranked: one last tier, x = 0.
  """
  n = len(keys)
  order = sorted(range(n), key=lambda p: (p in failed, tuple(-k for k in keys[p]), p))
  kept = n - len(set(failed) & set(range(n)))
  ranks = [0] * n
  x = [0.0] * n
  start = 0
  while start < n:
    stop = start + 1
    if start >= kept:  # the unranked: everyone left
      stop = n
    while stop < kept and keys[order[stop]] == keys[order[start]]:
      stop += 1
    # The mean of 1 - pos / (kept - 1) over the run of ranked positions.
    shared = 1.0 - (start + stop - 1) / 2 / (kept - 1) if start < kept and kept > 1 else 0.0
    for player in order[start:stop]:
      ranks[player], x[player] = start + 1, shared
    start = stop
  return Standing(tuple(order), np.array(ranks, np.int32), np.array(x, np.float32),
                  _ranked_mask(n, failed))


def standing_from_order(order: list[int], failed: Collection[int] = ()) -> Standing:
  """Strict standing from a best-first order (elimination topologies): x = 1 - pos / (K-1) over
  the K ranked players.

  Players in ``failed`` are unranked: they move behind all others (keeping their order), share
  the rank after the last ranked one and get x = 0.
  """
  n = len(order)
  if sorted(order) != list(range(n)):
    raise AssertionError(f"topology produced an order that is not a permutation: {order}")
  order = [p for p in order if p not in failed] + [p for p in order if p in failed]
  ranks = [0] * n
  rewards = [0.0] * n
  kept = n - len(set(failed) & set(order))
  for position, player in enumerate(order):
    ranks[player] = min(position, kept) + 1
    rewards[player] = (kept - 1 - position) / (kept - 1) if position < kept and kept > 1 else 0.0
  return Standing(tuple(order), np.array(ranks, np.int32), np.array(rewards, np.float32),
                  _ranked_mask(n, failed))


def ceil_log2(n: int) -> int:
  """Smallest k with 2**k >= n (n >= 1)."""
  return (n - 1).bit_length()


def failed_players(pairs: Pairs, scores: Scores) -> set[int]:
  """Both players of every failed (``None``) match of a round."""
  return {p for pair, s in zip(pairs, scores) if s is None for p in pair}


def record(total: list[float], played: list[int], a: int, b: int, sa: float, sb: float) -> None:
  """Adds one match's scores to both players' running totals (for average-score tie-breaks)."""
  total[a] += sa
  total[b] += sb
  played[a] += 1
  played[b] += 1
