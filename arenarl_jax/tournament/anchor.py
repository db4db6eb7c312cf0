"""Anchor topology: every trajectory i >= 1 plays the greedy anchor 0 once, in one round."""
from __future__ import annotations

import numpy as np

from arenarl_jax.tournament import topology


def play(n: int, rng: np.random.Generator | None = None) -> topology.Play:
  """score_i = its match score; the anchor's score = mean of its N-1 scores; min-rank ties."""
  del rng  # deterministic
  results = yield [(i, 0) for i in range(1, n)]
  scores = [0.0] + [score_i for score_i, _ in results]
  scores[0] = sum(score_anchor for _, score_anchor in results) / (n - 1)
  return topology.standing_from_scores(scores)


def num_matches(n: int) -> int:
  return n - 1


ANCHOR = topology.Topology("anchor", play, num_matches, uses_rng=False)
