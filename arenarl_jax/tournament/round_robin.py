"""Round robin: every pair once, in one round; win 1, tie 0.5; min-rank ties."""
from __future__ import annotations

import numpy as np

from arenarl_jax.tournament import topology


def play(n: int, rng: np.random.Generator | None = None) -> topology.Play:
  """Pairs (i, j) with i < j, i as P; rank by points."""
  del rng  # deterministic
  pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
  scores_M2 = yield pairs
  pairs_M2 = np.asarray(pairs)
  points_M = topology.p_points(scores_M2)
  points_G = np.zeros(n, np.float64)
  np.add.at(points_G, pairs_M2[:, 0], points_M)
  np.add.at(points_G, pairs_M2[:, 1], 1.0 - points_M)
  return topology.standing_from_scores(points_G)


def num_matches(n: int) -> int:
  return n * (n - 1) // 2


ROUND_ROBIN = topology.Topology("round_robin", play, num_matches, uses_rng=False)
