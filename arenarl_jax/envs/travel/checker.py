"""Ground-truth checker for travel trajectories (the rubric judge's ``Checker`` contract).

A :class:`TravelChecker` called on a trajectory finds the task by ``metadata["task_id"]``,
re-derives its ground truth from the world's seed (:mod:`truth`; nothing is read from the
trajectory but its calls, results and answer) and scores the travel rubric's dimensions, 0-10::

  path.breadth      10 - 3 x needed calls never made successfully          (coverage)
  path.relevance    10 - 3 x calls repeating an earlier (tool, arguments) - 1 x unrelated calls
  path.detail       10 - 2 x failed calls (error observations); 0 when no call succeeded
  answer.relevance  10 - 4 x sub-needs the answer leaves out (each asked fact / pick / total)
  answer.feasibility 10 - 4 x broken constraints (a pick over a price/rating/radius limit, a
                    departure before the allowed time, a deadline missed, a total over budget)
  answer.details    10 - 4 x stated facts no received tool result supports (prices, distances,
                    durations, ratings, place names, train/flight numbers and the clock
                    times on lines naming one);
                    at most 3 when the answer states fewer than two checkable facts
  answer.clarity    10; 6 for fewer than three lines; 2 under 80 characters

An empty answer scores 0 on every answer dimension. Totals (lines saying "total") are checked
against the budget rather than against tool results, since they are sums.

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
two sites per kind, so no dimension is clipped at 0).
"""
from __future__ import annotations

import json
import re
from typing import Any, Mapping, Sequence

from arenarl_jax import types
from arenarl_jax.envs.travel import tasks as tasks_lib
from arenarl_jax.envs.travel import truth as truth_lib
from arenarl_jax.envs.travel import world as world_lib

STEP_PATH, STEP_ANSWER = 3, 4
_NUM = re.compile(r"\d+(?:\.\d+)?")
_MONEY = re.compile(r"¥\s?(\d+(?:\.\d+)?)")
_DIST = re.compile(r"(\d+(?:\.\d+)?)\s?(?:km|m)\b")
_DUR = re.compile(r"(\d+)\s?min(?:ute)?s?\b")
_RATING = re.compile(r"rat(?:ed|ing)\s*(?:of\s*)?(\d(?:\.\d)?)\b")
_NUMBER = re.compile(r"\b(?:[GK]\d{2,5}|(?:CA|MU|CZ|HU)\d{4,5})\b")
_CLOCK = re.compile(r"\b(\d{1,2}):(\d{2})\b")
_SUFFIX = "|".join(sorted({*world_lib.ATTRACTIONS.values(), *world_lib.CUISINES.values(),
                           *world_lib.HOTELS.values(), "Railway Station", "Airport"},
                          key=len, reverse=True))
_PLACE = re.compile(r"\b[A-Z][a-z]+ [A-Z][a-z]+ (?:" + _SUFFIX + r")\b")
_ARRIVE = re.compile(r"arriv\w*[^\n\d]{0,60}?(\d{1,2}):(\d{2})", re.IGNORECASE)
_LEAVE = re.compile(r"\b(?:leave|depart)\w*[^\n\d]{0,60}?(\d{1,2}):(\d{2})", re.IGNORECASE)
_RECOMMEND = re.compile(r"recommend\w*[^\n.]{0,80}?\b(walking|bicycling|driving|transit)\b",
                        re.IGNORECASE)
_TOTAL = re.compile(r"total[^\n¥]{0,60}¥\s?(\d+)", re.IGNORECASE)


def canon(x: str) -> str:
  return repr(float(x))


def numbers(text: str) -> set[str]:
  return {canon(x) for x in _NUM.findall(text)}


def calls_of(trajectory: types.Trajectory) -> list[tuple[str, dict, str, bool]]:
  """(tool, arguments, result text, ok) for every call, in order (a call without a result
  failed)."""
  out = []
  for step in trajectory.steps:
    for k, call in enumerate(step.tool_calls):
      text = step.tool_results[k] if k < len(step.tool_results) else ""
      out.append((call.name, dict(call.arguments), text,
                  bool(text) and not text.startswith("Error:")))
  return out


def final_answer(trajectory: types.Trajectory) -> str:
  if not trajectory.steps or trajectory.steps[-1].tool_calls:
    return ""
  return trajectory.steps[-1].content or ""


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


def _clock(m: re.Match) -> int:
  return int(m.group(1)) * 60 + int(m.group(2))


class TravelChecker:
  """``checker(trajectory) -> {"path": {...}, "answer": {...}}`` for one world seed."""

  def __init__(self, seed: int):
    self.seed = int(seed)
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
    calls = calls_of(trajectory)
    return {"path": self._path(gt, calls),
            "answer": self._answer(task, gt, calls, final_answer(trajectory))}

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
    missing = covered.count(False)
    any_ok = any(ok for *_, ok in calls)
    return {"breadth": _clip(10 - STEP_PATH * missing),
            "relevance": _clip(10 - STEP_PATH * redundant - unrelated),
            "detail": _clip(10 - 2 * failed) if any_ok else 0.0}

  # -- answer ---------------------------------------------------------------------------------
  def _answer(self, task, gt: truth_lib.Truth, calls, answer: str) -> dict[str, float]:
    if not answer.strip():
      return {"relevance": 0.0, "feasibility": 0.0, "details": 0.0, "clarity": 0.0}
    results = "\n".join(text for _, _, text, ok in calls if ok)
    c = task.constraints
    cities = [c["destination"], c["origin"]] if task.subtask == "multi_day" else [c["city"]]
    mentioned = self._mentioned(answer, cities)
    missing, broken = _RULES[task.subtask](self.world, c, gt, answer, mentioned)
    unsupported, checked = self._unsupported(answer, results, task.query, cities)
    details = 10 - STEP_ANSWER * unsupported
    if checked < 2:
      details = min(details, 3)
    lines = [x for x in answer.splitlines() if x.strip()]
    clarity = 2 if len(answer.strip()) < 80 else 6 if len(lines) < 3 else 10
    return {"relevance": _clip(10 - STEP_ANSWER * missing),
            "feasibility": _clip(10 - STEP_ANSWER * broken),
            "details": _clip(details), "clarity": float(clarity)}

  def _mentioned(self, answer: str, cities: Sequence[str]) -> list[world_lib.Poi]:
    low = answer.lower()
    return [p for city in cities for p in self.world.pois[city] if p.name.lower() in low]

  def _unsupported(self, answer: str, results: str, query: str,
                   cities: Sequence[str]) -> tuple[int, int]:
    """(distinct unsupported facts, checked facts) of an answer against received results."""
    allowed = numbers(results) | numbers(query)
    low_results = results.lower()
    bad: set[tuple[str, str]] = set()
    checked = 0
    for line in answer.splitlines():
      if "total" in line.lower():
        continue
      for kind, pattern in (("money", _MONEY), ("distance", _DIST), ("duration", _DUR),
                            ("rating", _RATING)):
        for value in pattern.findall(line):
          checked += 1
          if canon(value) not in allowed:
            bad.add((kind, canon(value)))
      numbers_here = _NUMBER.findall(line)
      for number in numbers_here:
        checked += 1
        if number not in results:
          bad.add(("number", number))
      if numbers_here:
        for m in _CLOCK.finditer(line):
          checked += 1
          if m.group(0) not in results:
            bad.add(("clock", m.group(0)))
    names = {p.name.lower() for city in cities for p in self.world.pois[city]}
    for m in _PLACE.finditer(answer):
      name = m.group(0).lower()
      checked += 1
      if name not in low_results:
        bad.add(("place", name))
    for name in names:
      if name in answer.lower() and name not in low_results and ("place", name) not in bad:
        checked += 1
        bad.add(("place", name))
    return len(bad), checked


def _doc_key(w: world_lib.World, title: str) -> str:
  return w.doc_by_title[title].key


def _has(answer: str, text: str) -> bool:
  return text.lower() in answer.lower()


def _rules_search(w, c, gt, answer, mentioned):
  land = gt.choices["landmark"]
  missing = (not _has(answer, land.address)) + (not _has(answer, _doc_key(w, c["info"])))
  picks = [p for p in mentioned if p.category == c["category"] and p.name != land.name]
  missing += max(0, c["count"] - len(picks))
  broken = 0
  for p in picks:
    far = gt.choices["distance"].get(p.name, c["radius"] + 1) > c["radius"]
    broken += far or not truth_lib.meets(p, c["max_price"], c["min_rating"])
  return missing, broken


def _rules_direction(w, c, gt, answer, mentioned):
  detail = gt.choices["detail"]
  arrivals = list(_ARRIVE.finditer(answer))
  missing = (not _has(answer, detail.hours)) + (not _has(answer, _doc_key(w, c["info"]))) + (
      not arrivals)
  broken = 0
  if arrivals and _clock(arrivals[-1]) > c["deadline"]:
    broken += 1
  leave = _LEAVE.search(answer)
  if leave and _clock(leave) < c["start"]:
    broken += 1
  return missing, broken


def _rules_compare(w, c, gt, answer, mentioned):
  legs = gt.choices["legs"]
  lines = answer.lower().splitlines()
  missing = not _has(answer, _doc_key(w, c["info"]))
  for m in c["modes"]:
    missing += not any(m in x and f"{legs[m].minutes} min" in x for x in lines)
  rec = _RECOMMEND.search(answer)
  missing += rec is None
  broken = 0
  if rec is not None:
    leg = legs[rec.group(1).lower()]
    broken += leg.cost > c["max_cost"] or leg.minutes > c["max_minutes"]
  return missing, broken


def _total(answer: str) -> int | None:
  m = _TOTAL.search(answer)
  return int(m.group(1)) if m else None


def _rules_one_day(w, c, gt, answer, mentioned):
  hotel = gt.choices["hotel"]
  total = _total(answer)
  sights = [p for p in mentioned if p.category == c["category"]]
  food = [p for p in mentioned if p.category == c["cuisine"]]
  missing = ((not _has(answer, hotel.address)) + (not _has(answer, _doc_key(w, c["info"])))
             + max(0, 2 - len(sights)) + (not food) + (total is None))
  broken = sum(not truth_lib.meets(p, c["max_ticket"], c["min_rating"]) for p in sights)
  broken += sum(not truth_lib.meets(p, c["max_meal"], c["min_rating"]) for p in food)
  broken += total is not None and total > c["budget"]
  return missing, broken


def _rules_multi_day(w, c, gt, answer, mentioned):
  o, d = c["origin"], c["destination"]
  out = {x.number: x for kind in ("train", "flight") for x in w.departures(kind, o, d, c["date"])}
  back = {x.number: x for x in w.departures("train", d, o, c["return_date"])}
  said = set(_NUMBER.findall(answer))
  total = _total(answer)
  hotels = [p for p in mentioned if p.city == d and p.kind == "hotel"]
  sights = [p for p in mentioned if p.city == d and p.category == c["category"]]
  missing = ((not _has(answer, _doc_key(w, c["info"]))) + (not _has(answer, _doc_key(
      w, c["policy"]))) + (not said & set(out)) + (not said & set(back)) + (not hotels)
             + max(0, 2 - len(sights)) + (total is None))
  broken = sum(out[n].depart_min < c["earliest"] for n in said & set(out))
  broken += sum(back[n].depart_min < c["return_earliest"] for n in said & set(back))
  broken += sum(not truth_lib.meets(p, c["hotel_max"], c["hotel_min_rating"]) for p in hotels)
  broken += total is not None and total > c["budget"]
  return missing, broken


_RULES = {"search": _rules_search, "direction": _rules_direction, "compare": _rules_compare,
          "one_day": _rules_one_day, "multi_day": _rules_multi_day}
