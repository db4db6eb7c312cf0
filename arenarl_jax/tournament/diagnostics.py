"""How much a tournament's final order agrees with its anchor seeding (RL_PITFALLS "Greedy anchor").

Topologies whose first round is the anchor pass (``Topology.anchor_seeded``: ``anchor``,
``single_elimination``) give every trajectory a seeding score: trajectory i >= 1 its score
against the greedy anchor 0, the anchor the mean of its scores in those matches (a failed match
gives its challenger 0 and is left out of the anchor's mean, as single elimination seeds). The
agreement of one group is Kendall's tau-b between the seeding scores and the final standing
(higher score vs better rank): 1 when the bracket only confirmed the seeding, lower the more it
reordered. ``anchor`` ranks by the seeding scores themselves, so it always gives 1 (when
defined). Only ranked trajectories count (``GroupResult.ranked``: an unranked one's rank is a
placeholder). A group whose seeding or final ranks are all tied among its ranked trajectories
has no tau and is left out; other topologies have no seeding and get None.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
from scipy import stats as scipy_stats

from arenarl_jax.tournament import registry
from arenarl_jax.types import GroupResult


def seeding_scores(result: GroupResult, n: int) -> np.ndarray:
  """The anchor-pass score of each of the group's ``n`` trajectories, float64 [n], read from the
  first n - 1 entries of the match log (which must be (i, 0) for i = 1..n-1)."""
  log = result.matches[:n - 1]
  pairs = [(m.i, m.j) for m, _ in log]
  if pairs != [(i, 0) for i in range(1, n)]:
    raise ValueError(f"seeding_scores: the match log does not start with the anchor pass "
                     f"(1, 0) .. ({n - 1}, 0); it starts with {pairs}")
  scores = np.zeros(n, np.float64)
  anchor = []
  for m, r in log:
    if r.ok:
      scores[m.i] = r.score_p
      anchor.append(r.score_q)
  scores[0] = float(np.mean(anchor)) if anchor else 0.0
  return scores


def seeding_tau(result: GroupResult) -> float | None:
  """Kendall's tau-b between the group's seeding scores and its final ranks over its ranked
  trajectories (None if undefined)."""
  n = len(result.ranks)
  ranked = np.asarray(result.ranked, bool)
  scores = seeding_scores(result, n)[ranked]
  ranks = -np.asarray(result.ranks, np.float64)[ranked]  # higher = better, like the scores
  if len(scores) < 2:
    return None
  if np.ptp(scores) == 0 or np.ptp(ranks) == 0:
    return None
  tau = scipy_stats.kendalltau(scores, ranks).statistic
  return None if not np.isfinite(tau) else float(tau)


def mean_seeding_tau(results: Sequence[GroupResult], topology: str) -> float | None:
  """The mean ``seeding_tau`` over the groups that have one; None when the topology has no anchor
  seeding or no group has a defined tau."""
  if not registry.TOPOLOGIES[topology].anchor_seeded:
    return None
  taus = [t for t in map(seeding_tau, results) if t is not None]
  return float(np.mean(taus)) if taus else None
