"""Tournament engine: hand vectors, exact match counts, lockstep batching, failures, errors."""
import logging
import math

import numpy as np
import pytest

from arenarl_jax import tournament
from arenarl_jax.judges.synthetic import NoisyJudge, ScoreMatrixJudge
from arenarl_jax.types import MatchResult, Trajectory

NAMES = ("anchor", "round_robin", "swiss", "double_elimination", "single_elimination")


def make_groups(sizes, query="q"):
  return [[Trajectory(query=f"{query}{b}", metadata={"b": b, "i": i}) for i in range(n)]
          for b, n in enumerate(sizes)]


def expected_matches(name, n):
  """ARENARL.md §4, written out independently of the registry."""
  rounds = min(math.ceil(math.log2(n)), n - 1)
  return {"anchor": n - 1, "round_robin": n * (n - 1) // 2, "swiss": rounds * (n // 2),
          "double_elimination": 2 * n - 2, "single_elimination": 2 * n - 2}[name]


def pairwise(entries, n, default=10.0):
  """Score matrix from {(i, j): (score_i, score_j)}."""
  s = np.full((n, n), default)
  for (i, j), (si, sj) in entries.items():
    s[i, j], s[j, i] = si, sj
  return s


def test_registry_keys_are_the_config_values():
  assert set(tournament.TOPOLOGIES) == set(NAMES)
  assert all(t.name == k for k, t in tournament.TOPOLOGIES.items())


def test_anchor_hand_vector_n4():
  s = pairwise({(1, 0): (10, 10), (2, 0): (12, 8), (3, 0): (8, 12)}, 4)
  (res,) = tournament.rank(make_groups([4]), ScoreMatrixJudge(s), "anchor", 0)
  np.testing.assert_array_equal(res.ranks, [2, 2, 1, 4])
  np.testing.assert_allclose(res.advantages, [0.19868, 0.19868, 0.99340, -1.39076], atol=1e-5)
  assert res.order == (2, 0, 1, 3)
  assert [(m.i, m.j) for m, _ in res.matches] == [(1, 0), (2, 0), (3, 0)]
  assert res.advantages.dtype == np.float32 and res.base_rewards.dtype == np.float32


RR_N4 = {(0, 1): (12, 8), (0, 2): (10, 10), (0, 3): (8, 12), (1, 2): (12, 8), (1, 3): (12, 8),
         (2, 3): (10, 10)}


def test_round_robin_hand_vector_n4():
  (res,) = tournament.rank(make_groups([4]), ScoreMatrixJudge(pairwise(RR_N4, 4)),
                           "round_robin", 0)
  np.testing.assert_array_equal(res.ranks, [2, 1, 4, 2])
  np.testing.assert_allclose(res.advantages, [0.19868, 0.99340, -1.39076, 0.19868], atol=1e-5)
  assert res.order == (1, 0, 3, 2)
  assert res.requests == 12 and res.failures == 0
  assert res.ranked.dtype == bool and res.ranked.all()


@pytest.mark.parametrize("name", NAMES)
def test_match_counts_for_every_n_from_2_to_17(name):
  sizes = list(range(2, 18))
  judges = [NoisyJudge(np.random.default_rng(0).normal(size=17)),
            NoisyJudge(np.arange(17.0), noise="gaussian", noise_level=3.0, tie_rate=0.3, seed=1),
            ScoreMatrixJudge(np.full((17, 17), 10.0))]  # everything tied
  for judge in judges:
    results = tournament.rank(make_groups(sizes), judge, name, 7)
    for n, res in zip(sizes, results):
      assert len(res.matches) == expected_matches(name, n), (name, n)
      assert res.requests == 2 * len(res.matches)
      assert sorted(res.order) == list(range(n))
      assert all(m.i != m.j for m, _ in res.matches)


def test_match_counts_match_the_table_at_8_and_16():
  table = {"anchor": (7, 15), "round_robin": (28, 120), "swiss": (12, 32),
           "double_elimination": (14, 30), "single_elimination": (14, 30)}
  for name, counts in table.items():
    res = tournament.rank(make_groups([8, 16]), NoisyJudge(np.arange(16.0)), name, 0)
    assert tuple(len(r.matches) for r in res) == counts


@pytest.mark.parametrize("name,rounds", [("anchor", 1), ("round_robin", 1), ("swiss", 4),
                                         ("single_elimination", 5)])
def test_lockstep_one_judge_call_per_round(name, rounds):
  judge = NoisyJudge(np.random.default_rng(3).normal(size=16))
  results = tournament.rank(make_groups([16] * 5), judge, name, 0)
  assert len(judge.batch_sizes) == rounds
  assert sum(judge.batch_sizes) == sum(len(r.matches) for r in results)
  if name == "single_elimination":
    assert judge.batch_sizes == [75, 40, 20, 10, 5]


def test_matches_carry_query_group_and_trajectories():
  groups = make_groups([3, 5])
  for b, res in enumerate(tournament.rank(groups, NoisyJudge(np.arange(5.0)), "swiss", 0)):
    for m, _ in res.matches:
      assert m.group == b and m.query == f"q{b}"
      assert m.p is groups[b][m.i] and m.q is groups[b][m.j]


def test_groups_are_independent_of_their_batch_for_deterministic_topologies():
  judge = NoisyJudge(np.random.default_rng(5).normal(size=16))
  groups = make_groups([3, 16, 7])
  together = tournament.rank(groups, judge, "single_elimination", 0)
  for b in range(3):
    alone = tournament.rank(groups[b:b + 1], judge, "single_elimination", 0)[0]
    # Match.group differs (b vs 0) but the judge only looks at i, j for 1-D qualities.
    assert alone.order == together[b].order
    np.testing.assert_array_equal(alone.advantages, together[b].advantages)


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_result(name):
  def run(seed):
    judge = NoisyJudge(np.random.default_rng(1).normal(size=(4, 9)), noise="gaussian",
                       noise_level=2.0, seed=11)
    return tournament.rank(make_groups([9] * 4), judge, name, seed)

  a, b = run(123), run(123)
  for ra, rb in zip(a, b):
    assert ra.order == rb.order
    np.testing.assert_array_equal(ra.advantages, rb.advantages)
    assert [(m.i, m.j) for m, _ in ra.matches] == [(m.i, m.j) for m, _ in rb.matches]


def test_seed_drives_the_random_pairings():
  judge = NoisyJudge(np.arange(16.0))
  pairs = [[(m.i, m.j) for m, _ in tournament.rank(make_groups([16]), judge, "swiss", s)[0]
            .matches] for s in range(4)]
  assert len({tuple(p) for p in pairs}) > 1
  gen_a = tournament.rank(make_groups([16]), judge, "swiss", np.random.default_rng(9))[0]
  gen_b = tournament.rank(make_groups([16]), judge, "swiss", np.random.default_rng(9))[0]
  assert gen_a.order == gen_b.order


def test_round_robin_is_equivariant_under_relabeling():
  rng = np.random.default_rng(0)
  for _ in range(20):
    n = int(rng.integers(2, 10))
    s = rng.integers(0, 5, size=(n, n)).astype(float) * 5.0  # coarse scores: many ties
    perm = rng.permutation(n)
    s_perm = s[np.ix_(perm, perm)]  # new trajectory k is old trajectory perm[k]
    (base,) = tournament.rank(make_groups([n]), ScoreMatrixJudge(s), "round_robin", 0)
    (relab,) = tournament.rank(make_groups([n]), ScoreMatrixJudge(s_perm), "round_robin", 0)
    np.testing.assert_array_equal(relab.advantages, base.advantages[perm])
    np.testing.assert_array_equal(relab.ranks, base.ranks[perm])


@pytest.mark.parametrize("name", ["anchor", "round_robin"])
def test_all_tied_groups_give_zero_advantages(name):
  for res in tournament.rank(make_groups([2, 5, 16]), ScoreMatrixJudge(np.full((16, 16), 7.5)),
                             name, 0):
    np.testing.assert_array_equal(res.advantages, np.zeros(len(res.order)))
    np.testing.assert_array_equal(res.ranks, np.ones(len(res.order)))


def test_failed_matches_unrank_both_players_logged_and_counted(caplog):
  judge = ScoreMatrixJudge(pairwise(RR_N4, 4), fail_pairs=[(3, 0)])  # 0 < 3 fails
  with caplog.at_level(logging.WARNING):
    (res,) = tournament.rank(make_groups([4]), judge, "round_robin", 0, failure_threshold=0.2)
  # Points without (0, 3): 0: 1 + 0.5, 1: 0 + 1 + 1, 2: 0.5 + 0 + 0.5, 3: 0 + 0.5. 0 and 3 are
  # unranked (no advantage, no gradient); 1 and 2 are ranked among themselves: 2 points > 1, so
  # x = [-, 1, 0, -] and advantages +-0.7071. (The old demotion rule gave [0, 1, 0.5, 0].)
  np.testing.assert_array_equal(res.ranks, [3, 1, 2, 3])
  np.testing.assert_allclose(res.base_rewards, [0.0, 1.0, 0.0, 0.0])
  np.testing.assert_array_equal(res.ranked, [False, True, True, False])
  np.testing.assert_allclose(res.advantages, [0.0, 0.70710, -0.70710, 0.0], atol=1e-5)
  assert res.order == (1, 2, 0, 3)
  assert res.failures == 1 and res.requests == 12
  failed = [(m.i, m.j) for m, r in res.matches if not r.ok]
  assert failed == [(0, 3)]
  assert "1 of 6 matches failed" in caplog.text


def test_failure_rate_over_threshold_raises():
  judge = ScoreMatrixJudge(pairwise(RR_N4, 4), fail_pairs=[(3, 0)])
  with pytest.raises(tournament.JudgeFailureError, match=r"1 of 6 .*failure_threshold=10.0%"):
    tournament.rank(make_groups([4]), judge, "round_robin", 0, failure_threshold=0.1)


def test_failure_threshold_stops_at_the_first_round_when_the_judge_is_down():
  judge = NoisyJudge(np.arange(8.0), failure_rate=1.0)
  with pytest.raises(tournament.JudgeFailureError, match="forced failure"):
    tournament.rank(make_groups([8] * 3), judge, "single_elimination", 0)
  assert len(judge.batch_sizes) == 1


def test_failures_below_threshold_still_rank():
  judge = NoisyJudge(np.arange(16.0), failure_rate=0.05, seed=3)
  results = tournament.rank(make_groups([16] * 8), judge, "round_robin", 0,
                            failure_threshold=0.5)
  total = sum(r.failures for r in results)
  assert total == sum(not r.ok for res in results for _, r in res.matches) and total > 0
  assert all(len(r.matches) == 120 for r in results)


def test_requests_come_from_the_judge_results():
  class CachingJudge:
    def judge(self, matches):
      return [MatchResult(12.0, 8.0, requests=0 if m.i % 2 else 2) for m in matches]

  (res,) = tournament.rank(make_groups([4]), CachingJudge(), "anchor", 0)
  assert res.requests == 2  # only i = 2 of the matches (1,0), (2,0), (3,0) sent requests


def test_requests_are_never_assumed():
  """A judge that does not count its requests reports none: the count is the judge's, not 2."""
  class Silent:
    def judge(self, matches):
      return [MatchResult(12.0, 8.0) for _ in matches]

  (res,) = tournament.rank(make_groups([4]), Silent(), "round_robin", 0)
  assert res.requests == 0 and len(res.matches) == 6


@pytest.mark.parametrize("name", NAMES)
def test_groups_smaller_than_two_are_errors(name):
  with pytest.raises(ValueError, match=r"group 1 has 1 trajectories; .*N >= 2"):
    tournament.rank(make_groups([3, 1]), NoisyJudge(np.arange(3.0)), name, 0)


def test_bad_arguments_are_clear_errors():
  judge = NoisyJudge(np.arange(4.0))
  with pytest.raises(ValueError, match="unknown topology 'knockout'"):
    tournament.rank(make_groups([4]), judge, "knockout", 0)
  with pytest.raises(TypeError, match="rng must be"):
    tournament.rank(make_groups([4]), judge, "swiss", None)
  with pytest.raises(ValueError, match="failure_threshold"):
    tournament.rank(make_groups([4]), judge, "swiss", 0, failure_threshold=1.5)
  mixed = make_groups([3])[0] + [Trajectory(query="other")]
  with pytest.raises(ValueError, match="group 0 mixes queries"):
    tournament.rank([mixed], judge, "anchor", 0)


def test_bad_judge_output_is_a_clear_error():
  class Broken:
    def __init__(self, out):
      self.out = out

    def judge(self, matches):
      return self.out(matches)

  with pytest.raises(ValueError, match="outside \\[0, 20\\] for match group=0 i=2 j=0"):
    tournament.rank(make_groups([3]), Broken(lambda ms: [MatchResult(5, 5),
                                                         MatchResult(25, 5)]), "anchor", 0)
  with pytest.raises(ValueError, match="outside \\[0, 20\\] for match group=0 i=1 j=0"):
    tournament.rank(make_groups([3]), Broken(lambda ms: [MatchResult(float("nan"), 5),
                                                         MatchResult(5, 5)]), "anchor", 0)
  with pytest.raises(ValueError, match="returned 1 results for 2 matches"):
    tournament.rank(make_groups([3]), Broken(lambda ms: [MatchResult(5, 5)]), "anchor", 0)


@pytest.mark.parametrize("name", ["double_elimination", "single_elimination"])
def test_strict_orders_give_the_hand_checked_n2_and_n8_advantages(name):
  n2, n8 = tournament.rank(make_groups([2, 8]), NoisyJudge(np.arange(8.0)), name, 0)
  np.testing.assert_allclose(np.sort(n2.advantages), [-0.70710, 0.70710], atol=1e-5)
  expected = [-1.4289, -1.0206, -0.6124, -0.2041, 0.2041, 0.6124, 1.0206, 1.4289]
  np.testing.assert_allclose(np.sort(n8.advantages), expected, atol=1e-4)
  assert n8.order[0] == 7 and n2.order == (1, 0)
