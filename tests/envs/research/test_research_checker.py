"""Checker faithfulness with the expert: maximum at error 0, monotone in the error rate, each
injected error lowers its dimension, copying the question earns nothing; hand-worked cases."""
from __future__ import annotations

import json

import numpy as np
import pytest

from arenarl_jax.text import messages as messages_lib
from arenarl_jax import types
from arenarl_jax.envs.research import checker, expert, tasks
from arenarl_jax.judges import rubric as rubric_lib

RUBRIC = rubric_lib.load_rubric("deep_research")
DIM_OF = {"missed_search": ("path", "coverage"), "before_reading": ("path", "tool_usage"),
          "unsupported_claim": ("answer", "accuracy"), "truncation": ("answer", "clarity")}


def _test_tasks(env):
  return [t for k in tasks.KINDS for t in env.tasks(f"test_{k}")]


def _score(env, task, msgs):
  return env.checker(messages_lib.trajectory_from_messages(msgs, metadata={"task_id": task.id}))


def _combined(s):
  return RUBRIC.combine([s["path"][d.name] for d in RUBRIC.path],
                        [s["answer"][d.name] for d in RUBRIC.answer])[2]


def test_dimensions_match_the_deep_research_rubric(env):
  task = env.tasks("test_ideation")[0]
  s = _score(env, task, env.expert(task, 0.0, 0))
  assert env.rubric == RUBRIC.name
  assert list(s["path"]) == [d.name for d in RUBRIC.path]
  assert list(s["answer"]) == [d.name for d in RUBRIC.answer]


def test_expert_at_error_zero_scores_the_maximum_and_is_valid(env):
  for task in _test_tasks(env) + env.tasks("train")[::25]:
    msgs = env.expert(task, 0.0, 0)
    s = _score(env, task, msgs)
    assert all(v == 10.0 for sec in s.values() for v in sec.values()), (task.id, s)
    assert env.valid(msgs[-1]["content"], task) == (True, "")


def test_mean_score_falls_strictly_with_the_error_rate(env):
  means = []
  for rate in (0.0, 0.2, 0.5):
    means.append(np.mean([_combined(_score(env, t, env.expert(t, rate, 0)))
                          for t in _test_tasks(env)]))
  assert means[0] == 10.0 and means[0] > means[1] > means[2], means


def test_errors_are_nested(env):
  for task in _test_tasks(env)[::10]:
    low, _ = expert.draw_errors(task, 0.2, expert.make_rng(task, 3))
    high, _ = expert.draw_errors(task, 0.5, expert.make_rng(task, 3))
    every, _ = expert.draw_errors(task, 1.0, expert.make_rng(task, 3))
    assert low <= high <= every == set(expert.error_sites(task))
  task = _test_tasks(env)[0]
  assert env.expert(task, 0.3, 5) == env.expert(task, 0.3, 5)  # same seed, same conversation
  with pytest.raises(ValueError, match="error_rate"):
    env.expert(task, 1.5, 0)


@pytest.mark.parametrize("kind", sorted(DIM_OF))
def test_each_injected_error_lowers_its_dimension(env, kind):
  section, dim = DIM_OF[kind]
  for task in _test_tasks(env)[::4]:
    clean = _score(env, task, env.expert_with_errors(task, set()))
    for site in expert.error_sites(task):
      if site[0] != kind:
        continue
      s = _score(env, task, env.expert_with_errors(task, {site}))
      assert s[section][dim] < clean[section][dim], (task.id, site, s)


def test_copying_the_question_scores_at_most_one_on_depth_and_accuracy(env):
  for task in _test_tasks(env)[::6]:
    researched = env.expert(task, 0.0, 0)  # searched and read everything, then copied
    bare = [{"role": "user", "content": task.query}]
    for msgs in (researched[:-1], bare):
      s = _score(env, task, msgs + [{"role": "assistant", "content": task.query}])
      assert s["answer"]["depth"] <= 1 and s["answer"]["accuracy"] <= 1, (task.id, s)


def _call(name, **args):
  return {"function": {"name": name, "arguments": json.dumps(args)}}


def _conversation(env, task, calls_per_turn, answer):
  """A conversation whose tool results come from the real tools."""
  source = env.tool_source()
  msgs = [{"role": "user", "content": task.query}]
  for turn, (content, calls) in enumerate(calls_per_turn):
    msgs.append({"role": "assistant", "content": content, "tool_calls": [
        {"id": f"c{turn}{k}", "type": "function", **c} for k, c in enumerate(calls)]})
    for k, c in enumerate(calls):
      r = source.call_sync(c["function"]["name"], c["function"]["arguments"])
      msgs.append({"role": "tool", "tool_call_id": f"c{turn}{k}", "content": r.text})
  return msgs + [{"role": "assistant", "content": answer}]


def test_hand_worked_path_scores(env):
  task = env.tasks("test_explanation")[0]
  a, b = task.constraints["pages"][:2]
  answer = env.expert(task, 0.0, 0)[-1]["content"]
  plan = "Plan:\n1. Search both.\n2. Read both."
  base_turns = [(plan, [_call("web_search", query=a, k=3), _call("web_search", query=b, k=3)]),
                ("Reading.", [_call("open_page", page_id=a), _call("open_page", page_id=b)])]
  s = _score(env, task, _conversation(env, task, base_turns, answer))
  assert s["path"] == {"framework": 10.0, "tool_usage": 10.0, "coverage": 10.0}
  # One repeated search (-2) and one failed call (-1); a prose plan only scores 6.
  noisy = [("I will search.", base_turns[0][1] + [_call("web_search", query=f"{a} ", k=3),
                                                   _call("open_page", page_id="no.such")]),
           base_turns[1]]
  s = _score(env, task, _conversation(env, task, noisy, answer))
  assert s["path"] == {"framework": 6.0, "tool_usage": 7.0, "coverage": 10.0}
  # Found both, opened one: coverage (10 + 5) / 2, tool_usage 10 - 3.
  s = _score(env, task, _conversation(env, task, [base_turns[0], ("Reading.", [
      _call("open_page", page_id=a)])], answer))
  assert s["path"]["coverage"] == 7.5 and s["path"]["tool_usage"] == 7.0
  # No tools at all: framework 0, tool_usage 0, coverage 0, and the claims are unsupported.
  s = _score(env, task, [{"role": "user", "content": task.query},
                         {"role": "assistant", "content": answer}])
  assert s["path"] == {"framework": 0.0, "tool_usage": 0.0, "coverage": 0.0}
  assert s["answer"]["accuracy"] < 10


def test_claims_and_support_hand_cases():
  question = "Explain `json.dumps` and `json.loads`."
  retrieved = "json.dumps(obj, *, indent=None)\n\nUse ``indent`` for 4 spaces; limit is 1024."
  answer = ("## A\n\n1. `json.dumps` takes `indent` and `json.dumps(obj, *, indent=None)`.\n"
            "2. It caps output at 4096 bytes, see json.tool and `fast_mode=True`; 1024 is the "
            "limit, i.e. the maximum (e.g. for 3.11).\n")
  assert checker.claims(answer, question) == [
      "indent", "json.dumps(obj, *, indent=None)", "fast_mode=True", "json.tool", "4096", "1024"]
  assert checker.unsupported(answer, question, retrieved) == ["fast_mode=True", "json.tool", "4096"]


def test_checker_needs_a_known_task_id(env):
  with pytest.raises(ValueError, match="task_id"):
    env.checker(types.Trajectory(query="q"))
  with pytest.raises(KeyError, match="unknown task id"):
    env.checker(types.Trajectory(query="q", metadata={"task_id": "research/ideation/999999"}))


def test_expert_messages_are_reference_format(env):
  task = env.tasks("train")[0]
  msgs = env.expert(task, 0.0, 0)
  steps = messages_lib.steps_from_messages(msgs)
  assert msgs[0] == {"role": "user", "content": task.query}
  assert [len(s.tool_calls) for s in steps] == [len(task.constraints["pages"])] * 2 + [0]
  assert [c.name for c in steps[1].tool_calls] == ["open_page"] * len(steps[1].tool_calls)
  assert all(not r.startswith("Error") for s in steps for r in s.tool_results)
  again = messages_lib.messages_from_steps(task.query, steps)
  assert messages_lib.steps_from_messages(again) == steps


@pytest.mark.parametrize("finish", ["length", "max_turns", "invalid", "error", "unanswered"])
def test_an_unfinished_trajectory_scores_zero_on_every_answer_dimension(env, finish):
  task = env.tasks("test_technical_writing")[0]
  msgs = env.expert(task, 0.0, 0)
  if finish == "unanswered":  # the last turn is a tool call the rollout never answered
    msgs = msgs + [{"role": "assistant", "content": "", "tool_calls": [
        {"id": "late", "type": "function", **_call("web_search", query="more")}]}]
  traj = messages_lib.trajectory_from_messages(
      msgs, metadata={"task_id": task.id}, finish_reason="answer" if finish == "unanswered"
      else finish)
  s = env.checker(traj)
  assert s["answer"] == dict.fromkeys(("relevance", "accuracy", "depth", "clarity"), 0.0)
  # The path keeps its credit; a call without a result counts as a failed call (-1).
  assert s["path"] == {"framework": 10.0, "tool_usage": 9.0 if finish == "unanswered" else 10.0,
                       "coverage": 10.0}


def test_unrelated_calls_earn_no_path_credit_and_ground_nothing(env):
  task = env.tasks("test_explanation")[0]
  other = next(p for p in env.tasks("train")
               if p.constraints["module"] != task.constraints["module"]).constraints["pages"]
  answer = env.expert(task, 0.0, 0)[-1]["content"]
  plan = "Plan:\n1. Search.\n2. Read."
  msgs = _conversation(env, task, [(plan, [_call("web_search", query=p, k=3) for p in other]),
                                   ("Reading.", [_call("open_page", page_id=p) for p in other])],
                       answer)
  s = _score(env, task, msgs)
  assert s["path"] == {"framework": 0.0, "tool_usage": 0.0, "coverage": 0.0}
  # The expert's report, memorised: its facts are stated but not grounded, so none counts.
  assert s["answer"]["relevance"] == 0 and s["answer"]["depth"] == 0
  assert s["answer"]["accuracy"] == 0 and s["answer"]["clarity"] == 5.0


def test_depth_counts_a_fact_in_full_only_from_an_opened_page(env):
  for task in _test_tasks(env)[::10]:
    msgs = env.expert(task, 0.0, 0)
    searched_only = msgs[:1 + 1 + len(task.constraints["pages"])] + msgs[-1:]
    assert [m["role"] for m in searched_only[1:-1]] == ["assistant"] + ["tool"] * (
        len(searched_only) - 3)
    s = _score(env, task, searched_only)
    assert s["answer"]["depth"] <= 5.0 and s["path"]["coverage"] == 5.0, (task.id, s)
    memorised = _score(env, task, msgs[:1] + msgs[-1:])
    assert memorised["answer"]["depth"] == 0 and memorised["answer"]["relevance"] == 0


def test_pasted_tool_output_is_not_a_report(env):
  for task in _test_tasks(env)[::10]:
    msgs = env.expert(task, 0.0, 0)
    pasted = "\n\n".join(m["content"] for m in msgs if m["role"] == "tool")
    s = _score(env, task, msgs[:-1] + [{"role": "assistant", "content": pasted}])
    assert (s["answer"]["relevance"], s["answer"]["accuracy"], s["answer"]["depth"]) == (0, 0, 0)
    assert s["answer"]["clarity"] <= 5.0
