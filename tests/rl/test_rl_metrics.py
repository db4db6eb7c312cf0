"""The RL step's diagnostics: judge deltas (cache hits, order flips, seconds), the anchor seeding's
agreement with the final order, length-win correlations, zero-advantage groups, tool calls by
tool, and the per-evaluation-step rollout logs. Hand-worked values throughout."""
import json
import math

import numpy as np
import pytest

from arenarl_jax import tournament
from arenarl_jax.rl import rollout_log
from arenarl_jax.rl import stats as rl_stats
from arenarl_jax.rollout import stats as rollout_stats
from arenarl_jax.judges import stats as judge_stats_lib
from arenarl_jax.judges.synthetic import ScoreMatrixJudge
from arenarl_jax.tournament import diagnostics
from arenarl_jax.types import MatchResult, Step, Trajectory


def make_group(n, query="q", task_id="travel/poi/000001"):
  return [Trajectory(query=query, metadata={"task_id": task_id, "greedy": i == 0})
          for i in range(n)]


def pairwise(entries, n, default=10.0):
  s = np.full((n, n), default)
  for (i, j), (si, sj) in entries.items():
    s[i, j], s[j, i] = si, sj
  return s


# Seeding: 1 beats the anchor 12-8, 2 loses 8-12, 3 ties 10-10 -> seeding scores [10, 12, 8, 10].
# Bracket (seeds 1, 0, 3, 2 -> pairs (1, 2), (0, 3)): 2 upsets 1 (12-8), 0 and 3 tie (the better
# seed, 0, advances), 0 beats 2 in the final (12-8). Round-one losers by their mean points: 1
# (12, 8) and 3 (10, 10) tie at 10, the better seed first: order 0, 2, 1, 3. The tie is no
# evidence between 0 and 3, so 3 shares the champion's standing: order 0, 3, 2, 1, ranks
# [1, 4, 3, 1]. Against the seeding: pairs (0,1) (1,2) (1,3) discordant, (0,2) (2,3) concordant,
# (0,3) tied in both: tau_b = (2 - 3) / sqrt(5 * 5).
SEEDED = pairwise({(1, 0): (12, 8), (2, 0): (8, 12), (3, 0): (10, 10), (1, 2): (8, 12)}, 4)
TAU = -1 / 5


def test_seeding_tau_single_elimination_hand_value():
  (res,) = tournament.rank([make_group(4)], ScoreMatrixJudge(SEEDED), "single_elimination", 0)
  assert res.order == (0, 3, 2, 1)
  np.testing.assert_array_equal(res.ranks, [1, 4, 3, 1])
  np.testing.assert_array_equal(diagnostics.seeding_scores(res, 4), [10, 12, 8, 10])
  assert diagnostics.seeding_tau(res) == pytest.approx(TAU)
  assert diagnostics.mean_seeding_tau([res, res], "single_elimination") == pytest.approx(TAU)


def test_seeding_tau_is_one_for_anchor_and_absent_without_a_seeding():
  judge = ScoreMatrixJudge(SEEDED)
  (res,) = tournament.rank([make_group(4)], judge, "anchor", 0)
  assert diagnostics.seeding_tau(res) == pytest.approx(1.0)  # the seeding is the standing
  for name in ("round_robin", "swiss", "double_elimination"):
    results = tournament.rank([make_group(4)], judge, name, 0)
    assert diagnostics.mean_seeding_tau(results, name) is None, name
  # All seeding scores equal: no tau, so the group is left out (no groups left: None).
  (flat,) = tournament.rank([make_group(4)], ScoreMatrixJudge(np.full((4, 4), 10.0)),
                            "single_elimination", 0)
  assert diagnostics.seeding_tau(flat) is None
  assert diagnostics.mean_seeding_tau([flat], "single_elimination") is None
  assert diagnostics.mean_seeding_tau([flat, res], "anchor") == pytest.approx(1.0)


class ScriptedJudge:
  """Match k of each call: forward (A=P) and backward (A=Q) sums from the script, with
  ``JudgeMetrics`` counting orders, flips and cache hits like the real backends."""

  def __init__(self, script, cached=()):
    self.script, self.cached, self.metrics = script, set(cached), judge_stats_lib.JudgeMetrics()
    self.seen = 0

  def judge(self, matches):
    out = []
    for m in matches:
      fwd, bwd = self.script[(m.i, m.j)]
      if self.seen in self.cached:
        self.metrics.add("cache_hits", 2)
      self.seen += 1
      self.metrics.orders(fwd, bwd)
      out.append(MatchResult(score_p=fwd[0] + bwd[1], score_q=fwd[1] + bwd[0], requests=2))
    self.metrics.add("requests", 2 * len(matches))
    return out


def test_judge_stats_are_this_steps_deltas():
  # Anchor topology, 3 matches: (1, 0) agrees in both orders, (2, 0) flips (A wins both times),
  # (3, 0) agrees; the second match was cached (2 requests).
  script = {(1, 0): ((8, 5), (5, 8)), (2, 0): ((8, 5), (8, 5)), (3, 0): ((4, 6), (6, 4))}
  judge = ScriptedJudge(script, cached={1})
  judge.metrics.add("cache_hits", 7)  # earlier steps' counts are not this step's
  judge.metrics.orders((1, 2), (1, 2))
  before = rl_stats.judge_counters(judge)
  timed = rl_stats.TimedJudge(judge)
  tournament.rank([make_group(4)], timed, "anchor", 0)
  out = rl_stats.judge_stats(before, rl_stats.judge_counters(judge), timed)
  assert out["judge/cache_hits"] == 2
  assert out["judge/both_orders"] == 3 and out["judge/order_flips"] == 1
  assert out["judge/order_flip_rate"] == pytest.approx(1 / 3)
  assert out["judge/calls"] == 1 and out["time/judge_calls_s"] >= 0.0
  # A judge without counters reports only its time; no matches judged twice: no flip rate.
  plain = rl_stats.TimedJudge(ScoreMatrixJudge(SEEDED))
  tournament.rank([make_group(4)], plain, "single_elimination", 0)
  out = rl_stats.judge_stats({}, {}, plain)
  assert set(out) == {"time/judge_calls_s", "judge/calls"} and out["judge/calls"] == 3


def traj(sampled, answer, log=()):
  mask = np.r_[np.zeros(2), np.ones(sampled)].astype(np.int32)
  return Trajectory(query="q", steps=(Step(content=answer),), tokens=np.zeros(len(mask), np.int32),
                    loss_mask=mask, finish_reason="answer", metadata={"tool_log": tuple(log)})


def test_step_stats_correlations_and_zero_groups():
  groups = [[traj(2, "a"), traj(4, "abc")], [traj(6, "ab"), traj(2, "abcd")]]
  adv = np.array([[-1.0, 1.0], [1.0, -1.0]])
  out = rl_stats.step_stats(groups, adv, np.array([[0.0, 1.0], [1.0, 0.0]]))
  # sampled [2, 4, 6, 2] vs adv [-1, 1, 1, -1]: cov 6, var 11 and 4 -> 6 / sqrt(44).
  assert out["length_win_corr"] == pytest.approx(6 / math.sqrt(44))
  # answer chars [1, 3, 2, 4]: deviations [-1.5, .5, -.5, 1.5] . adv = 0.
  assert out["answer_chars_win_corr"] == pytest.approx(0.0, abs=1e-12)
  assert out["advantage/zero_groups"] == 0.0 and out["reward/mean"] == 0.5
  three = groups + [[traj(3, "x"), traj(3, "y")]]
  out = rl_stats.step_stats(three, np.array([[-1.0, 1.0], [1.0, -1.0], [0.0, 0.0]]),
                              np.zeros((3, 2)))
  assert out["advantage/zero_groups"] == pytest.approx(1 / 3)


def test_step_stats_count_only_ranked_trajectories():
  """Unranked trajectories (mask 0) carry a placeholder reward (NaN for a failed pointwise score)
  and advantage 0: the means, spreads and correlations leave them out; a dropped group still
  counts as a zero-advantage group."""
  groups = [[traj(2, "a"), traj(4, "abc"), traj(9, "zzzzzz")], [traj(6, "ab"), traj(2, "abcd"),
                                                                 traj(1, "")]]
  adv = np.array([[-1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
  reward = np.array([[0.0, 1.0, np.nan], [3.0, 5.0, 7.0]])
  mask = np.array([[1, 1, 0], [0, 0, 0]], np.float32)
  out = rl_stats.step_stats(groups, adv, reward, mask)
  assert out["reward/mean"] == 0.5 and out["reward/std"] == 0.5
  assert out["advantage/mean"] == 0.0 and out["advantage/std"] == 1.0
  assert out["length_win_corr"] == pytest.approx(1.0)  # sampled 2, 4 vs adv -1, +1
  assert out["advantage/zero_groups"] == 0.5
  none = rl_stats.step_stats(groups, np.zeros((2, 3)), reward, np.zeros((2, 3)))
  assert none["reward/mean"] == 0.0 and none["advantage/abs_max"] == 0.0
  assert none["length_win_corr"] == 0.0 and none["advantage/zero_groups"] == 1.0


def test_checker_agreement_hand_values():
  # Group 0 agrees in full (tau 1); group 1's rewards are tied (no tau); group 2, masked to its
  # first three, is reversed (tau -1): the mean over the two groups with a tau is 0.
  reward_BG = np.array([[0., 1, 2, 3], [1, 1, 1, 1], [3, 2, 1, 9]])
  checker_BG = np.array([[0., 1, 2, 3], [0, 1, 2, 3], [0, 1, 3, 0]])
  mask_BG = np.array([[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 0]], np.float32)
  out = rl_stats.checker_agreement(reward_BG, checker_BG, mask_BG)
  assert out == {"reward/checker_tau_groups": pytest.approx(2 / 3), "reward/checker_tau": 0.0}
  # Of the six pairs, three concordant, two discordant and one tied on the checker's side:
  # tau-b = (3 - 2) / sqrt(6 * (6 - 1)).
  out = rl_stats.checker_agreement(np.array([[0., 1, 2, 3]]), np.array([[0., 2, 1, 1]]))
  assert out["reward/checker_tau"] == pytest.approx(1 / math.sqrt(30))
  # No group with a tau: only the share, 0.
  assert rl_stats.checker_agreement(np.zeros((2, 3)), np.ones((2, 3))) == {
      "reward/checker_tau_groups": 0.0}


def test_tool_calls_by_tool_never_name_metrics_after_policy_text():
  ok = {"ok": True, "error_kind": None, "latency_s": 0.5}
  log_a = [dict(ok, name="search_poi"), dict(ok, name="search_poi", latency_s=1.5),
           dict(ok, name="<script>made_up"), {"ok": False, "error_kind": "bad_arguments",
                                              "name": None}]
  out = rollout_stats.trajectory_metrics([traj(1, "a", log_a), traj(1, "b", [dict(ok, name="route")])],
                                        "r", tool_names=["search_poi", "route", "weather"])
  assert out["r/tool_calls/search_poi"] == 1.0 and out["r/tool_calls/route"] == 0.5
  assert out["r/tool_calls/weather"] == 0.0
  assert out["r/tool_calls/other"] == 0.5 and out["r/tool_calls/malformed"] == 0.5
  assert out["r/tool_errors/bad_arguments"] == 1.0 and out["r/tool_calls_per_trajectory"] == 2.5
  assert not any("script" in k for k in out)
  # Mean latency of the calls that reached a tool: (0.5 + 1.5 + 0.5 + 0.5) / 4.
  assert out["time/r/tool_call_mean_s"] == pytest.approx(0.75)


def test_rollout_log_holds_matches_and_scores_and_is_never_overwritten(tmp_path):
  groups = [make_group(4, "q0", "travel/poi/000001"), make_group(4, "q1", "travel/route/000002")]
  results = tournament.rank(groups, ScoreMatrixJudge(SEEDED), "single_elimination", 0)
  adv = np.stack([r.advantages for r in results])
  rewards = np.stack([r.base_rewards for r in results])
  first = rollout_log.write_rollouts(str(tmp_path), 3, groups, adv, rewards, results,
                                    topology="single_elimination")
  again = rollout_log.write_rollouts(str(tmp_path), 3, groups, adv, rewards, results,
                                    topology="single_elimination")
  assert first.endswith("step_00000003.jsonl") and again.endswith("step_00000003_1.jsonl")
  rows = [json.loads(line) for line in open(first)]
  assert [r["group"] for r in rows] == [0, 1] and rows[1]["subtask"] == "route"
  assert rows[0]["order"] == [0, 3, 2, 1] and rows[0]["ranks"] == [1, 4, 3, 1]
  assert len(rows[0]["matches"]) == 6 and rows[0]["matches"][0]["i"] == 1
  # The anchor pass (three matches), the semi-finals, the final: the viewer's bracket rounds.
  assert [m["round"] for m in rows[0]["matches"]] == [0, 0, 0, 1, 1, 2]
  assert rows[0]["matches"][0]["score_p"] == 12 and rows[0]["matches"][0]["ok"]
  assert rows[0]["seeding_tau"] == pytest.approx(TAU)
  assert [t["advantage"] for t in rows[0]["trajectories"]] == pytest.approx(adv[0].tolist())
  assert rows[0]["trajectories"][0]["greedy"] and not rows[0]["trajectories"][1]["greedy"]
  assert rows[0]["ranked"] == [True] * 4
  assert [t["ranked"] for t in rows[0]["trajectories"]] == [True] * 4


def test_rollout_log_marks_unranked_trajectories(tmp_path):
  """A failed match's players are written with ``ranked`` False (group and trajectory rows),
  from the source's mask or, without one, from ``metadata["ranked"]``."""
  groups = [make_group(4)]
  (res,) = tournament.rank(groups, ScoreMatrixJudge(SEEDED, fail_pairs=[(3, 0)]),
                           "single_elimination", 0, failure_threshold=1.0)
  mask = res.ranked[None].astype(np.float32)
  path = rollout_log.write_rollouts(str(tmp_path), 1, groups, res.advantages[None],
                                    res.base_rewards[None], [res], topology="single_elimination",
                                    mask_BG=mask)
  (row,) = [json.loads(line) for line in open(path)]
  assert row["ranked"] == [False, True, True, False] and row["failures"] >= 1
  assert [t["ranked"] for t in row["trajectories"]] == [False, True, True, False]
  assert [t["advantage"] for t in row["trajectories"]][::3] == [0.0, 0.0]
  marked = [Trajectory(query="q", metadata={"ranked": i != 2}) for i in range(3)]
  rec = rollout_log.group_record(1, 0, marked, np.zeros(3), np.array([1.0, 0.0, np.nan]))
  assert [t["ranked"] for t in rec["trajectories"]] == [True, True, False]
  assert rec["trajectories"][2]["reward"] is None  # a failed pointwise score: no number


def test_tie_shares_by_hand():
  values_BG = np.array([[1.0, 1.0, 1.0], [1.0, 2.0, 2.0], [1.0, 2.0, 3.0], [5.0, np.nan, np.nan]])
  # All tied: rows 0 and 3 (one value only); any tie: rows 0 and 1.
  assert rl_stats.tie_shares(values_BG) == (0.5, 0.5)
  out = rl_stats.step_stats([[traj(1, "a"), traj(1, "b")], [traj(1, "c"), traj(1, "d")]],
                            np.zeros((2, 2)), np.array([[0.5, 0.5], [1.0, 0.0]]))
  assert (out["reward/all_tied_groups"], out["reward/any_tied_groups"]) == (0.5, 0.5)


def test_verifier_stats_keep_greedy_anchors_apart_from_samples():
  from arenarl_jax.envs.base import Verification
  from arenarl_jax.rl import experience

  class Env:
    def verify(self, t):
      met, content = t.metadata["v"]
      return Verification(met=met, total=4, unmet=tuple(f"fact:{k}" for k in range(4 - met)),
                          content_met=content, content_total=2)

  rows = [Trajectory(query="q", metadata={"greedy": g, "v": v})
          for g, v in ((True, (4, 2)), (False, (2, 0)), (False, (3, 1)), (True, (0, 0)))]
  got = experience.verifier_stats(Env(), rows)
  assert got["verifier/met_rate"] == pytest.approx(9 / 16)
  assert got["verifier/met_rate_greedy"] == pytest.approx(0.5)
  assert got["verifier/met_rate_sampled"] == pytest.approx(5 / 8)
  assert got["verifier/content_met_rate_greedy"] == pytest.approx(0.5)
  assert got["verifier/content_met_rate_sampled"] == pytest.approx(0.25)
