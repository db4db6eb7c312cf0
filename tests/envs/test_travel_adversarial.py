"""Answers that carry no grounded content, or the right content for the wrong entity, score below
the evaluation's reference on the checker and never solve the task.

Each adversary is built per test task (the first ``PER_SUBTASK`` of every subtask) from the
expert's own calls and answer, and compared with that task's evaluation reference (the expert at
``env.reference_error_rate`` with the generator the evaluation uses, ``records.task_rng``) by the
noise-free rubric judge's combined score (``rubric.combine``, as the pointwise score). The
adversaries that keep the expert's calls keep its full path credit (0.6 x 10 = 6.0), so they can
only fall below references that score above that; every reference of these tasks does."""
from __future__ import annotations

import re

import numpy as np
import pytest

from arenarl_jax import types
from arenarl_jax.data import records
from arenarl_jax.envs import base
from arenarl_jax.envs.travel import truth as truth_lib
from arenarl_jax.judges import rubric as rubric_lib
from arenarl_jax.text import messages

SEED = 0
PER_SUBTASK = 5
FLUFF = ("Thank you so much for your question, I am delighted to help you plan this.\n"
         "I have looked into everything carefully and I am confident you will enjoy it.\n"
         "Please let me know if there is anything else I can do for you. Have a wonderful trip!")
# A number token that is not part of a clock time or a date (those keep their shape), nor a
# list marker ("1. ").
_TOKEN = re.compile(r"(?<![\d:.-])(?<!^)\d+(?:\.\d+)?(?![\d:]|-\d)(?!\. )", re.M)


@pytest.fixture(scope="module")
def env():
  return base.make_environment("travel", seed=SEED)


@pytest.fixture(scope="module")
def tasks(env):
  return [t for s in env.subtasks for t in env.tasks(f"test_{s}")[:PER_SUBTASK]]


def combined(env, traj) -> float:
  """The noise-free rubric judge's pointwise score of one trajectory."""
  scores = env.checker(traj)
  rubric = rubric_lib.TRAVEL
  return rubric.combine([scores["path"][d.name] for d in rubric.path],
                        [scores["answer"][d.name] for d in rubric.answer])[2]


def _traj(task, steps, **kw) -> types.Trajectory:
  return types.Trajectory(query=task.query, steps=tuple(steps), metadata={"task_id": task.id},
                          **kw)


def _expert(env, task, rate=0.0, rng=0) -> types.Trajectory:
  msgs = env.expert(task, rate, rng)
  return messages.trajectory_from_messages(msgs, metadata={"task_id": task.id})


def _calls(traj) -> list[types.Step]:
  return [s for s in traj.steps if s.tool_calls]


def _called(env, calls) -> types.Step:
  src = env.tool_source()
  return types.Step(tool_calls=tuple(calls), tool_results=tuple(
      src.call_sync(c.name, c.arguments).text for c in calls))


def _other_task(env, task):
  """A test task of the same subtask whose city differs from this one's."""
  city = lambda t: t.constraints.get("city", t.constraints.get("destination"))  # noqa: E731
  return next(t for t in env.tasks(f"test_{task.subtask}") if city(t) != city(task))


def moved_numbers(answer: str, results: str) -> str:
  """The answer with its numbers permuted across lines: the numbers found in tool results are
  rotated (integers among integers, decimals among decimals) so each lands on another line."""
  have = {float(x) for x in re.findall(r"\d+(?:\.\d+)?", results)}
  tokens = [(k, m) for k, line in enumerate(answer.splitlines())
            for m in _TOKEN.finditer(line) if float(m.group(0)) in have]
  new: dict[tuple[int, int], str] = {}
  for shape in (False, True):  # integers among integers, decimals among decimals
    group = [(k, m) for k, m in tokens if ("." in m.group(0)) == shape]
    if not group:
      continue
    # A rotation by the most tokens any one line holds sends each to another line.
    shift = max(sum(k == line for k, _ in group) for line, _ in group)
    for j, (k, m) in enumerate(group):
      new[(k, m.start())] = group[(j + shift) % len(group)][1].group(0)
  lines = answer.splitlines()
  for k in range(len(lines)):
    for m in reversed(list(_TOKEN.finditer(lines[k]))):
      if (k, m.start()) in new:
        lines[k] = lines[k][:m.start()] + new[(k, m.start())] + lines[k][m.end():]
  return "\n".join(lines)


def adversaries(env, task) -> dict[str, types.Trajectory]:
  good = _expert(env, task)
  calls = _calls(good)
  results = "\n".join(r for s in calls for r in s.tool_results)
  answer = good.final_answer
  other = _expert(env, _other_task(env, task))
  c = task.constraints
  city = env.world.city(c.get("city", c.get("destination")))
  elsewhere = next(x.name for x in env.world.cities if x is not city)
  off_topic = _called(env, [
      types.ToolCall("search_poi", {"city": elsewhere, "keyword": "museum"}),
      types.ToolCall("get_navigation", {"city": elsewhere, "mode": "driving", "waypoints": [
          f"{elsewhere} North Railway Station", f"{elsewhere} International Airport"]})])
  main = truth_lib.derive(env.world, task.subtask, c).calls[2]
  repeated = _called(env, [types.ToolCall(main.tool, dict(main.args))] * 8)
  return {
      "fluff": _traj(task, [types.Step(content=FLUFF)]),
      "off_topic_calls": _traj(task, [off_topic, types.Step(content=FLUFF)]),
      "question_echo": _traj(task, calls + [types.Step(content=task.query)]),
      "truncated": _traj(task, calls + [types.Step(content=answer[:len(answer) // 3])],
                         finish_reason="length"),
      "moved_numbers": _traj(task, calls + [types.Step(content=moved_numbers(answer,
                                                                             results))]),
      "wrong_city": _traj(task, calls + _calls(other) + [types.Step(content=other.final_answer)]),
      "repeated_calls": _traj(task, [repeated, types.Step(content=FLUFF)]),
      "copied_tool_output": _traj(task, calls + [types.Step(content=results)]),
  }


@pytest.fixture(scope="module")
def scored(env, tasks):
  """task id -> (reference score, {adversary: (score, verification)})."""
  out = {}
  for task in tasks:
    ref = messages.trajectory_from_messages(
        env.reference(task, records.task_rng(env.seed, task.id)), metadata={"task_id": task.id})
    out[task.id] = (combined(env, ref), {name: (combined(env, t), env.verify(t))
                                          for name, t in adversaries(env, task).items()})
  return out


def test_moved_numbers_keep_each_number_in_some_result(env, tasks):
  for task in tasks:
    good = _expert(env, task)
    results = "\n".join(r for s in good.steps for r in s.tool_results)
    moved = moved_numbers(good.final_answer, results)
    assert moved != good.final_answer, task.id
    have = {float(x) for x in re.findall(r"\d+(?:\.\d+)?", results)}
    before = sorted(m.group(0) for m in _TOKEN.finditer(good.final_answer)
                    if float(m.group(0)) in have)
    after = sorted(m.group(0) for m in _TOKEN.finditer(moved) if float(m.group(0)) in have)
    assert before == after, task.id  # the same numbers, on other lines


def test_every_adversary_scores_below_the_reference(scored):
  low = []
  for task_id, (ref, advs) in scored.items():
    for name, (score, _) in advs.items():
      if not score < ref:
        low.append((task_id, name, score, ref))
  assert not low, low


def test_no_adversary_is_solved(scored):
  for task_id, (_, advs) in scored.items():
    for name, (_, v) in advs.items():
      assert not v.solved, (task_id, name, v)
      if name == "truncated":
        assert v.unmet == ("finished",) and v.met == 0


def test_means_per_adversary(scored):
  """The mean per adversary sits well under the references' mean (printed with -s)."""
  refs = np.mean([ref for ref, _ in scored.values()])
  names = next(iter(scored.values()))[1]
  means = {n: float(np.mean([advs[n][0] for _, advs in scored.values()])) for n in names}
  print(f"\nreference {refs:.2f}; " + ", ".join(f"{n} {m:.2f}" for n, m in means.items()))
  assert all(m < refs - 1 for m in means.values()), (refs, means)
