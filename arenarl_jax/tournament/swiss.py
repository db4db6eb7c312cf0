"""Swiss system: R = min(ceil(log2 N), N - 1) rounds of score-group pairings (ARENARL.md §4).

Every round pairs all players except one bye when N is odd, so the match count is exactly
R * floor(N / 2) whatever the rematch avoidance does: when the greedy pass finds no new opponent
for a player it accepts a rematch rather than leave anyone unpaired.
"""
from __future__ import annotations

import numpy as np

from arenarl_jax.tournament import topology


def num_rounds(n: int) -> int:
  return min(topology.ceil_log2(n), n - 1)


def play(n: int, rng: np.random.Generator | None = None) -> topology.Play:
  """Pair down the (points, random) order; bye to the lowest-placed player without one."""
  if rng is None:
    raise ValueError("swiss: needs a seeded numpy Generator for its random orderings")
  points = [0.0] * n
  failed: set[int] = set()  # players of a failed match: unranked at the end (topology.py)
  had_bye = [False] * n
  opponents: list[set[int]] = [set() for _ in range(n)]
  for _ in range(num_rounds(n)):
    # Random order inside equal points: a stable sort of a random permutation.
    ranking = sorted(rng.permutation(n).tolist(), key=lambda p: -points[p])
    if n % 2:
      bye = next(p for p in reversed(ranking) if not had_bye[p])
      ranking.remove(bye)
      had_bye[bye] = True
      points[bye] += 1.0
    pairs = []
    while ranking:
      a = ranking.pop(0)
      k = next((k for k, b in enumerate(ranking) if b not in opponents[a]), 0)
      b = ranking.pop(k)
      opponents[a].add(b)
      opponents[b].add(a)
      pairs.append((a, b))
    scores = yield pairs
    failed |= topology.failed_players(pairs, scores)
    for (a, b), s in zip(pairs, scores):
      if s is None:  # no points; they still count as opponents (no rematch, Buchholz)
        continue
      won = topology.p_points(*s)
      points[a] += won
      points[b] += 1.0 - won
  # Buchholz = sum of distinct opponents' final points; points and Buchholz are multiples of
  # 0.5, so equal keys are exact full ties.
  buchholz = [sum(points[o] for o in opp) for opp in opponents]
  return topology.standing_from_tiers(list(zip(points, buchholz)), failed)


def num_matches(n: int) -> int:
  return num_rounds(n) * (n // 2)


SWISS = topology.Topology("swiss", play, num_matches, uses_rng=True)
