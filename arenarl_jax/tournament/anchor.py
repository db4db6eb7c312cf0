"""Anchor topology: every trajectory i >= 1 plays the greedy anchor 0 once, in one round."""
from __future__ import annotations

import numpy as np

from arenarl_jax.tournament import topology


def play(n: int, rng: np.random.Generator | None = None) -> topology.Play:
  """score_i = its match score; the anchor's score = mean of its N-1 scores; min-rank ties.

  A failed match is left out of the anchor's mean, and i and the anchor are unranked (topology.py).
  """
  del rng  # deterministic
  pairs = [(i, 0) for i in range(1, n)]
  results = yield pairs
  scores = [0.0] + [r[0] if r is not None else 0.0 for r in results]
  judged = [r[1] for r in results if r is not None]
  scores[0] = sum(judged) / len(judged) if judged else 0.0
  return topology.standing_from_scores(scores, topology.failed_players(pairs, results))


def num_matches(n: int) -> int:
  return n - 1


ANCHOR = topology.Topology("anchor", play, num_matches, uses_rng=False, anchor_seeded=True)
