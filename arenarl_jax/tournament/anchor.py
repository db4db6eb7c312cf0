"""Anchor topology: every trajectory i >= 1 plays the greedy anchor 0 once, in one round."""
from __future__ import annotations

import numpy as np

from arenarl_jax.tournament import topology


def play(n: int, rng: np.random.Generator | None = None) -> topology.Play:
  """score_i = its match score; the anchor's score = mean of its N-1 scores; min-rank ties."""
  del rng  # deterministic
  scores_M2 = yield [(i, 0) for i in range(1, n)]
  scores_G = np.empty(n, np.float64)
  scores_G[1:] = scores_M2[:, 0]
  scores_G[0] = scores_M2[:, 1].mean()
  return topology.standing_from_scores(scores_G)


def num_matches(n: int) -> int:
  return n - 1


ANCHOR = topology.Topology("anchor", play, num_matches, uses_rng=False)
