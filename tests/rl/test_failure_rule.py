"""A failed judge match (or pointwise score) teaches nothing (tournament/topology.py, rl/).

A trajectory in a failed match is unranked: advantage 0, mask 0 (its training row has loss mask
0). The others are ranked and standardized among themselves; a group with fewer than two ranked
is dropped. Checked on every topology under random failure patterns, on the hand-worked
example, through both advantage sources, the experience source and the training batch.
"""
import types as pytypes

import numpy as np
import pytest

from arenarl_jax import tournament
from arenarl_jax.envs.base import Verification
from arenarl_jax.judges.synthetic import NoisyJudge, ScoreMatrixJudge
from arenarl_jax.judges.verdict import PointwiseScores
from arenarl_jax.rl import advantages as adv_lib
from arenarl_jax.rl import batch as batch_lib
from arenarl_jax.rl import experience as experience_lib
from arenarl_jax.rl.settings import AdvantageSettings, TournamentSettings
from arenarl_jax.tournament import swiss, topology
from arenarl_jax.types import MatchResult, Trajectory


class RandomFailures:
  """Fails each match independently with ``rate`` (seeded), else asks ``inner``."""

  def __init__(self, inner, rate: float, seed: int):
    self.inner, self.rate, self.rng = inner, rate, np.random.default_rng(seed)

  def judge(self, matches, *, offset=0):
    fail = self.rng.random(len(matches)) < self.rate
    out = self.inner.judge(matches, offset=offset)
    return [MatchResult(0.0, 0.0, ok=False, error="forced", requests=2) if f else r
            for r, f in zip(out, fail)]


class FailOrdered:
  """Fails exactly the matches (i as P, j as Q) listed in ``pairs`` (a rematch still counts)."""

  def __init__(self, inner, pairs):
    self.inner, self.pairs = inner, set(pairs)

  def judge(self, matches, *, offset=0):
    out = self.inner.judge(matches, offset=offset)
    return [MatchResult(0.0, 0.0, ok=False, error="forced") if (m.i, m.j) in self.pairs else r
            for m, r in zip(matches, out)]


def group(n, query="q"):
  return [Trajectory(query=query, metadata={"greedy": i == 0}) for i in range(n)]


def rank(judge, name, n, seed=0):
  return tournament.rank([group(n)], judge, name, seed, failure_threshold=1.0)[0]


# ------------------------------------------------------------------- the evidence, re-derived
def points_from_log(res, n):
  points = np.zeros(n)
  for m, r in res.matches:
    if r.ok:
      won = topology.p_points(r.score_p, r.score_q)
      points[m.i] += won
      points[m.j] += 1.0 - won
  return points


def evidence_keys(name, res, n):
  """What the topology ranks by, from the match log (None for the elimination brackets)."""
  if name == "anchor":
    scores = np.zeros(n)
    anchor = [r.score_q for m, r in res.matches if r.ok]
    for m, r in res.matches:
      scores[m.i] = r.score_p if r.ok else 0.0
    scores[0] = sum(anchor) / len(anchor) if anchor else 0.0
    return [(topology.sort_key(s),) for s in scores]
  if name == "round_robin":
    return [(p,) for p in points_from_log(res, n)]
  if name == "swiss":
    per_round = n // 2
    points, opponents = np.zeros(n), [set() for _ in range(n)]
    for k in range(swiss.num_rounds(n)):
      played = res.matches[k * per_round:(k + 1) * per_round]
      for m, r in played:
        opponents[m.i].add(m.j)
        opponents[m.j].add(m.i)
        if r.ok:
          won = topology.p_points(r.score_p, r.score_q)
          points[m.i] += won
          points[m.j] += 1.0 - won
      if n % 2:  # the bye
        (bye,) = set(range(n)) - {p for m, _ in played for p in (m.i, m.j)}
        points[bye] += 1.0
    return [(points[p], sum(points[o] for o in opponents[p])) for p in range(n)]
  return None


def check_evidence(name, res, n):
  """The ranked players' order agrees with the evidence; returns how many pairs were compared."""
  x, ranked = res.base_rewards, np.flatnonzero(res.ranked)
  keys = evidence_keys(name, res, n)
  compared = 0
  if keys is not None:
    for a in ranked:
      for b in ranked:
        if keys[a] > keys[b]:
          assert x[a] > x[b], (name, a, b, keys, x)
          compared += 1
        elif keys[a] == keys[b]:
          assert x[a] == x[b], (name, a, b, keys, x)
    return compared
  # Elimination: every player's last match eliminated it (or was the final); its winner, when
  # decisive and ranked, went further.
  for p in ranked:
    m, r = [(m, r) for m, r in res.matches if p in (m.i, m.j)][-1]
    mine, theirs = (r.score_p, r.score_q) if m.i == p else (r.score_q, r.score_p)
    other = m.j if m.i == p else m.i
    if theirs - mine > topology.TOLERANCE and res.ranked[other]:
      assert x[other] > x[p], (name, p, other, res)
      compared += 1
  return compared


def check_rule(res, n):
  """Masks, advantages and base rewards of one group under the failure rule."""
  failed = {p for m, r in res.matches if not r.ok for p in (m.i, m.j)}
  kept = [p for p in range(n) if p not in failed]
  expect = np.array([p in kept for p in range(n)]) if len(kept) >= 2 else np.zeros(n, bool)
  np.testing.assert_array_equal(res.ranked, expect)
  adv, mask = res.advantages, res.ranked
  np.testing.assert_array_equal(adv[~mask], 0.0)
  np.testing.assert_array_equal(res.base_rewards[~mask & np.isin(np.arange(n), list(failed))],
                                0.0)
  if mask.sum() >= 2:
    x = res.base_rewards[mask]
    assert 0.0 <= x.min() and x.max() <= 1.0
    assert abs(adv[mask].mean()) < 1e-5
    if np.ptp(x) > 0:
      assert np.std(adv[mask], ddof=1) == pytest.approx(1.0, abs=1e-4)
    else:
      np.testing.assert_array_equal(adv[mask], 0.0)
    # The advantages keep the base rewards' order.
    order = np.argsort(x, kind="stable")
    assert np.all(np.diff(adv[mask][order]) >= -1e-6)
  return len(kept) < 2


@pytest.mark.parametrize("name", sorted(tournament.TOPOLOGIES))
def test_every_topology_under_random_failures(name):
  rng = np.random.default_rng(sum(map(ord, name)))
  compared = dropped = unranked = 0
  for trial in range(80):
    n = int(rng.integers(2, 10))
    s = rng.uniform(0, 20, (n, n)).round(1)
    if trial % 4 == 0:  # many exact ties
      s = rng.integers(0, 3, (n, n)) * 10.0
    rate = (0.0, 0.1, 0.3, 0.7)[trial % 4]
    res = rank(RandomFailures(ScoreMatrixJudge(s), rate, trial), name, n, seed=trial)
    if rate == 0.0:
      assert res.ranked.all()
    dropped += check_rule(res, n)
    unranked += int((~res.ranked).sum())
    compared += check_evidence(name, res, n)
  assert compared > 50 and dropped > 0 and unranked > 20  # the checks were not vacuous


def test_the_hand_worked_single_elimination_example():
  """Qualities 0 > 1 > 2 > 3, anchor 0; the worst player's match with the anchor fails.

  Seeding (1, 0), (2, 0) judged, (3, 0) fails: 0 and 3 are unranked. Seeds 0, 1, 2, 3: the
  bracket plays (0, 3) (0 advances as the better seed) and (1, 2) (1 wins), then the final
  (0, 1) (0 wins). The ranked 1 and 2 stand 1 > 2: x = 1, 0 -> +-0.7071. (The old demotion rule
  gave (-0.833, +1.167, +0.5, -0.833): the breaker gained, the innocent anchor was punished.)
  """
  judge = FailOrdered(NoisyJudge(np.array([3.0, 2.0, 1.0, 0.0])), [(3, 0)])
  res = rank(judge, "single_elimination", 4)
  assert [(m.i, m.j, r.ok) for m, r in res.matches] == [
      (1, 0, True), (2, 0, True), (3, 0, False), (0, 3, True), (1, 2, True), (0, 1, True)]
  np.testing.assert_allclose(res.advantages, [0.0, 0.70711, -0.70711, 0.0], atol=1e-5)
  np.testing.assert_array_equal(res.ranked.astype(np.float32), [0, 1, 1, 0])
  np.testing.assert_array_equal(res.base_rewards, [0.0, 1.0, 0.0, 0.0])
  assert res.order == (1, 2, 0, 3) and res.failures == 1


@pytest.mark.parametrize("name", sorted(tournament.TOPOLOGIES))
def test_two_players_and_a_failed_match_drop_the_group(name):
  judge = ScoreMatrixJudge(np.array([[0, 15.0], [5.0, 0]]), fail_pairs=[(0, 1)])
  res = rank(judge, name, 2)
  np.testing.assert_array_equal(res.advantages, [0.0, 0.0])
  np.testing.assert_array_equal(res.ranked, [False, False])


def config(source="arena", topology_name="single_elimination"):
  return AdvantageSettings(source=source, tournament=TournamentSettings(
      topology=topology_name, failure_threshold=1.0))


def test_arena_source_gives_the_mask_and_counts_unranked_and_dropped():
  # Two groups of the hand-worked example; then two groups of two players, failed -> dropped.
  judge = FailOrdered(NoisyJudge(np.array([3.0, 2.0, 1.0, 0.0])), [(3, 0)])
  j = adv_lib.arena([group(4, "a"), group(4, "c")], judge, config(), step=0)
  np.testing.assert_array_equal(j.mask_BG, [[0, 1, 1, 0], [0, 1, 1, 0]])
  assert j.mask_BG.dtype == np.float32
  np.testing.assert_allclose(j.advantages_BG[0], [0.0, 0.70711, -0.70711, 0.0], atol=1e-5)
  assert j.stats["judge/unranked_trajectories"] == 4.0 and j.stats["judge/dropped_groups"] == 0
  assert j.stats["judge/failures"] == 2.0
  two = ScoreMatrixJudge(np.array([[0, 15.0], [5.0, 0]]), fail_pairs=[(0, 1)])
  d = adv_lib.arena([group(2, "a"), group(2, "b")], two, config(topology_name="anchor"), step=0)
  np.testing.assert_array_equal(d.mask_BG, np.zeros((2, 2)))
  assert d.stats["judge/unranked_trajectories"] == 4.0 and d.stats["judge/dropped_groups"] == 2
  assert "tournament/anchor_rank_mean" not in d.stats  # no group has a ranked anchor


class PointwiseFake:
  """``score`` returns fixed scores and ok flags (NaN where failed, as the judges do)."""

  def __init__(self, scores, ok):
    self.scores, self.ok = np.asarray(scores, np.float32), np.asarray(ok, bool)

  def score(self, trajectories, *, offset=0):
    assert len(trajectories) == len(self.scores)
    return PointwiseScores(np.where(self.ok, self.scores, np.nan), self.ok,
                           tuple(None if k else "failed" for k in self.ok))


def test_pointwise_source_honours_ok():
  fake = PointwiseFake([8, 6, 3, 7, 5, 9, 9, 1, 4, 4, 2, 3],
                       [1, 1, 0, 1, 1, 0, 1, 1, 0, 0, 1, 0])
  j = adv_lib.pointwise([group(4, "a"), group(4, "b"), group(4, "c")], fake, config("pointwise"),
                        step=0)
  np.testing.assert_allclose(j.advantages_BG, [[1, -1, 0, 0], [0, 0, 1, -1], [0, 0, 0, 0]],
                             atol=1e-5)
  np.testing.assert_array_equal(j.mask_BG, [[1, 1, 0, 1], [1, 0, 1, 1], [0, 0, 0, 0]])
  assert np.isnan(j.rewards_BG[0, 2]) and j.rewards_BG[0, 0] == 8.0  # a failure is no score
  assert j.stats["judge/failures"] == 5.0
  assert j.stats["judge/unranked_trajectories"] == 6.0 and j.stats["judge/dropped_groups"] == 1.0


def test_experience_marks_unranked_rows_and_the_batch_trains_nothing_on_them(monkeypatch):
  """The loop contract (trajectories, advantages_N, stats) carries the mask as
  ``metadata["ranked"]``; make_batch gives those rows loss mask 0."""
  def traj(i, query):
    return Trajectory(query=query, tokens=np.arange(4, dtype=np.int32),
                      loss_mask=np.array([0, 1, 1, 1], np.int32), finish_reason="answer",
                      metadata={"greedy": i == 0, "temperature": 1.0})

  groups = [[traj(i, "a") for i in range(4)], [traj(i, "b") for i in range(4)]]
  rollout = pytypes.SimpleNamespace(run=lambda *a, **k: pytypes.SimpleNamespace(
      trajectories=groups, valid_rate=1.0,
      stats={"device_s": 0.0, "tool_s": 0.0, "host_s": 0.0, "sampled_tokens": 24}))
  monkeypatch.setattr(experience_lib.policy_sampler, "set_policy", lambda *a: None)
  exp = object.__new__(experience_lib.Experience)
  # A verifier that solves only the greedy rows: a monitor, it must not touch the advantages.
  verify = lambda t: (Verification(met=2, total=2) if t.metadata["greedy"]  # noqa: E731
                      else Verification(met=1, total=2, unmet=("count",)))
  exp.advantage, exp.truth = config(), None
  exp.env = pytypes.SimpleNamespace(valid=None, verify=verify)
  exp.judge = FailOrdered(NoisyJudge(np.array([3.0, 2.0, 1.0, 0.0])), [(3, 0)])
  exp.workdir, exp.log_due, exp.tasks, exp.source = None, None, [None, None], None
  exp.sampler, exp.rollout, exp.tool_names, exp.group_size = None, rollout, [], 4
  exp.advantage_source = adv_lib.get_source("arena")
  flat, adv_N, stats = exp(None, step=0, prompt_ids=[0, 1], all_prompt_ids=[0, 1])
  ranked = [t.metadata.get("ranked", True) for t in flat]
  assert ranked == [False, True, True, False] * 2
  assert all("ranked" not in t.metadata for g in groups for t in g)  # the rollout's own objects
  np.testing.assert_allclose(adv_N, [0, 0.70711, -0.70711, 0] * 2, atol=1e-5)
  assert stats["judge/unranked_trajectories"] == 4.0 and stats["judge/dropped_groups"] == 0.0
  assert stats["reward/mean"] == 0.5 and stats["advantage/mean"] == pytest.approx(0.0, abs=1e-6)
  batch = batch_lib.make_batch(flat, adv_N, bucket=4)
  np.testing.assert_array_equal(batch["loss_mask_NT"].sum(1), [0, 3, 3, 0] * 2)
  assert stats["verifier/solved_rate"] == 0.25 and stats["verifier/met_rate"] == 0.625
