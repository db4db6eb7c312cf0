"""Evaluation: hand-worked win rates (ties, failures left out and counted), intervals, the
tool-result stripping rule, the travel expert judged by the noise-free rubric judge, the jsonl
log."""
import dataclasses
import json
import math
import os
import random

import numpy as np
import pytest

from arenarl_jax import config_tree
from arenarl_jax.eval import compare
from arenarl_jax.text import messages as msgs
from arenarl_jax.data import env_examples, records
from arenarl_jax.envs import base
from arenarl_jax.rollout.stats import generation_stats
from arenarl_jax.judges import make_judge, render
from arenarl_jax.judges.synthetic import ScoreMatrixJudge
from arenarl_jax.sampling.settings import SamplingSettings
from arenarl_jax.types import MatchResult, Step, ToolCall, Trajectory

T975 = {4: 2.7764451051977987, 9: 2.2621571627409915}  # Student t 97.5% quantiles (tables)


class ListJudge:
  """Result k for match k; records every batch it is called with."""

  def __init__(self, results):
    self.results = list(results)
    self.calls = []

  def judge(self, matches):
    self.calls.append(list(matches))
    return self.results[:len(matches)]


def traj(task_id, subtask="search", answer="an answer", steps=None, **fields):
  steps = steps if steps is not None else (Step(content=answer),)
  return Trajectory(query=f"query of {task_id}", steps=tuple(steps),
                    metadata={"task_id": task_id, "subtask": subtask, **fields.pop("meta", {})},
                    **fields)


def six_matches():
  """Policy k plays the opponent on task t<k>; tasks 0-2 are search, 3-5 direction."""
  policy = [traj(f"t{k}", "search" if k < 3 else "direction") for k in range(6)]
  opponent = [traj(f"t{k}", "search" if k < 3 else "direction") for k in range(6)]
  results = [MatchResult(14, 6), MatchResult(10, 10), MatchResult(3, 17),
             MatchResult(0, 0, ok=False, error="unparseable"), MatchResult(12, 8),
             MatchResult(10, 10 + 5e-7)]  # within the tie tolerance
  return policy, opponent, results


def test_hand_worked_win_rate_with_ties_and_failures():
  policy, opponent, results = six_matches()
  judge = ListJudge(results)
  comp = compare.win_rate(policy, opponent[::-1], judge, interval_method="t")
  assert len(judge.calls) == 1 and len(judge.calls[0]) == 6  # one batched call
  for k, m in enumerate(judge.calls[0]):
    assert (m.group, m.i, m.j) == (k, 0, 1) and m.p is policy[k]
    assert m.q is opponent[k]  # paired by task id, not by list order
  w = comp.overall
  assert (w.wins, w.ties, w.losses, w.failed, w.judged, w.tasks) == (2, 2, 1, 1, 5, 6)
  assert w.rate == pytest.approx(3 / 5)  # a failure scored as a tie would give 3.5 / 6
  assert comp.scores == (1.0, 0.5, 0.0, None, 1.0, 0.5)
  s, d = comp.by_subtask["search"], comp.by_subtask["direction"]
  assert (s.wins, s.ties, s.losses, s.failed, s.rate) == (1, 1, 1, 0, 0.5)
  assert (d.wins, d.ties, d.losses, d.failed, d.rate) == (1, 1, 0, 1, 0.75)
  # t interval on [1, .5, 0, 1, .5]: mean .6, s^2 = .70 / 4, half = t(4) * sqrt(.175 / 5).
  half = T975[4] * math.sqrt(0.175 / 5)
  assert w.low == pytest.approx(0.6 - half, abs=1e-9) and w.high == 1.0  # clipped at 1


def test_all_failed_gives_nan_and_counts():
  policy, opponent, _ = six_matches()
  comp = compare.win_rate(policy, opponent, ListJudge([MatchResult(0, 0, ok=False)] * 6))
  w = comp.overall
  assert w.failed == 6 and w.judged == 0
  assert math.isnan(w.rate) and math.isnan(w.low) and math.isnan(w.high)


def test_t_interval_hand_worked():
  # 3 wins, 4 ties, 3 losses: mean .5, s^2 = 1.5 / 9, half = t(9) * sqrt(s^2 / 10).
  scores = [1.0] * 3 + [0.5] * 4 + [0.0] * 3
  low, high = compare.interval(scores, [f"t{k}" for k in range(10)], method="t")
  half = T975[9] * math.sqrt(1.5 / 9 / 10)
  assert (low, high) == pytest.approx((0.5 - half, 0.5 + half), abs=1e-9)
  assert half == pytest.approx(0.292043, abs=1e-6)  # 2.262157 * sqrt(1 / 60)
  assert compare.interval([1.0], ["a"], method="t") == (0.0, 1.0)  # one match: no information
  assert compare.interval([None, 1.0, None], ["a", "b", "c"], method="t") == (0.0, 1.0)


def test_bootstrap_interval_hand_worked():
  # Two tasks scoring 1 and 0: resampled rates are 0, .5, 1 with probability 1/4, 1/2, 1/4,
  # so the 2.5% and 97.5% quantiles are the extremes.
  assert compare.interval([1.0, 0.0], ["a", "b"]) == (0.0, 1.0)
  # Every task the same outcome: every resample has that rate.
  assert compare.interval([0.5] * 7, list("abcdefg")) == (0.5, 0.5)
  assert compare.interval([1.0, 0.0], ["a", "a"]) == (0.0, 1.0)  # one task: no information
  # Task a: two wins; task b: a loss and a failure. A resample with i copies of a has rate
  # 2i / (2i + (2 - i)): 0, 2/3, 1; the failure is out of every denominator.
  policy = [traj("a"), traj("a"), traj("b"), traj("b")]
  judge = ListJudge([MatchResult(20, 0), MatchResult(15, 5), MatchResult(0, 20),
                     MatchResult(0, 0, ok=False)])
  w = compare.win_rate(policy, [traj("a"), traj("b")], judge).overall
  assert w.rate == pytest.approx(2 / 3) and (w.low, w.high) == (0.0, 1.0)
  assert (w.judged, w.failed, w.tasks) == (3, 1, 2)


def test_bootstrap_is_seeded_and_agrees_with_t_on_many_tasks():
  rng = random.Random(3)
  scores = [rng.choice([0.0, 0.5, 1.0, 1.0]) for _ in range(300)]
  ids = [f"t{k}" for k in range(300)]
  a = compare.interval(scores, ids, seed=1)
  assert a == compare.interval(scores, ids, seed=1)
  assert a != compare.interval(scores, ids, seed=2)
  t = compare.interval(scores, ids, method="t")
  assert a == pytest.approx(t, abs=0.02)  # one match per task: both estimate the same spread
  with pytest.raises(ValueError, match="interval method"):
    compare.interval(scores, ids, method="wilson")


def test_score_matrix_judge_and_group_samples():
  # Four tasks x G = 2 policy samples against one reference per task; a [M, 2, 2] score table:
  # S[k][0][1] is what the policy gets in match k, S[k][1][0] what the reference gets.
  policy = [traj(f"t{b}", meta={"g": g}) for b in range(4) for g in range(2)]
  refs = [traj(f"t{b}") for b in range(4)]
  p_scores = [15, 12, 10, 4, 9, 18, 2, 10]
  table = np.zeros((8, 2, 2))
  table[:, 0, 1] = p_scores
  table[:, 1, 0] = [5, 8, 10, 16, 11, 2, 18, 10]
  judge = ScoreMatrixJudge(table)
  comp = compare.win_rate(policy, refs, judge)
  assert judge.batch_sizes == [8]
  w = comp.overall
  assert (w.wins, w.ties, w.losses) == (3, 2, 3) and w.rate == pytest.approx(4 / 8)
  assert [m.q for m in comp.matches] == [refs[b] for b in range(4) for _ in range(2)]
  # Another policy with the same G pairs sample g with sample g.
  other = [traj(f"t{b}", meta={"g": g}) for b in range(4) for g in range(2)]
  comp = compare.win_rate(policy, other, ScoreMatrixJudge(table), name="sft")
  assert [m.q for m in comp.matches] == other
  with pytest.raises(ValueError, match="no trajectory for task 't3'"):
    compare.win_rate(policy, refs[:3], judge)
  with pytest.raises(ValueError, match="need 1 or the same number"):
    compare.win_rate(policy[:1], other[:2], judge)


def _tool_steps(results):
  call = ToolCall("search_poi", {"city": "Hangzhou"})
  return (Step(reasoning="look it up", tool_calls=(call,), tool_results=tuple(results)),
          Step(content="The answer is Lake View Hotel at 10:00."))


def test_tool_results_are_stripped_only_when_the_reference_has_none():
  imported = msgs.trajectory_from_messages(  # calls listed, tool messages left out
      [{"role": "user", "content": "q"},
       {"role": "assistant", "content": "", "tool_calls": [
           {"id": "c0", "type": "function",
            "function": {"name": "search_poi", "arguments": "{\"city\": \"Hangzhou\"}"}}]},
       {"role": "assistant", "content": "Lake View Hotel."}], metadata={"task_id": "t0"})
  blank = traj("t1", steps=_tool_steps(["  "]))  # a result that is only whitespace
  full = traj("t2", steps=_tool_steps(["Lake View Hotel, 4.8"]))
  no_calls = traj("t3", answer="I know this one.")
  assert compare.lacks_tool_results(imported) and compare.lacks_tool_results(blank)
  assert not compare.lacks_tool_results(full) and not compare.lacks_tool_results(no_calls)
  policy = [traj(f"t{k}", steps=_tool_steps(["Lake View Hotel, 4.8"])) for k in range(4)]
  judge = ListJudge([MatchResult(10, 10)] * 4)
  comp = compare.win_rate(policy, [imported, blank, full, no_calls], judge)
  assert comp.stripped == (True, True, False, False)
  seen = judge.calls[0]
  assert seen[0].p.steps[0].tool_results == () and seen[0].p.steps[0].tool_calls
  assert seen[2].p is policy[2] and seen[3].p is policy[3]
  assert policy[0].steps[0].tool_results == ("Lake View Hotel, 4.8",)  # the original is kept
  # Both sides now render the call the same way for the judge.
  limits = render.RenderLimits()
  assert "Tool result 1: (no result)" in render.render_path(seen[0].p, limits)
  assert "Tool result 1: (no result)" in render.render_path(imported, limits)
  as_task = lambda t, k: dataclasses.replace(t, metadata={"task_id": f"t{k}"})
  assert compare.win_rate(policy, [imported, *(as_task(blank, k) for k in (1, 2, 3))],
                          ListJudge([MatchResult(10, 10)] * 4),
                          strip="never").stripped == (False,) * 4
  assert compare.win_rate(policy, [as_task(full, k) for k in range(4)],
                          ListJudge([MatchResult(10, 10)] * 4),
                          strip="always").stripped == (True,) * 4


def test_generation_stats_hand_worked():
  log = ({"name": "a", "ok": True}, {"name": "b", "ok": False, "error_kind": "not_found"},
         {"name": None, "ok": False, "error_kind": "bad_arguments"})
  t1 = traj("t0", steps=_tool_steps(["r"]), finish_reason="answer",
            loss_mask=np.array([0, 0, 1, 1, 1, 0, 1]),
            meta={"tool_log": log, "turn_stop_reasons": ("stop", "eos")})
  t2 = traj("t1", answer="", finish_reason="length", loss_mask=np.array([0, 1, 1]),
            meta={"tool_log": ({"name": "a", "ok": False, "error_kind": "not_found"},)})
  t3 = traj("t2", steps=_tool_steps(["r"]))  # from messages: no tool log, no finish reason
  g = generation_stats([t1, t2, t3], [True, False, True])
  assert g["valid_rate"] == pytest.approx(2 / 3)
  assert g["finish"]["answer"] == 1 and g["finish"]["length"] == 1 and g["finish"]["none"] == 1
  assert g["finish"]["invalid"] == 0
  assert g["sampled_tokens"] == {"mean": 3.0, "median": 3.0, "max": 4.0}
  answer = len("The answer is Lake View Hotel at 10:00.")
  assert g["answer_chars"]["mean"] == pytest.approx(2 * answer / 3)
  assert g["turns"] == {"mean": pytest.approx(5 / 3), "median": 2.0, "max": 2.0}
  assert (g["tool_calls"], g["tool_errors"], g["without_tool_log"]) == (5, 3, 1)
  assert g["tool_errors_by_kind"] == {"bad_arguments": 1, "not_found": 2}
  assert g["tool_error_rate"] == pytest.approx(3 / 5)
  assert g["tool_error_rate_by_kind"]["not_found"] == pytest.approx(2 / 5)
  assert g["turn_stop_reasons"] == {"eos": 1, "stop": 1}


def test_settings_and_config_keys():
  c = config_tree.make_base_config()
  s = compare.EvalSettings.from_config(c.eval)
  assert s == compare.EvalSettings()
  with pytest.raises(ValueError, match="unknown key.*tasks_per_subtaks"):
    compare.EvalSettings.from_config({"tasks_per_subtaks": 3})
  with pytest.raises(ValueError, match="eval.interval"):
    compare.EvalSettings(interval="wilson")
  with pytest.raises(ValueError, match="eval.split"):
    compare.EvalSettings(split="train")
  every = compare.EvalSettings(every_steps=4)
  assert [k for k in range(11) if every.is_due(k, 10)] == [0, 4, 8, 10]
  assert [k for k in range(11) if s.is_due(k, 10)] == [0, 10]
  base_sampling = SamplingSettings(temperature=0.8)
  assert s.sampling(base_sampling).temperature == 0.0
  assert compare.EvalSettings(greedy=False).sampling(base_sampling).temperature == 0.8


@pytest.fixture(scope="module")
def travel():
  env = base.make_environment("travel", seed=0, train_per_subtask=2, test_per_subtask=6)
  return env, compare.eval_tasks(env, compare.EvalSettings(tasks_per_subtask=4))


def expert_trajectories(env, tasks, error_rate, seed=5):
  return [msgs.trajectory_from_messages(
      env.expert(t, error_rate, records.task_rng(seed, t.id)),
      metadata={"task_id": t.id, "subtask": t.subtask}) for t in tasks]


def test_reference_trajectories_match_the_test_split(travel):
  env, tasks = travel
  assert len(tasks) == 4 * len(env.subtasks)
  refs = compare.reference_trajectories(env, tasks)
  split = records.test_split(env.subtasks[0])
  examples = [records.Example.from_record(r) for r in env_examples.split_records(
      env, split, seed=env.seed, error_rate=env.reference_error_rate)][:4]
  from_data = compare.reference_trajectories(None, examples)
  for a, b in zip(refs[:4], from_data):
    assert a.steps == b.steps and a.metadata == b.metadata and a.query == b.query
  assert refs[0].metadata["task_id"] == tasks[0].id and refs[0].steps[0].tool_results
  with pytest.raises(ValueError, match="no reference and no environment"):
    compare.reference_trajectories(None, tasks[:1])


def test_travel_expert_against_references_with_the_rubric_judge(travel, tmp_path):
  env, tasks = travel
  judge = make_judge({"backend": "rubric", "rubric": env.rubric}, checker=env.checker)
  settings = compare.EvalSettings(bootstrap_samples=500)
  flawless = expert_trajectories(env, tasks, 0.0)
  refs = compare.reference_trajectories(env, tasks)  # error rate 0.3
  report = compare.evaluate(flawless, refs, judge, settings=settings, step=0,
                            valid=env.valid)
  w = report.comparisons["reference"].overall
  assert w.rate >= 0.5 and w.losses == 0 and w.wins > 0 and w.failed == 0, w
  assert w.low <= w.rate <= w.high
  assert report.generation["overall"]["valid_rate"] == 1.0
  assert report.generation["overall"]["tool_calls_per_trajectory"] > 1
  assert set(report.comparisons["reference"].by_subtask) == set(env.subtasks)
  # The expert at error rate 1 loses to flawless references, and to the flawless expert.
  sloppy = expert_trajectories(env, tasks, 1.0)
  clean_refs = compare.reference_trajectories(env, tasks, error_rate=0.0)
  bad = compare.evaluate(sloppy, clean_refs, judge, settings=settings, step=5,
                         second=flawless, valid=env.valid)
  for name in ("reference", "sft"):
    w = bad.comparisons[name].overall
    assert w.rate < 0.5 and w.high < 0.5 and w.wins == 0, (name, w)
  scalars = bad.scalars()
  assert scalars["eval/win_rate_vs_sft"] == bad.win_rate("sft")
  assert "eval/search/ci_high_vs_reference" in scalars
  assert "overall" in bad.table()
  # The jsonl log: one file per evaluation, never overwritten.
  first = compare.write_jsonl(report, tmp_path)
  before = open(first, encoding="utf-8").read()
  second = compare.write_jsonl(bad, tmp_path)
  again = compare.write_jsonl(report, tmp_path)  # the same step again: a new name
  assert sorted(os.listdir(tmp_path)) == ["eval_00000000.jsonl", "eval_00000000_1.jsonl",
                                          "eval_00000005.jsonl"]
  assert open(first, encoding="utf-8").read() == before
  assert open(again, encoding="utf-8").read() == before  # deterministic content
  lines = [json.loads(x) for x in open(second, encoding="utf-8")]
  assert lines[0]["kind"] == "summary" and lines[0]["step"] == 5
  assert len(lines) == 1 + len(tasks)
  rec = lines[1]
  assert rec["task_id"] == tasks[0].id and rec["messages"] == [dict(m) for m in sloppy[0].messages]
  assert [m["opponent"] for m in rec["matches"]] == ["reference", "sft"]
  m = rec["matches"][0]
  assert m["outcome"] == 0.0 and m["ok"] and set(m["detail"]) >= {"forward", "backward"}
  dims = m["detail"]["dimensions"]  # per side and direction, in rubric order
  assert dims["q"]["forward"] == dims["q"]["backward"] == {"path": [10.0] * 3,
                                                           "answer": [10.0] * 4}
  assert min(dims["p"]["forward"]["path"] + dims["p"]["forward"]["answer"]) < 10
  assert m["opponent_task_id"] == tasks[0].id and m["opponent_messages"]
