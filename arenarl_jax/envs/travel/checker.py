"""Ground-truth checker for travel trajectories (the rubric judge's ``Checker`` contract).

A :class:`TravelChecker` called on a trajectory finds the task by ``metadata["task_id"]``,
re-derives its ground truth from the world's seed (:mod:`truth`; nothing is read from the
trajectory but its calls, results and answer) and scores the travel rubric's dimensions, 0-10,
as partial credit for training (the strict verdict is :mod:`verifier`'s). Facts are per entity
(:mod:`facts`): a figure counts only on the line naming its place, leg, mode, service or document,
checked against that entity's values in THIS trajectory's results; figures the query states are
neutral restatements. A call *serves* the task when it is one of the needed calls (``truth``)::

  path.breadth      10 - 3 x needed calls never made successfully
  path.relevance    10 - 3 x calls repeating an earlier (tool, arguments) - 1 x unrelated calls;
                    0 when no call serves the task
  path.detail       10 - 2 x failed calls; 0 when no call serves the task
  answer.relevance  10 - 4 x sub-needs the answer leaves uncovered; a sub-need is covered only by
                    the fact that answers it: the landmark's / hotel's correct address, the
                    stop's correct hours, each stop's arrival time as the legs give it, each
                    mode's correct minutes on its line, the side questions' key content from a
                    retrieved document, a recommendation, each pick (a place of the asked kind
                    that a result names; naming more than asked chooses none), each service,
                    and a total equal to the named plan's true cost
  answer.feasibility 10 - 4 x broken constraints among the answer's choices (a pick over a price,
                    rating or radius limit, a mode over a cap, a departure too early, a stated
                    schedule leaving before the start or, by its leave time and the true legs,
                    arriving after the deadline, a complete plan whose true cost is over budget);
                    0 when the answer chooses nothing
  answer.details    10 - 4 x wrong facts (a figure wrong for its entity, a figure on a line
                    naming no entity, a place or service no result names, a wrong total);
                    at most 3 when the answer states fewer than two checkable figures or
                    chooses nothing
  answer.clarity    10; 6 for fewer than three lines; 2 under 80 characters; - 4 x places,
                    services and documents named beyond what the task asks for

Every wrong fact beyond the second (details is spent by then) also costs ``wrong_fact_cost``
(``env.travel.wrong_fact_cost``; by default one step of 4) on relevance, feasibility and clarity:
at 4 an extra wrong fact outweighs three covered sub-needs (one step of relevance each), so an
answer with a few right facts among many wrong ones scores what an empty one does; at 1 a
covered sub-need outweighs one extra wrong fact but not two. An answer that covers no sub-need,
a trajectory that stopped at a limit and one whose last turn is an unanswered call
(``base.final_answer`` is "") score 0 on every answer dimension.

Which dimension each expert error kind lowers (one error = one step of the amounts above):

  ============== ===================================== =================================
  error kind     path                                  answer
  ============== ===================================== =================================
  skip_tool      breadth (-3)                          relevance (-4)
  break_constraint  -                                  feasibility (-4)
  unsupported_fact  -                                  details (-4)
  redundant_call relevance (-3)                        -
  ============== ===================================== =================================

A path step of 3 moves the path mean by exactly 1 and an answer step of 4 moves the answer mean
by exactly 1, so every extra error lowers the rubric's combined score (the expert draws at most
two sites per kind, so no dimension is clipped at 0 and no wrong fact reaches the cascade).
"""
from __future__ import annotations

import json
import re
from typing import Any, Mapping

from arenarl_jax import types
from arenarl_jax.envs import base
from arenarl_jax.envs.travel import reading as reading_lib
from arenarl_jax.envs.travel import tasks as tasks_lib
from arenarl_jax.envs.travel import truth as truth_lib
from arenarl_jax.envs.travel import world as world_lib

STEP_PATH, STEP_ANSWER = 3, 4
FREE_WRONG = 2  # wrong facts details absorbs before the rest of the answer pays too
_NUM = re.compile(r"\d+(?:\.\d+)?")
ZERO = {"relevance": 0.0, "feasibility": 0.0, "details": 0.0, "clarity": 0.0}


def canon(x: str) -> str:
  return repr(float(x))


def numbers(text: str) -> set[str]:
  return {canon(x) for x in _NUM.findall(text)}


def matches(spec: truth_lib.CallSpec, tool: str, args: Mapping[str, Any], text: str) -> bool:
  if tool != spec.tool:
    return False
  for key in spec.match_args:
    if truth_lib.norm(args.get(key)) != truth_lib.norm(spec.args.get(key)):
      return False
  low = text.lower()
  return all(s.lower() in low for s in spec.must_contain)


def _clip(x: float) -> float:
  return float(min(10, max(0, x)))


class TravelChecker:
  """``checker(trajectory) -> {"path": {...}, "answer": {...}}`` for one world seed.

  ``wrong_fact_cost``: what every wrong fact beyond the second costs on answer relevance,
  feasibility and clarity (the module doc's cascade; by default one answer step).
  """

  def __init__(self, seed: int, wrong_fact_cost: int = STEP_ANSWER):
    if not 0 <= int(wrong_fact_cost) <= 10:
      raise ValueError(f"env.travel.wrong_fact_cost must be in 0..10, got {wrong_fact_cost}")
    self.seed = int(seed)
    self.wrong_fact_cost = int(wrong_fact_cost)
    self.world = world_lib.make_world(self.seed)
    self._truth: dict[str, tuple[Any, truth_lib.Truth]] = {}

  def truth(self, task_id: str):
    hit = self._truth.get(task_id)
    if hit is None:
      task = tasks_lib.task_by_id(self.seed, task_id)
      hit = (task, truth_lib.derive(self.world, task.subtask, task.constraints))
      self._truth[task_id] = hit
    return hit

  def __call__(self, trajectory: types.Trajectory) -> dict[str, dict[str, float]]:
    task_id = (trajectory.metadata or {}).get("task_id")
    if not task_id:
      raise ValueError("travel checker: trajectory.metadata['task_id'] is missing")
    task, gt = self.truth(task_id)
    calls = reading_lib.calls_of(trajectory)
    return {"path": self._path(gt, calls),
            "answer": self._answer(task, gt, calls, base.final_answer(trajectory))}

  # -- path -----------------------------------------------------------------------------------
  def _path(self, gt: truth_lib.Truth, calls) -> dict[str, float]:
    seen: set[str] = set()
    redundant = unrelated = failed = 0
    covered = [False] * len(gt.calls)
    for tool, args, text, ok in calls:
      key = json.dumps([tool, truth_lib.norm(args)], sort_keys=True, default=str)
      if key in seen:
        redundant += 1
        continue
      seen.add(key)
      if not ok:
        failed += 1
        continue
      hit = [k for k, spec in enumerate(gt.calls) if matches(spec, tool, args, text)]
      for k in hit:
        covered[k] = True
      unrelated += not hit
    serving = any(covered)
    return {"breadth": _clip(10 - STEP_PATH * covered.count(False)),
            "relevance": _clip(10 - STEP_PATH * redundant - unrelated) if serving else 0.0,
            "detail": _clip(10 - 2 * failed) if serving else 0.0}

  # -- answer ---------------------------------------------------------------------------------
  def _answer(self, task, gt: truth_lib.Truth, calls, answer: str) -> dict[str, float]:
    if not answer.strip():
      return dict(ZERO)
    r = reading_lib.read(self.world, task, gt, answer, calls)
    needs = sub_needs(r)
    if not any(needs.values()):
      return dict(ZERO)
    missing = sum(not ok for ok in needs.values())
    breaks = reading_lib.plan_breaks(r)
    broken = sum(len(v) if k == "schedule" else bool(v) for k, v in breaks.items())
    wrong = len(r.wrong)
    cascade = self.wrong_fact_cost * max(0, wrong - FREE_WRONG)
    details = 10 - STEP_ANSWER * wrong
    if r.checked < 2 or not breaks:
      details = min(details, 3)
    lines = [x for x in answer.splitlines() if x.strip()]
    clarity = 2 if len(answer.strip()) < 80 else 6 if len(lines) < 3 else 10
    return {"relevance": _clip(10 - STEP_ANSWER * missing - cascade),
            "feasibility": _clip(10 - STEP_ANSWER * broken - cascade) if breaks else 0.0,
            "details": _clip(details),
            "clarity": _clip(clarity - STEP_ANSWER * r.extras() - cascade)}


def sub_needs(r: reading_lib.Reading) -> dict[str, bool]:
  """Each sub-need of the task -> whether the answer covers it (see the module doc)."""
  c, gt, sub = r.task.constraints, r.truth, r.task.subtask
  needs = {"info": r.doc_covered(c["info"])}
  for slot, size in r.sizes.items():
    got = [p for p in r.picks(slot) if p.name.lower() in r.evidence.pois]
    needs.update({f"{slot}{k + 1}": k < len(got) for k in range(size)})
  if sub == "search":
    needs["address"] = r.poi_fact(gt.choices["landmark"], "address")
  elif sub == "direction":
    needs["hours"] = r.poi_fact(gt.choices["detail"], "hours")
    for k in range(1, len(c["waypoints"])):
      said = [t for stop, t in r.arrivals if stop == k]
      needs[f"arrival{k}"] = bool(said) and all(t == r.expected_arrival(k) for t in said)
  elif sub == "compare":
    for m in c["modes"]:
      needs[m] = r.leg_fact(c["origin"], c["destination"], m, "minutes", gt.choices["legs"][m]
                            .minutes, bare_mode=True)
    needs["recommendation"] = r.recommendation is not None
  if sub == "one_day":
    needs["address"] = r.poi_fact(gt.choices["hotel"], "address")
  if sub == "multi_day":
    needs["policy"] = r.doc_covered(c["policy"])
    for side, found in r.services.items():
      needs[side] = len(found) == 1 and found[0].number in r.evidence.services
  if sub in ("one_day", "multi_day"):
    needs["total"] = r.plan_cost is not None and r.total == r.plan_cost
  return needs
