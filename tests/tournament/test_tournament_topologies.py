"""Per-topology behaviour: Swiss quality and byes, elimination brackets, seeding and byes."""
import math

import numpy as np
import pytest

from arenarl_jax.tournament import rewards
from arenarl_jax import tournament
from arenarl_jax.judges.synthetic import NoisyJudge, ScoreMatrixJudge
from arenarl_jax.tournament import single_elimination
from arenarl_jax.tournament import topology
from arenarl_jax.types import Trajectory


def make_groups(sizes):
  return [[Trajectory(query="q") for _ in range(n)] for n in sizes]


def spearman(a, b):
  """Pearson correlation of average ranks (ties share their mean rank)."""
  def avg_ranks(v):
    v = np.asarray(v, float)
    return np.array([(v < x).sum() + ((v == x).sum() + 1) / 2 for x in v])
  return np.corrcoef(avg_ranks(a), avg_ranks(b))[0, 1]


def rounds_of(res, sizes):
  """Split a group's match log into rounds of the given sizes."""
  pairs = [(m.i, m.j) for m, _ in res.matches]
  out, start = [], 0
  for size in sizes:
    out.append(pairs[start:start + size])
    start += size
  return out


def test_swiss_exact_judge_mean_spearman_at_least_0_9_at_n16():
  qualities = np.random.default_rng(0).normal(size=(50, 16))
  corr = []
  for seed in range(50):
    res = tournament.rank(make_groups([16]), NoisyJudge(qualities[seed]), "swiss", seed)[0]
    corr.append(spearman(res.base_rewards, qualities[seed]))
  assert np.mean(corr) >= 0.9, np.mean(corr)


def test_swiss_n4_hand_checked_standing():
  # Exact judge, qualities best = 1, 2nd = 3, 3rd = 2, worst = 0. Round 2 pairs the two 1-0
  # players and the two 0-1 players: the best ends 2-0, the worst 0-2, the middle two 1-1.
  # If round 1 paired best with worst, the 2nd best beat the 3rd and its Buchholz is 1 + 2 = 3
  # against the 3rd's 1 + 0 = 1; otherwise both have 2 + 0 = 2 and share x of positions 1, 2.
  qualities = np.array([0.0, 3.0, 1.0, 2.0])
  cases = set()
  for seed in range(12):
    res = tournament.rank(make_groups([4]), NoisyJudge(qualities), "swiss", seed)[0]
    round1 = {frozenset(p) for p in rounds_of(res, [2])[0]}
    split = frozenset((1, 0)) in round1
    cases.add(split)
    if split:
      np.testing.assert_allclose(res.base_rewards, [0.0, 1.0, 1 / 3, 2 / 3], atol=1e-7)
      np.testing.assert_array_equal(res.ranks, [4, 1, 3, 2])
      assert res.order == (1, 3, 2, 0)
    else:
      np.testing.assert_allclose(res.base_rewards, [0.0, 1.0, 0.5, 0.5])
      np.testing.assert_array_equal(res.ranks, [4, 1, 2, 2])
      assert res.order == (1, 2, 3, 0)  # full ties listed by index
  assert cases == {True, False}


def test_swiss_byes_go_to_the_lowest_placed_player_without_one():
  # N = 3: round 2 gives the bye to round 1's loser and pairs the round-1 bye with the winner.
  qualities = np.array([0.0, 1.0, 2.0])
  for seed in range(10):
    res = tournament.rank(make_groups([3]), NoisyJudge(qualities), "swiss", seed)[0]
    (r1,), (r2,) = rounds_of(res, [1, 1])
    bye1 = ({0, 1, 2} - set(r1)).pop()
    winner1 = max(r1, key=lambda p: qualities[p])
    assert set(r2) == {bye1, winner1}


@pytest.mark.parametrize("n", [5, 7, 9, 13, 17])
def test_swiss_odd_n_every_bye_is_distinct(n):
  rounds = math.ceil(math.log2(n))
  for seed in range(5):
    res = tournament.rank(make_groups([n]), NoisyJudge(np.arange(float(n))), "swiss", seed)[0]
    byes = []
    for pairs in rounds_of(res, [n // 2] * rounds):
      players = [p for pair in pairs for p in pair]
      assert len(set(players)) == n - 1
      byes.append((set(range(n)) - set(players)).pop())
    assert len(set(byes)) == rounds


def test_swiss_avoids_rematches_at_n16():
  for seed in range(20):
    judge = NoisyJudge(np.random.default_rng(seed).normal(size=16))
    res = tournament.rank(make_groups([16]), judge, "swiss", seed)[0]
    pairs = [frozenset((m.i, m.j)) for m, _ in res.matches]
    assert len(set(pairs)) == len(pairs)


def test_double_elimination_exact_judge_top_two():
  # The best never loses; the second best only loses to the best, so it wins the losers bracket.
  for seed in range(30):
    for n in (2, 3, 5, 8, 16):
      q = np.random.default_rng(seed).normal(size=n)
      res = tournament.rank(make_groups([n]), NoisyJudge(q), "double_elimination", seed)[0]
      assert res.order[:2] == tuple(np.argsort(-q)[:2].tolist())


@pytest.mark.parametrize("n", [3, 6, 11, 16])
def test_double_elimination_two_losses_eliminate(n):
  for seed in range(10):
    q = np.random.default_rng(seed).normal(size=n)
    res = tournament.rank(make_groups([n]), NoisyJudge(q, noise="gaussian", noise_level=4.0,
                                                       seed=seed), "double_elimination", seed)[0]
    losses = np.zeros(n, int)
    for m, r in res.matches:
      assert losses[m.i] < 2 and losses[m.j] < 2, "a player played after its second loss"
      losses[m.j if r.score_p >= r.score_q else m.i] += 1
    assert all(losses[p] == 2 for p in res.order[2:])
    assert losses[res.order[0]] <= 1


def test_bracket_order():
  assert single_elimination.bracket_order(2) == (0, 1)
  assert single_elimination.bracket_order(4) == (0, 3, 1, 2)
  assert single_elimination.bracket_order(8) == (0, 7, 3, 4, 1, 6, 2, 5)
  assert single_elimination.bracket_order(16) == (0, 15, 7, 8, 3, 12, 4, 11,
                                                  1, 14, 6, 9, 2, 13, 5, 10)
  with pytest.raises(ValueError, match="power of two"):
    single_elimination.bracket_order(6)


def test_single_elimination_n3_hand_checked():
  # Seeding: 1 scores 14, 2 scores 12, the anchor mean(6, 8) = 7 -> seeds [1, 2, 0].
  # Bracket [seed 0, phantom, seed 1, seed 2]: 1 has a bye, 2 beats 0, then 1 beats 2.
  s = np.array([[10.0, 6.0, 8.0], [14.0, 10.0, 11.0], [12.0, 9.0, 10.0]])
  res = tournament.rank(make_groups([3]), ScoreMatrixJudge(s), "single_elimination", 0)[0]
  assert rounds_of(res, [2, 1, 1]) == [[(1, 0), (2, 0)], [(2, 0)], [(1, 2)]]
  assert res.order == (1, 2, 0)
  np.testing.assert_allclose(res.base_rewards, [0.0, 1.0, 0.5])


def test_single_elimination_all_tied_better_seed_advances():
  # Equal seed scores keep index order; every tie goes to the better seed.
  res = tournament.rank(make_groups([4]), ScoreMatrixJudge(np.full((4, 4), 10.0)),
                        "single_elimination", 0)[0]
  assert rounds_of(res, [3, 2, 1])[1:] == [[(0, 3), (1, 2)], [(0, 1)]]
  assert res.order == (0, 1, 2, 3)
  # Every match tied: no evidence, so one shared standing and no advantage (ours; the
  # reference would reward the seeds 1, 2/3, 1/3, 0).
  np.testing.assert_array_equal(res.ranks, [1, 1, 1, 1])
  np.testing.assert_allclose(res.base_rewards, [0.5] * 4)
  np.testing.assert_allclose(res.advantages, [0.0] * 4, atol=1e-6)


def test_single_elimination_loser_of_a_tie_shares_its_conquerors_standing():
  # S[i][j] = 10 + q_i - q_j with q = (2, 3, 2, 1). Seeding: 1 scores 11, 2 scores 10, 3 scores
  # 9, the anchor's mean is 10, so the seeds are 1, 0, 2, 3 (0 before 2 on equal means). Round 1:
  # 1 beats 3; 0 and 2 tie 10-10 and 0, the better seed, goes on. Final: 1 beats 0. The
  # reference's order 1, 0, 2, 3 gives x = 1, 2/3, 1/3, 0; the tie is no evidence between 0 and
  # 2, so they share the mean of their positions' x.
  q = np.array([2.0, 3.0, 2.0, 1.0])
  res = tournament.rank(make_groups([4]), ScoreMatrixJudge(10 + q[:, None] - q[None, :]),
                        "single_elimination", 0)[0]
  assert rounds_of(res, [3, 2, 1])[1:] == [[(1, 3), (0, 2)], [(1, 0)]]
  assert res.order == (1, 0, 2, 3)
  np.testing.assert_array_equal(res.ranks, [2, 1, 2, 4])
  np.testing.assert_allclose(res.base_rewards, [0.5, 1.0, 0.5, 0.0])


@pytest.mark.parametrize("name", ["round_robin", "single_elimination"])
def test_exact_judge_puts_the_best_first(name):
  rng = np.random.default_rng(0)
  for n in range(2, 18):
    q = rng.normal(size=(20, n))
    for res, q_g in zip(tournament.rank(make_groups([n] * 20), NoisyJudge(q), name, n), q):
      assert res.order[0] == int(np.argmax(q_g)), (name, n)


@pytest.mark.parametrize("n", [3, 5, 6, 7])
def test_single_elimination_top_seeds_get_byes(n):
  size = 1 << math.ceil(math.log2(n))
  byes = size - n
  rng = np.random.default_rng(n)
  for _ in range(20):
    s = rng.uniform(0, 20, size=(n, n))
    res = tournament.rank(make_groups([n]), ScoreMatrixJudge(s), "single_elimination", 0)[0]
    seed_score = [s[0, 1:].mean()] + [s[i, 0] for i in range(1, n)]
    by_seed = sorted(range(n), key=lambda p: (-seed_score[p], p))
    first_round = rounds_of(res, [n - 1, n - size // 2])[1]
    # Seeds byes..n-1 play; seed k meets seed size-1-k; the top `byes` seeds rest.
    expected = [(by_seed[k], by_seed[size - 1 - k])
                for k in single_elimination.bracket_order(size)[::2] if size - 1 - k < n]
    assert sorted(first_round) == sorted(expected)
    assert not {by_seed[k] for k in range(byes)} & {p for pair in first_round for p in pair}


@pytest.mark.parametrize("n", [3, 5, 6, 7])
def test_single_elimination_a_player_losing_every_match_never_reaches_the_final(n):
  rng = np.random.default_rng(100 + n)
  for loser in range(n):
    for _ in range(10):
      s = rng.uniform(5, 15, size=(n, n))
      s[loser, :], s[:, loser] = 1.0, 19.0
      res = tournament.rank(make_groups([n]), ScoreMatrixJudge(s), "single_elimination", 0)[0]
      final = [(m.i, m.j) for m, _ in res.matches][-1]
      assert loser not in final and loser not in res.order[:2]


def test_standings_agree_with_the_advantages_reference():
  rng = np.random.default_rng(0)
  for _ in range(200):
    n = int(rng.integers(2, 12))
    scores = (rng.integers(0, 6, n) * 2.5 + rng.choice([0.0, 1e-9], n)).tolist()
    st = topology.standing_from_scores(scores)
    ranks = rewards.min_ranks(np.round(scores, 6))
    np.testing.assert_array_equal(st.ranks, ranks)
    np.testing.assert_allclose(st.rewards, rewards.rewards_from_ranks(ranks), atol=1e-7)
    assert list(st.order) == sorted(range(n), key=lambda p: (ranks[p], p))

    keys = list(zip(rng.integers(0, 3, n) * 0.5, rng.integers(0, 3, n) * 0.5))
    st = topology.standing_from_tiers(keys)
    better = [sum(k > keys[p] for k in keys) for p in range(n)]  # tuples compare lexicographically
    np.testing.assert_array_equal(st.ranks, np.array(better) + 1)
    np.testing.assert_allclose(st.rewards, rewards.rewards_from_order(st.order, st.ranks),
                               atol=1e-7)


def test_standings_with_failures_rank_the_others_among_themselves():
  """Unranked players (``failed``) get x = 0, ``ranked`` False and the shared last rank; the
  others get exactly the standing they would have in a group of their own."""
  rng = np.random.default_rng(1)
  for _ in range(200):
    n = int(rng.integers(2, 12))
    failed = {p for p in range(n) if rng.random() < 0.3}
    kept = [p for p in range(n) if p not in failed]
    scores = (rng.integers(0, 6, n) * 2.5).tolist()
    keys = list(zip(rng.integers(0, 3, n) * 0.5, rng.integers(0, 3, n) * 0.5))
    order = rng.permutation(n).tolist()
    for st, alone in (
        (topology.standing_from_scores(scores, failed),
         topology.standing_from_scores([scores[p] for p in kept])),
        (topology.standing_from_tiers(keys, failed),
         topology.standing_from_tiers([keys[p] for p in kept])),
        (topology.standing_from_order(order, failed),
         topology.standing_from_order([kept.index(p) for p in order if p in kept]))):
      np.testing.assert_array_equal(st.ranked, [p not in failed for p in range(n)])
      assert [p for p in st.order if p in kept] == [kept[q] for q in alone.order]
      assert set(st.order[len(kept):]) == failed
      for p in failed:
        assert st.rewards[p] == 0.0 and st.ranks[p] == len(kept) + 1
      if len(kept) >= 2:
        np.testing.assert_array_equal(st.rewards[kept], alone.rewards)
        np.testing.assert_array_equal(st.ranks[kept], alone.ranks)
      else:
        np.testing.assert_array_equal(st.rewards, np.zeros(n))


def test_single_elimination_round_losers_with_equal_means_share_their_standing():
  # S[i][j] = 10 + sign(q_i - q_j) with q = (2, 3, 1, 1): every decided match is 11-9. Seeds
  # 1, 0, 2, 3; round 1: 1 beats 3, 0 beats 2; final: 1 beats 0. The round-one losers 2 and 3
  # both average 9: the reference puts 2 (the better seed) first, x = 1/3 and 0; nothing the
  # judge said separates them, so they share 1/6.
  q = np.array([2.0, 3.0, 1.0, 1.0])
  res = tournament.rank(make_groups([4]),
                        ScoreMatrixJudge(10 + np.sign(q[:, None] - q[None, :])),
                        "single_elimination", 0)[0]
  assert rounds_of(res, [3, 2, 1])[1:] == [[(1, 3), (0, 2)], [(1, 0)]]
  np.testing.assert_array_equal(res.ranks, [2, 1, 3, 3])
  np.testing.assert_allclose(res.base_rewards, [2 / 3, 1.0, 1 / 6, 1 / 6], atol=1e-6)
