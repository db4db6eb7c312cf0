"""The failure rule on every topology, and hand-worked tie-breaks against ARENARL.md §4.

Rule (tournament/topology.py): a failed match is left out of the ranking evidence and both of
its players are unranked (advantage 0, ``ranked`` False: no gradient), whichever side broke the
judge; the others are ranked and standardized among themselves. tests/rl/test_failure_rule.py
checks the rule's advantages and masks under random failure patterns.
"""
import itertools

import numpy as np
import pytest

from arenarl_jax import tournament
from arenarl_jax.judges.synthetic import ScoreMatrixJudge
from arenarl_jax.types import Trajectory

NAMES = ("anchor", "round_robin", "swiss", "double_elimination", "single_elimination")
# The example: S[i][j] = the bidirectional sum i gets against j.
S4 = np.array([[0, 19.36, 16.19, 0.93], [5.42, 0, 12.89, 11.19], [19.59, 15.60, 0, 4.90],
               [9.77, 19.08, 5.55, 0]])


def groups(n, copies=1):
  return [[Trajectory(query="q") for _ in range(n)] for _ in range(copies)]


def rank(s, name, seed=0, fail_pairs=()):
  return tournament.rank(groups(len(s)), ScoreMatrixJudge(s, fail_pairs=fail_pairs), name, seed,
                         failure_threshold=1.0)[0]


def test_single_elimination_anchor_seeding_is_one_entry():
  # Seeds 2 (19.59), 0 (mean 12.16), 3 (9.77), 1 (5.42); 2 beats 1, 3 beats 0, 3 beats 2.
  # Round-1 losers by the mean of their points lists: 1: (5.42 + 12.89) / 2 = 9.155,
  # anchor: (12.16 + 0.93) / 2 = 6.545 -> 3, 2, 1, 0 (N-1 separate entries would give 3, 2, 0, 1).
  res = rank(S4, "single_elimination")
  assert res.order == (3, 2, 1, 0)
  np.testing.assert_allclose(res.base_rewards, [0.0, 1 / 3, 2 / 3, 1.0], atol=1e-6)


def test_double_elimination_hand_checked_n4():
  # Seed 0 pairs WB (1 v 0), (3 v 2): 0 and 3 win. Then WB 0 v 3 (3), LB 2 v 1 (2, 1 out);
  # LB 2 v 0 (2, 0 out); final 3 v 2 (3). Order: 3, 2, then eliminations latest first: 0, 1.
  res = rank(S4, "double_elimination")
  assert [(m.i, m.j) for m, _ in res.matches] == [(1, 0), (3, 2), (0, 3), (2, 1), (2, 0), (3, 2)]
  assert res.order == (3, 2, 0, 1)


def test_double_elimination_orders_a_batch_by_average_match_score():
  rng = np.random.default_rng(5)
  seen = 0
  for seed in range(40):
    s = rng.uniform(0, 20, (8, 8))
    res = rank(s, "double_elimination", seed)
    total, played = np.zeros(8), np.zeros(8)
    for m, r in res.matches:
      total[[m.i, m.j]] += (r.score_p, r.score_q)
      played[[m.i, m.j]] += 1
    # With N = 8 the first losers-bracket round eliminates two players at once: they are
    # positions 6 and 7, the higher average first.
    last_two = res.order[-2:]
    avg = total / played
    assert avg[last_two[0]] >= avg[last_two[1]]
    seen += avg[last_two[0]] > avg[last_two[1]]
  assert seen > 30


def test_anchor_failure_hand_checked():
  # (1, 0) fails: 1 and the anchor are unranked; 2 (12) and 3 (8) are ranked among themselves.
  s = np.array([[0, 10, 8, 12], [10, 0, 0, 0], [12, 0, 0, 0], [8, 0, 0, 0.0]])
  res = rank(s, "anchor", fail_pairs=[(1, 0)])
  assert res.order == (2, 3, 0, 1) and res.failures == 1
  np.testing.assert_array_equal(res.ranks, [3, 3, 1, 2])
  np.testing.assert_allclose(res.base_rewards, [0.0, 0.0, 1.0, 0.0])
  np.testing.assert_array_equal(res.ranked, [False, False, True, True])
  np.testing.assert_allclose(res.advantages, [0.0, 0.0, 0.70710, -0.70710], atol=1e-5)


def test_swiss_failure_hand_checked():
  # N = 4, two rounds. Every match of player 3 fails: 3 and its opponents are unranked; with
  # two of them the other two are ranked, with three the group is dropped.
  s = np.array([[0, 12, 14, 10], [8, 0, 11, 10], [6, 9, 0, 10], [10, 10, 10, 0.0]])
  res = rank(s, "swiss", fail_pairs=[(3, k) for k in range(3)])
  failed = {p for m, r in res.matches if not r.ok for p in (m.i, m.j)}
  assert 3 in failed and len(failed) >= 2
  for p in failed:
    assert res.base_rewards[p] == 0.0 and res.ranks[p] == 5 - len(failed)
    assert not res.ranked[p] and res.advantages[p] == 0.0
  assert set(res.order[-len(failed):]) == failed
  others = sorted(set(range(4)) - failed)
  assert list(res.ranked[others]) == [len(others) >= 2] * len(others)


def test_single_elimination_failure_better_seed_advances():
  # Seeds 2, 0, 3, 1. The final (2 v 3) fails: the better seed 2 is "champion" for the bracket
  # but both finalists are unranked; the round-1 losers 1 and 0 are ranked, 1 first.
  res = rank(S4, "single_elimination", fail_pairs=[(2, 3)])
  assert [(m.i, m.j) for m, _ in res.matches][-1] == (2, 3)
  assert res.order == (1, 0, 2, 3)
  np.testing.assert_array_equal(res.ranks, [2, 1, 3, 3])
  np.testing.assert_allclose(res.base_rewards, [0.0, 1.0, 0.0, 0.0], atol=1e-6)
  np.testing.assert_array_equal(res.ranked, [True, True, False, False])
  np.testing.assert_allclose(res.advantages, [-0.70710, 0.70710, 0.0, 0.0], atol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_no_player_gains_from_a_failure(name):
  """Property: failing any set of pairs gives every player of a failed match (both sides)
  advantage 0, ``ranked`` False and base reward 0, listed after everyone else; the ranked
  players' base rewards span [0, 1] among themselves (Swiss, and single elimination after tied
  matches: full ties share the mean of their positions, so their mean is 0.5)."""
  rng = np.random.default_rng(hash(name) % 2**32)
  for trial in range(60):
    n = int(rng.integers(2, 9))
    s = rng.uniform(0, 20, (n, n)).round(1)
    if trial % 3 == 0:  # many exact ties
      s = rng.integers(0, 3, (n, n)) * 10.0
    pairs = list(itertools.combinations(range(n), 2))
    if trial % 2:  # one player breaks every one of its matches (an injector)
      culprit = int(rng.integers(n))
      fail = [p for p in pairs if culprit in p]
    else:
      fail = [p for p in pairs if rng.random() < 0.3]
    seed = int(rng.integers(1000))
    broken = rank(s, name, seed, fail_pairs=fail)
    failed = {p for m, r in broken.matches if not r.ok for p in (m.i, m.j)}
    assert broken.failures == len([r for _, r in broken.matches if not r.ok])
    for p in failed:
      assert broken.base_rewards[p] == 0.0 and broken.advantages[p] == 0.0
      assert not broken.ranked[p] and broken.ranks[p] == broken.ranks.max()
    if failed:
      assert set(broken.order[-len(failed):]) == failed
      assert broken.ranks.max() == n - len(failed) + 1
    kept = [p for p in range(n) if p not in failed]
    assert broken.ranked.sum() == (len(kept) if len(kept) >= 2 else 0)
    x = broken.base_rewards[kept]
    if len(kept) >= 2 and np.ptp(x) > 0 and name in ("swiss", "single_elimination"):
      assert x.mean() == pytest.approx(0.5)
    elif len(kept) >= 2 and np.ptp(x) > 0:
      assert x.max() == 1.0 and x.min() == 0.0
    assert broken.base_rewards.max() <= 1.0 and broken.base_rewards.min() >= 0.0
