"""The strict verifier's rates in the evaluation: hand-worked rates, paired changes and their
bootstrap intervals, the report's table, scalars and jsonl fields, and the RESULT line."""
import dataclasses
import json
import math

import numpy as np
import pytest

from arenarl_jax.envs.base import Verification
from arenarl_jax.eval import bootstrap, report as report_lib, success as success_lib
from arenarl_jax.eval import compare
from arenarl_jax.eval.run import result_line
from arenarl_jax.types import MatchResult, Step, Trajectory


def traj(task_id, subtask="search", finish="answer", solved=None, met=None):
  return Trajectory(query=f"q {task_id}", steps=(Step(content="an answer"),), finish_reason=finish,
                    metadata={"task_id": task_id, "subtask": subtask,
                              "verdict": (met, 4) if met is not None else (4 if solved else 1, 4)})


def verify(t):
  met, total = t.metadata["verdict"]
  return Verification(met=met, total=total,
                      unmet=tuple(f"fact:{k}" for k in range(total - met)))


def test_verification_contract():
  v = Verification(met=3, total=4, unmet=("budget",))
  assert not v.solved and v.met_rate == 0.75
  assert v.as_dict() == {"solved": False, "unmet": ["budget"], "met": 3, "total": 4}
  assert Verification(met=2, total=2).solved
  assert Verification(met=0, total=5, unmet=("finished",)).met_rate == 0.0
  with pytest.raises(ValueError, match="unmet"):
    Verification(met=2, total=2, unmet=("count",))
  with pytest.raises(ValueError, match="unmet"):
    Verification(met=1, total=2)
  with pytest.raises(ValueError, match="met"):
    Verification(met=3, total=2)


def test_hand_worked_rates_and_paired_change():
  # Tasks a, b, c with two trajectories each; the start has one per task.
  policy = [traj("a", met=4), traj("a", met=2), traj("b", met=4), traj("b", met=4),
            traj("c", met=0, finish="length"), traj("c", met=1)]
  start = [traj("a", met=2), traj("b", met=4), traj("c", met=0)]
  s = success_lib.success(policy, [verify(t) for t in policy], start=start,
                          start_verdicts=[verify(t) for t in start], samples=500, seed=3)
  # Solved per task: a 0.5, b 1, c 0 -> 0.5; met per task: a 0.75, b 1, c 0.125 -> 0.625.
  assert (s.tasks, s.trajectories) == (3, 6)
  assert s.solved.value == pytest.approx(0.5) and s.met.value == pytest.approx(0.625)
  assert s.solved_start.value == pytest.approx(1 / 3)
  assert s.met_start.value == pytest.approx((0.5 + 1 + 0) / 3)
  # Paired: per-task differences (0.5, 0, 0) and (0.25, 0, 0.125).
  assert s.solved_diff.value == pytest.approx(0.5 / 3)
  assert s.met_diff.value == pytest.approx(0.125)
  assert s.limit_stop_rate == pytest.approx(1 / 6)
  # The paired interval is the bootstrap of the per-task differences with the same resamples.
  draw = bootstrap.resamples(3, 500, 3)
  diffs = np.array([0.25, 0.0, 0.125])
  assert (s.met_diff.low, s.met_diff.high) == pytest.approx(
      tuple(np.quantile(diffs[draw].mean(1), [0.025, 0.975])))
  assert s.met_diff.low <= s.met_diff.value <= s.met_diff.high


def test_pairing_cancels_what_tasks_share():
  # Task difficulty varies a lot, the policy is exactly one requirement better everywhere: the
  # unpaired intervals are wide, the paired one is the point.
  ids = [f"t{k}" for k in range(20)]
  start = [traj(t, met=k % 4) for k, t in enumerate(ids)]
  policy = [traj(t, met=k % 4 + 1) for k, t in enumerate(ids)]
  s = success_lib.success(policy, [verify(t) for t in policy], start=start,
                          start_verdicts=[verify(t) for t in start], samples=300)
  assert s.met_diff.value == s.met_diff.low == s.met_diff.high == pytest.approx(0.25)
  assert s.met.high - s.met.low > 0.1


def test_missing_start_task_is_named_and_one_task_has_no_interval():
  with pytest.raises(ValueError, match="'b'"):
    success_lib.success([traj("a", solved=True), traj("b", solved=True)],
                        [verify(traj("a", solved=True))] * 2,
                        start=[traj("a", solved=False)],
                        start_verdicts=[verify(traj("a", solved=False))])
  s = success_lib.success([traj("a", solved=True)], [verify(traj("a", solved=True))])
  assert s.solved.value == 1.0 and math.isnan(s.solved.low) and s.solved_diff is None


def test_report_table_scalars_jsonl_and_result_line(tmp_path):
  policy = [traj("a", "search", solved=True), traj("b", "search", finish="max_turns", met=0),
            traj("c", "direction", solved=True)]
  start = [traj("a", "search", solved=False), traj("b", "search", solved=False),
           traj("c", "direction", solved=True)]
  refs = [traj(t, s, solved=True) for t, s in (("a", "search"), ("b", "search"),
                                                  ("c", "direction"))]

  class Judge:
    def judge(self, matches):  # policy wins a, fails b, ties c
      return [MatchResult(12, 8), MatchResult(0, 0, ok=False, error="x"), MatchResult(10, 10)]

  rep = compare.evaluate(policy, refs, Judge(), second=start, verify=verify,
                         settings=compare.EvalSettings(bootstrap_samples=200))
  overall = rep.success["overall"]
  assert overall.solved.value == pytest.approx(2 / 3)
  assert overall.solved_start.value == pytest.approx(1 / 3)
  assert overall.solved_diff.value == pytest.approx(1 / 3)
  assert rep.success["search"].solved.value == 0.5
  assert rep.success["direction"].solved_diff.value == 0.0
  scalars = rep.scalars()
  assert scalars["eval/solved_rate"] == pytest.approx(2 / 3)
  assert scalars["eval/search/met_diff"] == pytest.approx((0.75 - 0.25) / 2)
  assert scalars["eval/limit_stop_rate"] == pytest.approx(1 / 3)
  assert (scalars["eval/wins_vs_sft"], scalars["eval/ties_vs_sft"],
          scalars["eval/losses_vs_sft"], scalars["eval/failed_vs_sft"]) == (1, 1, 0, 1)
  assert scalars["eval/win_rate_vs_sft"] == 0.75
  assert scalars["eval/win_rate_vs_sft_conservative"] == 0.5
  table = rep.table()
  assert "strict verifier" in table and "1-1-0 f1 c0.500" in table
  assert "+0.333" in table  # the overall solved change
  line = result_line(rep)
  keys = [kv.split("=")[0] for kv in line.split()[1:]]
  assert keys[0] == "win_rate_vs_sft"
  for key in ("solved_rate solved_rate_start solved_diff solved_diff_ci_low solved_diff_ci_high "
              "met_rate met_rate_start met_diff met_diff_ci_low met_diff_ci_high limit_stop_rate "
              "wins_vs_sft ties_vs_sft losses_vs_sft win_rate_vs_sft_conservative").split():
    assert key in keys, key
  values = dict(kv.split("=") for kv in line.split()[1:])
  assert values["solved_diff"] == "0.3333" and values["wins_vs_sft"] == "1"
  assert values["win_rate_vs_sft_conservative"] == "0.5000"
  path = report_lib.write_jsonl(rep, tmp_path)
  rows = [json.loads(x) for x in open(path)]
  assert rows[0]["success"]["overall"]["solved"]["value"] == pytest.approx(2 / 3)
  second = rows[2]
  assert (second["solved"], second["met"], second["total"]) == (False, 0, 4)
  assert second["unmet"] == ["fact:0", "fact:1", "fact:2", "fact:3"]
  assert [m["round"] for m in second["matches"]] == [0, 0]


def test_verdict_counts_content_apart_from_format():
  from arenarl_jax.envs import base
  from arenarl_jax.envs.travel import verifier as travel_verifier
  checks = [("finished", True), ("facts_supported", True), ("fact:info", False),
            ("count", True), ("fact:price:X", False)]
  v = base.verdict(checks, True, travel_verifier.is_content)
  assert (v.met, v.total, v.content_met, v.content_total) == (3, 5, 1, 3)
  assert v.unmet == ("fact:info", "fact:price:X")
  assert v.content_met_rate == pytest.approx(1 / 3)
  assert v.as_dict()["content_met"] == 1 and v.as_dict()["content_total"] == 3
  unfinished = base.verdict(checks, False, travel_verifier.is_content)
  assert (unfinished.met, unfinished.content_met, unfinished.content_total) == (0, 0, 3)
  assert unfinished.unmet == ("finished",)
  assert math.isnan(Verification(met=1, total=1).content_met_rate)
  with pytest.raises(ValueError, match="content_met"):
    Verification(met=1, total=3, unmet=("a", "b"), content_met=2, content_total=2)


def _place_traj(task_id, args, content_met, subtask="search", finish="answer"):
  from arenarl_jax.types import ToolCall
  steps = (Step(tool_calls=tuple(ToolCall("search_poi", a) for a in args)),
           Step(content="an answer"))
  return Trajectory(query=f"q {task_id}", steps=steps, finish_reason=finish,
                    metadata={"task_id": task_id, "subtask": subtask, "content": content_met})


def _content_verify(t):
  met = t.metadata["content"]  # of 4 content requirements, plus the 2 format ones (met)
  return Verification(met=met + 2, total=6, unmet=tuple(f"fact:{k}" for k in range(4 - met)),
                      content_met=met, content_total=4)


def test_content_met_and_first_call_place_by_hand():
  # Query places: a names "Red Gate", b names none, c names "Blue Inn" and "Old Pier".
  places = {"a": ("Red Gate",), "b": (), "c": ("Blue Inn", "Old Pier")}.__getitem__
  policy = [_place_traj("a", [{"city": "X", "keyword": "Red Gate"}], 4),
            _place_traj("a", [{"city": "X", "keyword": "red gate"}], 2),  # not exact
            _place_traj("b", [{"keyword": "Red Gate"}], 0),  # no place asked: not counted
            _place_traj("c", [{"city": "X"}, {"waypoints": ["Y", "Old Pier"]}], 1)]
  start = [_place_traj("a", [{"city": "X"}], 0), _place_traj("b", [], 0),
           _place_traj("c", [{"keyword": "Blue Inn"}], 1)]
  s = success_lib.success(policy, [_content_verify(t) for t in policy], start=start,
                          start_verdicts=[_content_verify(t) for t in start], places=places,
                          samples=300, seed=0)
  # Content per task: a (1 + 0.5) / 2, b 0, c 0.25 -> 0.25; start: 0, 0, 0.25 -> 1/12.
  assert s.content_met.value == pytest.approx((0.75 + 0 + 0.25) / 3)
  assert s.content_met_start.value == pytest.approx(0.25 / 3)
  assert s.content_met_diff.value == pytest.approx(0.75 / 3)
  # Places: tasks a (1 of 2 trajectories) and c (1 of 1) -> 0.75; start: a 0, c 1 -> 0.5.
  assert s.place_tasks == 2
  assert s.first_call_place.value == pytest.approx(0.75)
  assert s.first_call_place_start.value == pytest.approx(0.5)
  assert s.first_call_place_diff.value == pytest.approx(0.25)

  class Judge:
    def judge(self, matches):
      return [MatchResult(10, 10)] * len(matches)

  rep = compare.evaluate(policy, None, Judge(), second=start, verify=_content_verify,
                         places=places, settings=compare.EvalSettings(bootstrap_samples=200))
  assert "content" in rep.table() and "0.50 -> 0.75 n2" in rep.table()
  assert rep.scalars()["eval/content_met_rate"] == pytest.approx(1 / 3)
  assert rep.scalars()["eval/first_call_place_rate_start"] == pytest.approx(0.5)


def test_result_line_adds_content_and_place_keys():
  places = {"a": ("Red Gate",), "b": ()}.__getitem__
  policy = [_place_traj("a", [{"keyword": "Red Gate"}], 3), _place_traj("b", [], 1)]
  start = [_place_traj("a", [{"keyword": "Elsewhere"}], 1), _place_traj("b", [], 1)]
  refs = [_place_traj("a", [], 4), _place_traj("b", [], 4)]

  class Judge:
    def judge(self, matches):
      return [MatchResult(10, 10)] * len(matches)

  rep = compare.evaluate(policy, refs, Judge(), second=start, verify=_content_verify,
                         places=places, settings=compare.EvalSettings(bootstrap_samples=200))
  values = dict(kv.split("=") for kv in result_line(rep).split()[1:])
  # Content per task: a 3/4 vs 1/4, b 1/4 vs 1/4 -> 0.5 vs 0.25, change +0.25.
  assert values["content_met_rate"] == "0.5000" and values["content_met_rate_start"] == "0.2500"
  assert values["content_met_diff"] == "0.2500"
  assert float(values["content_met_diff_ci_low"]) <= 0.25 <= float(
      values["content_met_diff_ci_high"])
  assert values["first_call_place_rate"] == "1.0000"
  assert values["first_call_place_rate_start"] == "0.0000"
  keys = [kv.split("=")[0] for kv in result_line(rep).split()[1:]]
  assert keys.index("content_met_rate") > keys.index("win_rate_vs_sft_conservative")


def test_travel_query_places_and_verifier_content():
  from arenarl_jax.envs import base
  env = base.make_environment("travel")
  task = next(t for t in env.tasks("train") if t.subtask == "search")
  places = env.query_places(task)
  assert places and all(p in task.query for p in places)
  assert all(env.name_kinds()[p] == "place" for p in places)
  # The flawless expert's first turn calls the query's landmark, and it meets every
  # requirement, so every content requirement: the total less the two format ones.
  from arenarl_jax.text import messages as messages_lib
  msgs = env.expert(task, 0.0, np.random.default_rng(0))
  t = messages_lib.trajectory_from_messages(msgs, metadata={"task_id": task.id})
  assert base.first_call_names(t, places)
  v = env.verify(t)
  assert v.solved and (v.content_met, v.content_total) == (v.total - 2, v.total - 2)
  # A trajectory that stops at a limit meets no content requirement.
  cut = dataclasses.replace(t, finish_reason="length")
  v = env.verify(cut)
  assert (v.met, v.content_met, v.content_total) == (0, 0, v.total - 2)
