"""The travel environment's strict verifier: the flawless expert solves every test task, each
injected error that touches a requirement unsolves it (naming the right requirement family),
unfinished trajectories meet nothing, and the counts agree."""
from __future__ import annotations

import dataclasses
import re

import pytest

from arenarl_jax import types
from arenarl_jax.envs import base
from arenarl_jax.envs.travel import expert as expert_lib
from arenarl_jax.envs.travel import truth as truth_lib
from travel_expert import env, expert_trajectory, tests_by_subtask  # noqa: F401  (fixtures)

PER_SUBTASK = 6  # tasks per subtask for the per-site checks
# Requirement families each error kind may leave unmet (redundant_call is a path-only flaw).
FAMILIES = {"skip_tool": ("fact:",),
            "break_constraint": ("constraint:", "schedule", "recommendation"),
            "unsupported_fact": ("fact:", "facts_supported")}


def _single_site_seed(kind: str, site: int) -> int:
  """An expert seed whose draw at error rate 0.5 is exactly this one site."""
  return next(s for s in range(1000)
              if expert_lib.draw_errors(0.5, s, (kind,)) == {(kind, site)})


def _realised(env, task, kind: str, site: int) -> bool:
  """Whether the task has this error site (a second breaking alternative may not exist)."""
  if kind != "break_constraint":
    return True
  return site < len(truth_lib.derive(env.world, task.subtask, task.constraints).violators)


def _consistent(v: base.Verification) -> None:
  assert v.met + len(v.unmet) == v.total or v.unmet == ("finished",)
  assert v.solved == (not v.unmet) == (v.met == v.total)
  assert v.as_dict() == {"solved": v.solved, "unmet": list(v.unmet), "met": v.met,
                         "total": v.total, "content_met": v.content_met,
                         "content_total": v.content_total}
  # Content is every requirement but the two format ones; a finished trajectory's unmet
  # content requirements are exactly its unmet names other than those two.
  assert v.content_total == v.total - 2
  if v.unmet != ("finished",):
    unmet_content = [u for u in v.unmet if u not in ("finished", "facts_supported")]
    assert v.content_met == v.content_total - len(unmet_content)
  else:
    assert v.content_met == 0


def test_expert_without_errors_solves_every_test_task(env, tests_by_subtask):
  for sub, tasks in tests_by_subtask.items():
    assert len(tasks) == 50
    for k, task in enumerate(tasks):
      v = env.verify(expert_trajectory(env, task, 0.0, k))
      assert v.solved and v.met == v.total > 5, (task.id, v)


def test_each_error_site_alone_unsolves_where_it_touches_a_requirement(env, tests_by_subtask):
  realised = dict.fromkeys(FAMILIES, 0)
  for sub, tasks in tests_by_subtask.items():
    for task in tasks[:PER_SUBTASK]:
      totals = set()
      for kind in expert_lib.KINDS:
        for site in range(expert_lib.SITES_PER_KIND):
          v = env.verify(expert_trajectory(env, task, 0.5, _single_site_seed(kind, site), kinds=(kind,)))
          _consistent(v)
          totals.add(v.total)
          if kind == "redundant_call" or not _realised(env, task, kind, site):
            assert v.solved, (task.id, kind, site, v)
            continue
          realised[kind] += 1
          assert not v.solved, (task.id, kind, site)
          assert all(u.startswith(FAMILIES[kind]) for u in v.unmet), (task.id, kind, site, v)
      assert len(totals) == 1, (task.id, totals)  # the requirement count is the task's
  assert all(n >= 5 * PER_SUBTASK for n in realised.values()), realised


def test_every_kind_at_rate_one_unsolves(env, tests_by_subtask):
  for sub, tasks in tests_by_subtask.items():
    for k, task in enumerate(tasks[:PER_SUBTASK]):
      for kind in FAMILIES:
        v = env.verify(expert_trajectory(env, task, 1.0, k, kinds=(kind,)))
        assert not v.solved and all(u.startswith(FAMILIES[kind]) for u in v.unmet), (
            task.id, kind, v)
      assert env.verify(expert_trajectory(env, task, 1.0, k, kinds=("redundant_call",))).solved


def test_unfinished_trajectories_meet_nothing(env, tests_by_subtask):
  for sub, tasks in tests_by_subtask.items():
    good = expert_trajectory(env, tasks[0], 0.0, 0)
    total = env.verify(good).total
    for reason in ("length", "max_turns", "invalid", "error"):
      v = env.verify(dataclasses.replace(good, finish_reason=reason))
      assert (v.met, v.total, v.unmet, v.solved) == (0, total, ("finished",), False), (sub, v)
    calls_last = dataclasses.replace(good, steps=good.steps[:1])  # ends on its first calls
    assert calls_last.steps[-1].tool_calls
    assert env.verify(calls_last) == base.Verification(0, total, ("finished",), content_met=0,
                                                       content_total=total - 2)
    empty = dataclasses.replace(good, steps=good.steps[:-1] + (types.Step(content="  "),))
    assert env.verify(empty).unmet == ("finished",)
    assert env.verify(dataclasses.replace(good, finish_reason="answer")).solved


def test_memorised_and_misattributed_facts_do_not_solve(env, tests_by_subtask):
  for sub, tasks in tests_by_subtask.items():
    good = expert_trajectory(env, tasks[1], 0.0, 1)
    # The same answer without the calls that support it: every fact is memorised.
    v = env.verify(dataclasses.replace(good, steps=good.steps[-1:]))
    _consistent(v)
    assert not v.solved and "facts_supported" in v.unmet, (sub, v)
  # Two picks' prices swapped: each price is in a result, but for the other place.
  swapped = 0
  for k, task in enumerate(tests_by_subtask["search"][:PER_SUBTASK]):
    good = expert_trajectory(env, task, 0.0, k)
    lines = good.final_answer.splitlines()
    prices = [re.search(r"¥(\d+) ", x) for x in lines[1:3]]
    if None in prices or prices[0][1] == prices[1][1]:
      continue  # a free attraction, or equal prices: nothing to swap
    for j, other in ((0, 1), (1, 0)):
      m = prices[j]
      lines[1 + j] = lines[1 + j][:m.start(1)] + prices[other][1] + lines[1 + j][m.end(1):]
    steps = good.steps[:-1] + (dataclasses.replace(good.steps[-1], content="\n".join(lines)),)
    v = env.verify(dataclasses.replace(good, steps=steps))
    assert not v.solved and "facts_supported" in v.unmet, (task.id, v)
    assert sum(u.startswith("fact:price:") for u in v.unmet) == 2, (task.id, v)
    swapped += 1
  assert swapped >= 2


def test_needs_a_task_id(env, tests_by_subtask):
  good = expert_trajectory(env, tests_by_subtask["compare"][0], 0.0, 0)
  with pytest.raises(ValueError, match="task_id"):
    env.verify(dataclasses.replace(good, metadata={}))
