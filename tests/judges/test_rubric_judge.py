"""Programmatic rubric judge: exact values without noise, determinism, and the noise model's law."""
import math

import numpy as np
import pytest

from arenarl_jax import judges
from arenarl_jax.judges import rubric as rubric_lib
from arenarl_jax.judges import rubric_judge
from arenarl_jax.types import Match, Trajectory

MINI = rubric_lib.Rubric("mini", "", (rubric_lib.Dimension("p"),),
                         (rubric_lib.Dimension("a"),), 0.5, 0.5)


def _t(path, answer=None) -> Trajectory:
  return Trajectory("q", metadata={"path": path, "answer": path if answer is None else answer})


def mini_checker(t: Trajectory):
  return {"path": {"p": t.metadata["path"]}, "answer": {"a": t.metadata["answer"]}}


def travel_checker(t: Trajectory):
  v = t.metadata["path"]
  return {"path": {"breadth": v, "relevance": v, "detail": v},
          "answer": {"relevance": v, "feasibility": v, "details": v, "clarity": v}}


def _m(p, q, k=0):
  return Match(0, 2 * k, 2 * k + 1, "q", p, q)


def test_perfect_judge_by_hand():
  j = rubric_judge.RubricJudge(mini_checker, MINI)
  r1, r2 = j.judge([_m(_t(8, 6), _t(3, 4)), _m(_t(5), _t(5))])
  assert (r1.score_p, r1.score_q) == (14.0, 7.0)  # 2 x 0.5*(8+6), 2 x 0.5*(3+4)
  assert (r2.score_p, r2.score_q) == (10.0, 10.0) and r1.requests == 2
  t = rubric_judge.RubricJudge(travel_checker, "travel")
  assert t.score([_t(7), _t(2)]).scores.tolist() == [7.0, 2.0]
  assert j.metrics["requests"] == 4 and t.metrics["requests"] == 2


def test_position_bias_cancels_in_bidirectional_play():
  j = rubric_judge.RubricJudge(mini_checker, MINI, rubric_judge.NoiseModel(position_bias=2.0))
  same, (r,) = j.judge([_m(_t(5), _t(5))])[0], j.judge([_m(_t(6), _t(4))])
  assert same.score_p == same.score_q == 12.0
  # forward: P 6+2=8, Q 4; backward: Q 4+2=6, P 6 -> 14 vs 10, the same margin as without bias.
  assert (r.score_p, r.score_q) == (14.0, 10.0)
  assert r.detail["forward"] == (8.0, 4.0) and r.detail["backward"] == (6.0, 6.0)


def test_saturation_collapses_high_pointwise_scores():
  full = rubric_judge.NoiseModel(saturation=1.0, saturation_knee=8.0)
  j = rubric_judge.RubricJudge(mini_checker, MINI, full)
  assert j.score([_t(10), _t(9), _t(7)]).scores.tolist() == [8.0, 8.0, 7.0]
  (r,) = j.judge([_m(_t(9), _t(10))])  # pairwise still discriminates by default
  assert (r.score_p, r.score_q) == (18.0, 20.0)
  both = rubric_judge.RubricJudge(
      mini_checker, MINI, rubric_judge.NoiseModel(saturation=1.0, saturate_pairwise=True))
  (r,) = both.judge([_m(_t(9), _t(10))])
  assert (r.score_p, r.score_q) == (16.0, 16.0)
  half = rubric_judge.RubricJudge(mini_checker, MINI, rubric_judge.NoiseModel(saturation=0.5))
  assert half.score([_t(10)]).scores.tolist() == [9.0]  # 8 + 0.5 * (10 - 8)


def test_deterministic_per_seed():
  noise = rubric_judge.NoiseModel(pointwise_std=1.0, pairwise_std=1.5)
  batch = [_m(_t(k % 10), _t((3 * k) % 10), k) for k in range(40)]
  trajs = [_t(k % 10) for k in range(40)]

  def run(seed):
    j = rubric_judge.RubricJudge(mini_checker, MINI, noise, seed=seed)
    first = [(r.score_p, r.score_q) for r in j.judge(batch)]
    second = [(r.score_p, r.score_q) for r in j.judge(batch)]
    return first, second, j.score(trajs).scores.tolist()

  a, b, c = run(7), run(7), run(8)
  assert a == b
  assert a[0] != a[1]  # a new batch draws new noise
  assert a[0] != c[0] and a[2] != c[2]


def _round_probs(mu: float, sigma: float):
  """P(clip(round_half_up(mu + N(0, sigma))) = k) for k = 0..10, exactly (normal CDF)."""
  cdf = lambda x: 0.5 * (1 + math.erf((x - mu) / (sigma * math.sqrt(2))))
  edges = [-math.inf] + [k + 0.5 for k in range(10)] + [math.inf]
  return np.array([cdf(edges[k + 1]) - cdf(edges[k]) for k in range(11)])


def test_pointwise_noise_law():
  """Each dimension is round(5 + N(0, 1.5)); combined = mean of two i.i.d. such dimensions."""
  n, sigma = 4000, 1.5
  j = rubric_judge.RubricJudge(mini_checker, MINI, rubric_judge.NoiseModel(pointwise_std=sigma),
                               seed=3)
  s = j.score([_t(5)] * n).scores.astype(np.float64)
  p = _round_probs(5.0, sigma)
  var_dim = float(np.sum(p * (np.arange(11) - 5.0) ** 2))  # mean is 5 by symmetry
  var = var_dim / 2
  assert abs(s.mean() - 5.0) < 4 * math.sqrt(var / n)
  assert abs(s.var(ddof=1) / var - 1) < 5 * math.sqrt(2 / (n - 1))
  # The distribution of one dimension (path = answer here, so every combined is a half-integer).
  assert set(np.unique(s * 2)) <= set(range(21))


def test_pairwise_noise_law():
  """Self-match, pairwise noise only: score_p - score_q = 2 r(u1) - 2 r(u2), u ~ N(0, 1)."""
  n = 3000
  j = rubric_judge.RubricJudge(mini_checker, MINI, rubric_judge.NoiseModel(pairwise_std=2.0),
                               seed=11)
  results = j.judge([_m(_t(5), _t(5), k) for k in range(n)])
  d = np.array([r.score_p - r.score_q for r in results])
  phi = lambda x: 0.5 * (1 + math.erf(x / math.sqrt(2)))
  ks = np.arange(-6, 7)
  probs = np.array([phi(k + 0.5) - phi(k - 0.5) for k in ks])  # P(r(u) = k), u ~ N(0, 1)
  var = 8 * float(np.sum(probs * ks ** 2))
  tie = float(np.sum(probs ** 2))
  assert abs(d.mean()) < 4 * math.sqrt(var / n)
  assert abs(d.var(ddof=1) / var - 1) < 5 * math.sqrt(2 / (n - 1))
  ties = np.mean(d == 0)
  assert abs(ties - tie) < 4 * math.sqrt(tie * (1 - tie) / n)
  assert np.all(d % 2 == 0)


def test_checker_errors_name_the_row():
  def bad(t):
    return {"path": {"p": 11}, "answer": {"a": 1}} if t.metadata["path"] == 1 else {"path": {}}

  j = rubric_judge.RubricJudge(bad, MINI)
  with pytest.raises(ValueError, match=r"checker\(matches\[0\]\.p\).*outside"):
    j.judge([_m(_t(1), _t(2))])
  with pytest.raises(ValueError, match=r"checker\(trajectories\[0\]\): section 'path' must have"):
    j.score([_t(2)])
  with pytest.raises(ValueError, match="has no trajectories"):
    j.judge([Match(0, 0, 1, "q")])
  with pytest.raises(ValueError, match="saturation"):
    rubric_judge.NoiseModel(saturation=2.0)


def test_make_judge_rubric_backend():
  j = judges.make_judge({"backend": "rubric", "rubric": "travel", "seed": 5,
                         "noise": {"pairwise_std": 0.5}}, checker=travel_checker)
  assert isinstance(j, rubric_judge.RubricJudge) and j.seed == 5
  assert j.noise.pairwise_std == 0.5 and j.rubric.name == "travel"
  with pytest.raises(ValueError, match="needs make_judge"):
    judges.make_judge({"backend": "rubric"})
  with pytest.raises(ValueError, match=r"judge\.noise: unknown key"):
    judges.make_judge({"backend": "rubric", "noise": {"sigma": 1}}, checker=travel_checker)


def test_order_flip_rate_counts_position_bias():
  # Equal agents: a bias towards Agent_A makes each order name its A the winner (a flip);
  # a 6-point quality gap outweighs a 2-point bias (no flip).
  j = rubric_judge.RubricJudge(mini_checker, MINI, rubric_judge.NoiseModel(position_bias=2.0))
  j.judge([_m(_t(5), _t(5)), _m(_t(5), _t(5), 1), _m(_t(9), _t(3), 2)])
  snap = j.metrics.snapshot()
  assert snap["both_orders"] == 3 and snap["order_flips"] == 2
  assert snap["order_flip_rate"] == pytest.approx(2 / 3)


def test_state_dict_resumes_the_noise_and_offset_places_a_share():
  """The judge protocol: a judge restored from ``state_dict`` draws what the original draws next,
  and a share judged with ``offset`` draws what the whole batch draws for those matches."""
  noise = rubric_judge.NoiseModel(pointwise_std=1.0, pairwise_std=1.5)
  batch = [_m(_t(k % 10), _t((3 * k) % 10), k) for k in range(12)]
  j = rubric_judge.RubricJudge(mini_checker, MINI, noise, seed=3)
  j.judge(batch)
  state = j.state_dict()
  assert state == {"calls": 1}
  expected = [(r.score_p, r.score_q) for r in j.judge(batch)]
  resumed = rubric_judge.RubricJudge(mini_checker, MINI, noise, seed=3)
  resumed.load_state_dict(state)
  assert [(r.score_p, r.score_q) for r in resumed.judge(batch)] == expected
  fresh = rubric_judge.RubricJudge(mini_checker, MINI, noise, seed=3)
  assert [(r.score_p, r.score_q) for r in fresh.judge(batch)] != expected  # the count matters
  whole = rubric_judge.RubricJudge(mini_checker, MINI, noise, seed=5).judge(batch)
  share = rubric_judge.RubricJudge(mini_checker, MINI, noise, seed=5).judge(batch[8:], offset=8)
  assert [(r.score_p, r.score_q) for r in share] == [(r.score_p, r.score_q) for r in whole[8:]]


@pytest.mark.parametrize("name", ["ScoreMatrixJudge", "NoisyJudge", "HttpJudge", "FlaxJudge",
                                  "RubricJudge"])
def test_every_judge_follows_the_protocol(name):
  import inspect  # pylint: disable=g-import-not-at-top
  from arenarl_jax.judges import http, synthetic  # pylint: disable=g-import-not-at-top
  from arenarl_jax.judges.flax import FlaxJudge  # pylint: disable=g-import-not-at-top
  cls = {"ScoreMatrixJudge": synthetic.ScoreMatrixJudge, "NoisyJudge": synthetic.NoisyJudge,
         "HttpJudge": http.HttpJudge, "FlaxJudge": FlaxJudge,
         "RubricJudge": rubric_judge.RubricJudge}[name]
  param = inspect.signature(cls.judge).parameters.get("offset")
  assert param is not None and param.kind is inspect.Parameter.KEYWORD_ONLY and param.default == 0
  assert callable(getattr(cls, "state_dict")) and callable(getattr(cls, "load_state_dict"))
  if hasattr(cls, "score"):
    assert "offset" in inspect.signature(cls.score).parameters
