"""Synthetic judges: exact tables, noise models with known statistics, determinism, errors."""
import numpy as np
import pytest

from arenarl_jax.judges import synthetic
from arenarl_jax.judges.synthetic import NoisyJudge, ScoreMatrixJudge
from arenarl_jax.types import Match


def matches(pairs, group=0):
  return [Match(group, i, j, "q") for i, j in pairs]


def scores(results):
  return np.array([(r.score_p, r.score_q) for r in results])


def test_score_matrix_judge_is_order_independent():
  s = np.array([[0.0, 12.0, 3.0], [7.0, 0.0, 20.0], [15.0, 0.5, 0.0]])
  judge = ScoreMatrixJudge(s)
  out = scores(judge.judge(matches([(0, 1), (1, 0), (2, 1), (1, 2)])))
  np.testing.assert_array_equal(out, [[12, 7], [7, 12], [0.5, 20], [20, 0.5]])
  assert judge.batch_sizes == [4]


def test_score_matrix_judge_per_group_tables_and_failures():
  s = np.stack([np.full((2, 2), 4.0), np.full((2, 2), 9.0)])
  judge = ScoreMatrixJudge(s, fail_pairs=[(1, 0)])
  ok = judge.judge(matches([(0, 1)], group=1))[0]
  assert not ok.ok and "fail_pairs" in ok.error
  judge = ScoreMatrixJudge(s)
  assert scores(judge.judge(matches([(0, 1)], group=1))).tolist() == [[9.0, 9.0]]
  assert scores(judge.judge(matches([(0, 1)], group=0))).tolist() == [[4.0, 4.0]]


def test_score_matrix_judge_errors():
  with pytest.raises(ValueError, match=r"\[G, G\] or \[B, G, G\]"):
    ScoreMatrixJudge(np.zeros((2, 3)))
  with pytest.raises(ValueError, match=r"in \[0, 20\]"):
    ScoreMatrixJudge(np.array([[0.0, 21.0], [1.0, 0.0]]))
  with pytest.raises(IndexError, match="group=0 i=0 j=5"):
    ScoreMatrixJudge(np.zeros((3, 3))).judge(matches([(0, 5)]))
  with pytest.raises(IndexError, match="group=2 i=0 j=1"):
    ScoreMatrixJudge(np.zeros((2, 3, 3))).judge(matches([(0, 1)], group=2))


def test_exact_scores_are_a_logistic_of_the_quality_gap():
  judge = NoisyJudge(np.array([0.0, 1.0, 1.0]), scale=2.0)
  out = scores(judge.judge(matches([(1, 0), (0, 1), (1, 2)])))
  p = 20.0 / (1.0 + np.exp(-0.5))
  np.testing.assert_allclose(out, [[p, 20 - p], [20 - p, p], [10, 10]])


def test_per_group_qualities():
  judge = NoisyJudge(np.array([[0.0, 5.0], [5.0, 0.0]]))
  assert judge.judge(matches([(0, 1)], group=0))[0].score_p < 10
  assert judge.judge(matches([(0, 1)], group=1))[0].score_p > 10
  with pytest.raises(IndexError, match="group=2"):
    judge.judge(matches([(0, 1)], group=2))


def test_gaussian_noise_statistics_and_determinism():
  pairs = [(0, 1)] * 4000
  judge = NoisyJudge(np.zeros(2), noise="gaussian", noise_level=2.0, seed=4)
  out = scores(judge.judge(matches(pairs)))
  # Equal qualities: exact 10 each; clipping at 0/20 is 5 sigma away. Tolerances: ~5 std errors.
  assert abs(out.mean() - 10.0) < 0.05
  assert abs(out.std() - 2.0) < 0.05
  assert abs(np.corrcoef(out[:, 0], out[:, 1])[0, 1]) < 0.05  # sides are noised independently
  again = scores(NoisyJudge(np.zeros(2), noise="gaussian", noise_level=2.0,
                            seed=4).judge(matches(pairs)))
  np.testing.assert_array_equal(out, again)
  other = scores(NoisyJudge(np.zeros(2), noise="gaussian", noise_level=2.0,
                            seed=5).judge(matches(pairs)))
  assert not np.array_equal(out, other)


def test_gaussian_noise_is_clipped_to_the_score_range():
  judge = NoisyJudge(np.array([0.0, 4.0]), noise="gaussian", noise_level=10.0)
  out = scores(judge.judge(matches([(1, 0)] * 1000)))
  assert out.min() == 0.0 and out.max() == 20.0


def test_bradley_terry_win_rate():
  judge = NoisyJudge(np.array([0.0, 1.0]), noise="bradley_terry", noise_level=2.0, seed=1)
  out = scores(judge.judge(matches([(1, 0)] * 20000)))
  expected = 1.0 / (1.0 + np.exp(-0.5))  # 0.6225; binomial std error 0.0034
  assert abs((out[:, 0] > out[:, 1]).mean() - expected) < 0.015
  np.testing.assert_allclose(out.sum(axis=1), 20.0)  # scores follow one perceived gap
  # The perceived gap is 1 + Logistic(0, 2): its median is 1, so the median score is exact.
  assert abs(np.median(out[:, 0]) - 20.0 / (1.0 + np.exp(-1.0))) < 0.4  # ~3.5 std errors


def test_forced_ties_and_failures_at_their_rates():
  judge = NoisyJudge(np.array([0.0, 3.0]), tie_rate=0.3, failure_rate=0.2, seed=2)
  results = judge.judge(matches([(1, 0)] * 10000))
  failed = np.array([not r.ok for r in results])
  tied = np.array([r.ok and r.score_p == r.score_q == 10.0 for r in results])
  assert abs(failed.mean() - 0.2) < 0.02
  assert abs(tied.mean() - 0.3 * 0.8) < 0.02  # a failure overrides a forced tie
  assert all("forced failure" in r.error for r in np.array(results)[failed])
  assert all(r.requests == 2 for r in results)
  all_fail = NoisyJudge(np.zeros(2), failure_rate=1.0).judge(matches([(0, 1)] * 5))
  assert not any(r.ok for r in all_fail)


def test_latency_is_slept_once_per_batch(monkeypatch):
  slept = []
  monkeypatch.setattr(synthetic.time, "sleep", slept.append)
  judge = NoisyJudge(np.zeros(4), latency_s=0.2)
  judge.judge(matches([(0, 1), (2, 3), (1, 2)]))
  judge.judge(matches([(0, 3)]))
  assert slept == [0.2, 0.2]
  assert judge.batch_sizes == [3, 1]


def test_all_scores_stay_in_range():
  q = np.random.default_rng(0).normal(scale=5.0, size=(3, 6))
  for noise, level in (("exact", 0.0), ("gaussian", 3.0), ("bradley_terry", 1.0)):
    judge = NoisyJudge(q, noise=noise, noise_level=level, tie_rate=0.1)
    ms = [Match(g, i, j, "q") for g in range(3) for i in range(6) for j in range(6) if i != j]
    out = scores(judge.judge(ms))
    assert out.min() >= 0.0 and out.max() <= 20.0


def test_noisy_judge_config_errors():
  with pytest.raises(ValueError, match="unknown noise 'laplace'"):
    NoisyJudge(np.zeros(2), noise="laplace")
  with pytest.raises(ValueError, match="noise_level > 0"):
    NoisyJudge(np.zeros(2), noise="gaussian")
  with pytest.raises(ValueError, match="failure_rate must be in"):
    NoisyJudge(np.zeros(2), failure_rate=1.5)
  with pytest.raises(ValueError, match="finite"):
    NoisyJudge(np.array([0.0, np.inf]))
