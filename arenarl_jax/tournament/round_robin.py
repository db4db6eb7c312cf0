"""Round robin: every pair once, in one round; win 1, tie 0.5; min-rank ties."""
from __future__ import annotations

import numpy as np

from arenarl_jax.tournament import topology


def play(n: int, rng: np.random.Generator | None = None) -> topology.Play:
  """Pairs (i, j) with i < j, i as P; rank by points; a failed match gives no points and
  unranks both players (topology.py)."""
  del rng  # deterministic
  pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
  scores = yield pairs
  points = [0.0] * n
  for (i, j), s in zip(pairs, scores):
    if s is None:
      continue
    won = topology.p_points(*s)
    points[i] += won
    points[j] += 1.0 - won
  return topology.standing_from_scores(points, topology.failed_players(pairs, scores))


def num_matches(n: int) -> int:
  return n * (n - 1) // 2


ROUND_ROBIN = topology.Topology("round_robin", play, num_matches, uses_rng=False)
