"""Seeded single elimination (the paper's choice): anchor-pass seeding, then a seeded bracket.

The bracket has P = 2**ceil(log2 N) slots in standard seeding order; slots for seeds >= N are
phantoms that give the top P - N seeds a first-round bye (**ours**, ARENARL.md §4), so the bracket
plays exactly N - 1 real matches after the N - 1 seeding matches.

A seed never decides a standing (**ours**). A tied bracket match (equal scores within
``topology.TOLERANCE``) still sends the better seed on, but it is no evidence that the loser is
worse: the loser shares the standing of the player that eliminated it (along a chain of ties).
Losers of one round with equal average scores share their standing too, as full ties share in
Swiss. The reference orders both kinds of tie by seed, so a group whose every match tied gets
the full spread of advantages by index: pure noise for the policy. Where the judge separates
the players, the standing is the reference's order.
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
  """Champion first, then each round's losers from the final backwards by average score.

  Every player keeps a list of points (as ``total`` and ``played``): player i >= 1 one entry, its
  seeding score; the anchor ONE entry, the mean of its N-1 seeding scores; then one entry per
  bracket match. A failed match adds no entry, the better seed advances, and both players are
  unranked (topology.py).
  """
  del rng  # deterministic: ties go to the better seed
  tol, key = topology.TOLERANCE, topology.sort_key
  total = [0.0] * n
  played = [0] * n
  seeding = [(i, 0) for i in range(1, n)]
  scores = yield seeding
  failed = topology.failed_players(seeding, scores)
  anchor_scores = []
  for i, s in enumerate(scores, start=1):
    if s is not None:
      total[i], played[i] = s[0], 1
      anchor_scores.append(s[1])
  if anchor_scores:
    total[0], played[0] = sum(anchor_scores) / len(anchor_scores), 1

  def mean(p: int) -> int:
    return key(total[p] / played[p]) if played[p] else 0

  # Seed by mean score so far, descending; equal means: lower index first.
  by_seed = sorted(range(n), key=lambda p: (-mean(p), p))
  seed_of = [0] * n
  for k, p in enumerate(by_seed):
    seed_of[p] = k
  # Seeds >= n are phantoms; they only ever sit opposite a top seed in the first round.
  slots = [by_seed[k] if k < n else -1 for k in bracket_order(1 << topology.ceil_log2(n))]
  round_losers: list[list[int]] = []
  tied_with: dict[int, int] = {}  # loser of a tied match -> the player that eliminated it
  while len(slots) > 1:
    pairs = [(a, b) for a, b in zip(slots[0::2], slots[1::2]) if b >= 0]
    scores = yield pairs
    failed |= topology.failed_players(pairs, scores)
    winners, losers = [], []
    for (a, b), s in zip(pairs, scores):
      diff = 0.0
      if s is not None:
        topology.record(total, played, a, b, *s)
        diff = s[0] - s[1]
      # The higher score wins; a tie (within tolerance) or a failure goes to the better seed.
      if diff > tol or (diff >= -tol and seed_of[a] < seed_of[b]):
        winners.append(a)
        losers.append(b)
      else:
        winners.append(b)
        losers.append(a)
      if s is not None and abs(diff) <= tol:
        tied_with[losers[-1]] = winners[-1]
    round_losers.append(losers)
    if len(pairs) < len(slots) // 2:  # first round with byes: top seeds advance unplayed
      won = iter(winners)
      winners = [a if b < 0 else next(won) for a, b in zip(slots[0::2], slots[1::2])]
    slots = winners
  # Standing key: the round a player went out in (the champion: one past the final), then the
  # mean of its points list. Equal keys are full ties, so no seed decides between players the
  # judge did not separate; the loser of a tied match takes the key of the player that
  # eliminated it (along a chain of ties). Where the keys differ, this is the reference's order.
  out_key = {slots[0]: (len(round_losers), 0)}
  for r, losers in enumerate(round_losers):
    out_key.update({p: (r, mean(p)) for p in losers})

  def standing_key(p: int) -> tuple[int, int]:
    while p in tied_with:
      p = tied_with[p]
    return out_key[p]

  return topology.standing_from_tiers([standing_key(p) for p in range(n)], failed)


def num_matches(n: int) -> int:
  return 2 * n - 2


SINGLE_ELIMINATION = topology.Topology("single_elimination", play, num_matches, uses_rng=False,
                                       anchor_seeded=True)
