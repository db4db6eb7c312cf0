"""Double elimination: a winners and a losers bracket with seeded random pairings, then a final.

Each engine round plays the next winners-bracket round together with the losers-bracket round for
the batch that dropped in the previous round (the two are independent), so the rounds overlap.
Every winners-bracket match drops one player (N-1), every losers-bracket match eliminates one
(N-2), plus the grand final without reset: exactly 2N-2 matches.
"""
from __future__ import annotations

import numpy as np

from arenarl_jax.tournament import topology


def _pair(players: list[int], rng: np.random.Generator) -> tuple[topology.Pairs, list[int]]:
  """Random pairs of ``players``; with an odd count the last of the shuffle gets a bye."""
  if len(players) < 2:
    return [], list(players)
  shuffled = rng.permutation(players).tolist()
  pairs = list(zip(shuffled[0::2], shuffled[1::2]))
  return pairs, shuffled[len(pairs) * 2:]


def play(n: int, rng: np.random.Generator | None = None) -> topology.Play:
  """Final order: final winner, loser, then losers-bracket eliminations, latest batch first."""
  if rng is None:
    raise ValueError("double_elimination: needs a seeded numpy Generator for its pairings")
  total = [0.0] * n
  played = [0] * n
  unbeaten = list(range(n))
  one_loss: list[int] = []
  eliminated: list[list[int]] = []  # batches, earliest first
  failed: set[int] = set()  # players of a failed match: unranked at the end (topology.py)

  def settle(pairs, scores):
    """(winners, losers) of ``pairs``; on a tie or a failed match P advances (P is random: pairs
    are shuffled; in the grand final P is the winners-bracket champion)."""
    won, lost = [], []
    failed.update(topology.failed_players(pairs, scores))
    for (a, b), s in zip(pairs, scores):
      a_wins = True
      if s is not None:
        topology.record(total, played, a, b, *s)
        a_wins = topology.p_points(*s) >= 0.5
      won.append(a if a_wins else b)
      lost.append(b if a_wins else a)
    return won, lost

  while len(unbeaten) > 1 or len(one_loss) > 1:
    wb_pairs, wb_byes = _pair(unbeaten, rng)
    lb_pairs, lb_byes = _pair(one_loss, rng)
    scores = yield wb_pairs + lb_pairs
    wb_won, wb_lost = settle(wb_pairs, scores[:len(wb_pairs)])
    lb_won, lb_lost = settle(lb_pairs, scores[len(wb_pairs):])
    unbeaten = wb_won + wb_byes
    one_loss = lb_won + lb_byes + wb_lost
    if lb_lost:
      eliminated.append(lb_lost)
  # Grand final, no reset: on a tie (or a failure) the undefeated winners-bracket champion wins.
  final = [(unbeaten[0], one_loss[0])]
  (champion,), (runner_up,) = settle(final, (yield final))
  # Inside a batch: higher average judged-match score first, then a seeded random tie-break.
  average = [topology.sort_key(t / max(p, 1)) for t, p in zip(total, played)]
  tiebreak = rng.permutation(n).tolist()
  order = [champion, runner_up]
  for batch in reversed(eliminated):
    order.extend(sorted(batch, key=lambda p: (-average[p], tiebreak[p])))
  return topology.standing_from_order(order, failed)


def num_matches(n: int) -> int:
  return 2 * n - 2


DOUBLE_ELIMINATION = topology.Topology("double_elimination", play, num_matches, uses_rng=True)
