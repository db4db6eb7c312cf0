"""Seeded single elimination (the paper's choice): anchor-pass seeding, then a seeded bracket.

The bracket has P = 2**ceil(log2 N) slots in standard seeding order; slots for seeds >= N are
phantoms that give the top P - N seeds a first-round bye (**ours**, ARENARL.md §4), so the bracket
plays exactly N - 1 real matches after the N - 1 seeding matches.
"""
from __future__ import annotations

import numpy as np

from arenarl_jax.tournament import topology


def bracket_order(size: int) -> list[int]:
  """Standard seeding order of a power-of-two bracket: 8 -> [0, 7, 3, 4, 1, 6, 2, 5]."""
  if size < 1 or size & (size - 1):
    raise ValueError(f"bracket_order: size must be a power of two, got {size}")
  order = [0]
  while len(order) < size:
    order = [s for seed in order for s in (seed, 2 * len(order) - 1 - seed)]
  return order


def play(n: int, rng: np.random.Generator | None = None) -> topology.Play:
  """Champion first, then each round's losers from the final backwards (avg score, then seed)."""
  del rng  # deterministic: ties go to the better seed
  scores: list[list[float]] = [[] for _ in range(n)]
  seeding = [(i, 0) for i in range(1, n)]
  scores_M2 = yield seeding
  for (i, _), (si, s0) in zip(seeding, scores_M2.tolist()):
    scores[i].append(si)
    scores[0].append(s0)
  mean = [topology.quantize_one(sum(s) / len(s)) for s in scores]
  by_seed = sorted(range(n), key=lambda p: (-mean[p], p))
  seed_of = {p: k for k, p in enumerate(by_seed)}
  size = 1 << topology.ceil_log2(n)
  slots = [by_seed[k] if k < n else None for k in bracket_order(size)]
  round_losers: list[list[int]] = []
  while len(slots) > 1:
    pairs, advancing = [], []
    for a, b in zip(slots[0::2], slots[1::2]):
      if b is None:  # a phantom only ever faces a top seed in the first round
        advancing.append(a)
      else:
        pairs.append((a, b))
        advancing.append(None)
    scores_M2 = yield pairs
    losers = []
    for (a, b), (sa, sb) in zip(pairs, scores_M2.tolist()):
      scores[a].append(sa)
      scores[b].append(sb)
      qa, qb = topology.quantize_one(sa), topology.quantize_one(sb)
      a_wins = qa > qb or (qa == qb and seed_of[a] < seed_of[b])
      advancing[advancing.index(None)] = a if a_wins else b
      losers.append(b if a_wins else a)
    round_losers.append(losers)
    slots = advancing
  average = [topology.quantize_one(sum(s) / len(s)) for s in scores]
  order = [slots[0]]
  for losers in reversed(round_losers):
    order.extend(sorted(losers, key=lambda p: (-average[p], seed_of[p])))
  return topology.standing_from_order(order)


def num_matches(n: int) -> int:
  return 2 * n - 2


SINGLE_ELIMINATION = topology.Topology("single_elimination", play, num_matches, uses_rng=False)
