"""The travel checker is faithful to the expert's errors, and the rubric judge on it ranks nested
experts in order (issue: "The checker is faithful")."""
from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from arenarl_jax import tournament
from arenarl_jax import types
from arenarl_jax.envs.travel import checker as checker_lib
from arenarl_jax.envs.travel import expert as expert_lib
from arenarl_jax.envs.travel import reading as reading_lib
from arenarl_jax.judges import rubric as rubric_lib
from arenarl_jax.judges import rubric_judge
from travel_expert import env, expert_trajectory, tests_by_subtask  # noqa: F401  (fixtures)

# The docstring table of checker.py: (section, dimension) each error kind lowers.
LOWERS = {"skip_tool": {("path", "breadth"), ("answer", "relevance")},
          "break_constraint": {("answer", "feasibility")},
          "unsupported_fact": {("answer", "details")},
          "redundant_call": {("path", "relevance")}}


def _combined(scores):
  p = [scores["path"][d.name] for d in rubric_lib.TRAVEL.path]
  a = [scores["answer"][d.name] for d in rubric_lib.TRAVEL.answer]
  return rubric_lib.TRAVEL.combine(p, a)[2]


def _with_answer(traj, text):
  steps = traj.steps[:-1] + (dataclasses.replace(traj.steps[-1], content=text),)
  return dataclasses.replace(traj, steps=steps)


def test_docstring_table_names_every_kind():
  doc = checker_lib.__doc__
  for kind in expert_lib.KINDS:
    assert re.search(rf"^\s*{kind}\s", doc, re.M), kind


def test_expert_without_errors_gets_the_maximum(env, tests_by_subtask):
  for sub, tasks in tests_by_subtask.items():
    for k, task in enumerate(tasks[:10]):
      scores = env.checker(expert_trajectory(env, task, 0.0, k))
      assert all(v == 10 for sec in scores.values() for v in sec.values()), (task.id, scores)


def test_mean_score_falls_strictly_with_the_error_rate(env):
  tasks = env.tasks("train")[::6][:200]
  assert len(tasks) == 200 and {t.subtask for t in tasks} == set(env.subtasks)
  means = [np.mean([_combined(env.checker(expert_trajectory(env, t, rate, k))) for k, t in enumerate(tasks)])
           for rate in (0.0, 0.2, 0.5)]
  assert means[0] == 10.0 and means[0] > means[1] > means[2], means


def test_each_error_kind_lowers_exactly_its_dimensions(env, tests_by_subtask):
  for sub, tasks in tests_by_subtask.items():
    for k, task in enumerate(tasks[:6]):
      for kind in expert_lib.KINDS:
        scores = env.checker(expert_trajectory(env, task, 1.0, k, kinds=(kind,)))
        lowered = {(s, d) for s, sec in scores.items() for d, v in sec.items() if v < 10}
        assert lowered == LOWERS[kind], (task.id, kind, scores)
        for s, d in lowered:  # one or two sites, each one step
          step = checker_lib.STEP_PATH if s == "path" else checker_lib.STEP_ANSWER
          assert 10 - scores[s][d] in (step, 2 * step), (task.id, kind, scores)


def test_nested_errors(env):
  for k in range(50):
    sets = [expert_lib.draw_errors(r, k) for r in (0.0, 0.2, 0.3, 0.5, 0.6, 1.0)]
    assert sets[0] == frozenset() and sets[-1] == frozenset(expert_lib.SITES)
    assert all(a <= b for a, b in zip(sets, sets[1:]))
  assert expert_lib.draw_errors(0.5, 3, kinds=("skip_tool",)) <= {("skip_tool", 0),
                                                                  ("skip_tool", 1)}
  with pytest.raises(ValueError, match="error_rate"):
    expert_lib.draw_errors(1.5, 0)
  with pytest.raises(ValueError, match="unknown error kind"):
    expert_lib.draw_errors(0.5, 0, kinds=("typo",))


def test_empty_answer_scores_at_most_one(env, tests_by_subtask):
  for sub, tasks in tests_by_subtask.items():
    traj = _with_answer(expert_trajectory(env, tasks[0], 0.0, 0), "   ")
    scores = env.checker(traj)
    assert all(v <= 1 for v in scores["answer"].values()), (sub, scores)
  # A trajectory that never answers (the last step still calls tools) has no answer either.
  no_answer = types.Trajectory(query="q", steps=(types.Step(
      tool_calls=(types.ToolCall("universal_search", {"query": "x"}),), tool_results=("r",)),),
      metadata={"task_id": tests_by_subtask["search"][0].id})
  assert all(v == 0 for v in env.checker(no_answer)["answer"].values())


def test_one_invented_price_loses_on_details(env, tests_by_subtask):
  for sub, tasks in tests_by_subtask.items():
    traj = expert_trajectory(env, tasks[1], 0.0, 1)
    answer = traj.final_answer
    results = "\n".join(r for s in traj.steps for r in s.tool_results)
    m = next(m for m in re.finditer(r"¥(\d+)", answer)
             if "total" not in answer[answer.rfind("\n", 0, m.start()) + 1:m.start()].lower())
    fake = int(m.group(1)) + 1
    while str(fake) in results or str(fake) in traj.query:
      fake += 1
    changed = answer[:m.start(1)] + str(fake) + answer[m.end(1):]
    scores = env.checker(_with_answer(traj, changed))
    assert scores["answer"]["details"] < 10, (sub, changed)
    assert scores["path"] == env.checker(traj)["path"]


def test_path_counts_failed_unrelated_and_repeated_calls(env, tests_by_subtask):
  task = tests_by_subtask["compare"][0]
  good = expert_trajectory(env, task, 0.0, 0)
  src = env.tool_source()
  bad_call = types.ToolCall("search_poi", {"city": "Atlantis", "keyword": "x"})
  other = types.ToolCall("universal_search", {"query": "Flight baggage policy"})
  extra = types.Step(tool_calls=(bad_call, other),
                     tool_results=(src.call_sync(bad_call.name, bad_call.arguments).text,
                                   src.call_sync(other.name, other.arguments).text))
  traj = dataclasses.replace(good, steps=(extra,) + good.steps + ())
  path = env.checker(traj)["path"]
  assert path == {"breadth": 10.0, "relevance": 9.0, "detail": 8.0}
  repeat = dataclasses.replace(good, steps=(good.steps[0],) + good.steps)
  n = len(good.steps[0].tool_calls)
  assert env.checker(repeat)["path"]["relevance"] == max(0, 10 - 3 * n)
  # Path credit comes only from calls that serve the task: none at all, or only an unrelated
  # successful one, earns nothing on relevance and detail.
  only_answer = dataclasses.replace(good, steps=good.steps[-1:])
  assert env.checker(only_answer)["path"] == {"breadth": 0.0, "relevance": 0.0, "detail": 0.0}
  unrelated = types.Step(tool_calls=(other,), tool_results=(extra.tool_results[1],))
  off_topic = dataclasses.replace(good, steps=(unrelated,) + good.steps[-1:])
  assert env.checker(off_topic)["path"] == {"breadth": 0.0, "relevance": 0.0, "detail": 0.0}
  with pytest.raises(ValueError, match="task_id"):
    env.checker(dataclasses.replace(good, metadata={}))


def test_round_robin_ranks_nested_experts_in_order(env):
  rates = (0.0, 0.3, 0.6, 1.0)
  groups = []
  for k, task in enumerate(env.tasks("train")[::5]):
    if len({expert_lib.draw_errors(r, k) for r in rates}) < len(rates):
      continue  # the issue counts groups whose error sets are distinct
    groups.append([expert_trajectory(env, task, r, k) for r in rates])
  assert len(groups) >= 150
  judge = rubric_judge.RubricJudge(env.checker, "travel")
  results = tournament.rank(groups, judge, "round_robin", 0)
  in_order = sum(r.order == (0, 1, 2, 3) for r in results)
  assert in_order >= 0.95 * len(groups), (in_order, len(groups))


def test_invented_places_and_services_are_unsupported(env, tests_by_subtask):
  task = tests_by_subtask["multi_day"][2]
  traj = expert_trajectory(env, task, 0.0, 2)
  answer = traj.final_answer
  number = re.search(r"Outbound: \w+ (\w+),", answer).group(1)
  fake_number = number[:-1] + str((int(number[-1]) + 2) % 10)  # same direction parity
  results = "\n".join(r for s in traj.steps for r in s.tool_results)
  assert fake_number not in results
  hotel = re.search(r"Hotel: (.+?) \(", answer).group(1)
  for old, new in ((number, fake_number), (hotel, "Velvet Comet Grand Hotel")):
    scores = env.checker(_with_answer(traj, answer.replace(old, new)))
    assert scores["answer"]["details"] == 10 - checker_lib.STEP_ANSWER, (old, new, scores)


def test_arbitrary_trajectories_never_crash_the_checker(env, tests_by_subtask):
  rng = np.random.default_rng(0)
  alphabet = list("abc ¥:0123456789.\n") + ["km", "min", "rated ", "Total ", "recommend ",
                                            "arrival ", "leave ", "G12", "CA1234", " Museum",
                                            " Grand Hotel", "Jade Lotus"]
  for k in range(200):
    task = tests_by_subtask[env.subtasks[k % 5]][0]
    answer = "".join(rng.choice(alphabet, size=int(rng.integers(0, 120))))
    call = types.ToolCall(["search_poi", "get_navigation", "nope"][k % 3],
                          {"city": [1, {"a": None}], "waypoints": None, "x": float("nan")})
    steps = (types.Step(tool_calls=(call,), tool_results=("Error: x" if k % 2 else "¥5 3.2 km",)),
             types.Step(content=answer))
    scores = env.checker(types.Trajectory(query=task.query, steps=steps,
                                          metadata={"task_id": task.id}))
    assert all(0 <= v <= 10 for sec in scores.values() for v in sec.values())
    assert scores["path"]["breadth"] < 10  # nothing needed was called


def test_checks_facts_per_entity_and_needs_the_answering_fact(env, tests_by_subtask):
  """The review's findings: a number supports only the entity its line names, a sub-need is
  covered by the fact that answers it (not its words), nothing stated earns no feasibility or
  details, and a truncated turn is no answer."""
  search = tests_by_subtask["search"][3]
  good = expert_trajectory(env, search, 0.0, 3)
  answer = good.final_answer
  land = env.world.poi(search.constraints["city"], search.constraints["landmark"])
  other = next(p for p in env.world.pois[land.city] if p.address != land.address)
  # The landmark's line with another place's (real) address: wrong for the landmark, uncovered.
  moved = env.checker(_with_answer(good, answer.replace(land.address, other.address)))
  assert moved["answer"]["relevance"] == 10 - checker_lib.STEP_ANSWER
  assert moved["answer"]["details"] == 10 - checker_lib.STEP_ANSWER
  # The side question's words without its content cover nothing.
  info = answer.splitlines()[-1]
  title_only = env.checker(_with_answer(good, answer.replace(info, info.split(":")[0] + ".")))
  assert title_only["answer"]["relevance"] == 10 - checker_lib.STEP_ANSWER
  # Two picks' lines trading their figures: every figure is in a result, for the other place.
  lines = answer.splitlines()
  a, b = lines[1].split(": ", 1), lines[2].split(": ", 1)
  swapped = "\n".join(lines[:1] + [f"{a[0]}: {b[1]}", f"{b[0]}: {a[1]}"] + lines[3:])
  scores = env.checker(_with_answer(good, swapped))["answer"]
  assert scores["details"] == 0 and scores["relevance"] < 10 and scores["clarity"] < 10, scores
  # A polite answer that states nothing, after the right calls: no answer credit at all.
  polite = "Thank you for asking! I have looked into everything for you.\n" * 3
  assert set(env.checker(_with_answer(good, polite))["answer"].values()) == {0.0}
  # The expert's answer cut short by the length limit is no answer.
  cut = _with_answer(dataclasses.replace(good, finish_reason="length"), answer[:len(answer) // 3])
  assert set(env.checker(cut)["answer"].values()) == {0.0}
  assert env.checker(cut)["path"] == env.checker(good)["path"]


def test_naming_every_candidate_chooses_none(env, tests_by_subtask):
  """Copying the search result (every candidate, the violators too) is not a choice."""
  task = tests_by_subtask["search"][0]
  good = expert_trajectory(env, task, 0.0, 0)
  results = "\n".join(r for s in good.steps for r in s.tool_results)
  scores = env.checker(_with_answer(good, results))["answer"]
  assert scores["feasibility"] == 0 and scores["details"] <= 3 and scores["clarity"] == 0, scores
  assert scores["relevance"] <= 10 - 2 * checker_lib.STEP_ANSWER, scores


def test_wrong_fact_cost_sets_the_cascade_beyond_the_second_wrong_fact(env, tests_by_subtask):
  """Every wrong fact beyond the second costs ``wrong_fact_cost`` on relevance, feasibility and
  clarity: with cost 0 the answer keeps its coverage, with cost c it loses c per extra fact."""
  task = tests_by_subtask["search"][3]
  good = expert_trajectory(env, task, 0.0, 3)
  lines = good.final_answer.splitlines()
  a, b = lines[1].split(": ", 1), lines[2].split(": ", 1)
  swapped = _with_answer(good, "\n".join(lines[:1] + [f"{a[0]}: {b[1]}", f"{b[0]}: {a[1]}"]
                                         + lines[3:]))
  _, gt = env._checker.truth(task.id)
  wrong = len(reading_lib.read(env.world, task, gt, swapped.final_answer,
                               reading_lib.calls_of(swapped)).wrong)
  assert wrong >= 4, wrong  # both picks' price, rating and distance moved to the other place
  free = checker_lib.TravelChecker(env.seed, wrong_fact_cost=0)(swapped)["answer"]
  assert free["relevance"] > 0 and free["clarity"] > 0
  for cost in (1, 2, checker_lib.STEP_ANSWER):
    got = checker_lib.TravelChecker(env.seed, wrong_fact_cost=cost)(swapped)["answer"]
    for dim in ("relevance", "feasibility", "clarity"):
      assert got[dim] == max(0.0, free[dim] - cost * (wrong - checker_lib.FREE_WRONG)), (cost, dim)
    assert got["details"] == free["details"] == 0.0
  assert checker_lib.TravelChecker(env.seed)(swapped) == env.checker(swapped)
  with pytest.raises(ValueError, match="wrong_fact_cost"):
    checker_lib.TravelChecker(env.seed, wrong_fact_cost=11)
