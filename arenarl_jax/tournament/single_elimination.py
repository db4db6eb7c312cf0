"""Seeded single elimination (the paper's choice): anchor-pass seeding, then a seeded bracket.

The bracket has P = 2**ceil(log2 N) slots in standard seeding order; slots for seeds >= N are
phantoms that give the top P - N seeds a first-round bye (**ours**, ARENARL.md §4), so the bracket
plays exactly N - 1 real matches after the N - 1 seeding matches.
"""
from __future__ import annotations

import functools

import numpy as np

from arenarl_jax.tournament import topology


@functools.lru_cache(maxsize=None)
def bracket_order(size: int) -> tuple[int, ...]:
  """Standard seeding order of a power-of-two bracket: 8 -> (0, 7, 3, 4, 1, 6, 2, 5)."""
  if size < 1 or size & (size - 1):
    raise ValueError(f"bracket_order: size must be a power of two, got {size}")
  order = [0]
  while len(order) < size:
    order = [s for seed in order for s in (seed, 2 * len(order) - 1 - seed)]
  return tuple(order)


def play(n: int, rng: np.random.Generator | None = None) -> topology.Play:
  """Champion first, then each round's losers from the final backwards (avg score, then seed)."""
  del rng  # deterministic: ties go to the better seed
  tol, key = topology.TOLERANCE, topology.sort_key
  total = [0.0] * n
  played = [1] * n
  played[0] = n - 1
  scores = yield [(i, 0) for i in range(1, n)]
  for i, (si, s0) in enumerate(scores, start=1):
    total[i] = si
    total[0] += s0
  # Seed by mean score so far, descending; equal means: lower index first.
  by_seed = [p for _, p in sorted([(-key(t / k), p)
                                   for p, (t, k) in enumerate(zip(total, played))])]
  seed_of = [0] * n
  for k, p in enumerate(by_seed):
    seed_of[p] = k
  # Seeds >= n are phantoms; they only ever sit opposite a top seed in the first round.
  slots = [by_seed[k] if k < n else -1 for k in bracket_order(1 << topology.ceil_log2(n))]
  round_losers: list[list[int]] = []
  while len(slots) > 1:
    pairs = [(a, b) for a, b in zip(slots[0::2], slots[1::2]) if b >= 0]
    scores = yield pairs
    winners, losers = [], []
    for (a, b), (sa, sb) in zip(pairs, scores):
      topology.record(total, played, a, b, sa, sb)
      diff = sa - sb
      # The higher score wins; a tie (within tolerance) goes to the better seed.
      if diff > tol or (diff >= -tol and seed_of[a] < seed_of[b]):
        winners.append(a)
        losers.append(b)
      else:
        winners.append(b)
        losers.append(a)
    round_losers.append(losers)
    if len(pairs) < len(slots) // 2:  # first round with byes: top seeds advance unplayed
      won = iter(winners)
      winners = [a if b < 0 else next(won) for a, b in zip(slots[0::2], slots[1::2])]
    slots = winners
  order = slots
  for losers in reversed(round_losers):
    # Inside a round: higher average score (seeding and matches) first, then the better seed.
    order += [p for *_, p in sorted([(-key(total[p] / played[p]), seed_of[p], p)
                                     for p in losers])]
  return topology.standing_from_order(order)


def num_matches(n: int) -> int:
  return 2 * n - 2


SINGLE_ELIMINATION = topology.Topology("single_elimination", play, num_matches, uses_rng=False)
