"""A scripted expert that solves travel tasks through the tools, with nested, controllable errors.

The expert calls the real tool source (so every fact it states came back in a tool result) and
writes a reference-format conversation (``text/messages.py``). Each task has eight potential error
sites, two per kind, in a fixed order::

  skip_tool        0: the first leaf look-up (landmark / stop / hotel / one mode / weather)
                   1: the second leaf look-up (usually the universal_search side question)
                   -> the call is not made and the answer section it feeds is left out
  break_constraint 0, 1: a pick replaced by an alternative that breaks a constraint (a place over
                   a limit, a mode over a cap, a departure too early, a start too late)
  unsupported_fact 0, 1: a stated price / distance / duration replaced by an invented value that
                   no tool result contains
  redundant_call   0, 1: the task's main call repeated with identical arguments

One uniform per site is drawn from ``rng``; a site is an error when ``u < error_rate`` (and its
kind is in ``kinds``). The same seed therefore gives nested error sets: a higher rate includes
every error of a lower one. Sites a task cannot realise (a second breaking alternative that does
not exist) are skipped the same way at every rate.
"""
from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

import numpy as np

from arenarl_jax.envs import base
from arenarl_jax.envs import inprocess
from arenarl_jax.envs.travel import checker as checker_lib
from arenarl_jax.envs.travel import tools as tools_lib
from arenarl_jax.envs.travel import truth as truth_lib
from arenarl_jax.envs.travel import world as world_lib

REFERENCE_ERROR_RATE = 0.3  # evaluation references: a flawless one would cap win rates at 50%
KINDS = ("skip_tool", "break_constraint", "unsupported_fact", "redundant_call")
SITES_PER_KIND = 2
SITES = tuple((kind, k) for kind in KINDS for k in range(SITES_PER_KIND))


def draw_errors(error_rate: float, rng: np.random.Generator | int,
                kinds: Sequence[str] = KINDS) -> frozenset[tuple[str, int]]:
  """The error sites for one task: one uniform per site, included when ``u < error_rate``."""
  if not 0.0 <= error_rate <= 1.0:
    raise ValueError(f"error_rate must be in [0, 1], got {error_rate}")
  unknown = set(kinds) - set(KINDS)
  if unknown:
    raise ValueError(f"unknown error kind(s) {sorted(unknown)}; expected some of {KINDS}")
  u = np.random.default_rng(rng).random(len(SITES))
  return frozenset(s for s, x in zip(SITES, u) if x < error_rate and s[0] in kinds)


class _Conversation:
  """Builds the messages while calling the tools."""

  def __init__(self, source: inprocess.InProcessToolSource, query: str):
    self.source = source
    self.messages: list[dict[str, Any]] = [{"role": "user", "content": query}]
    self.texts: list[str] = []
    self.invented: set[str] = set()

  def turn(self, reasoning: str, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str]:
    if not calls:
      return []
    turn = sum(m["role"] == "assistant" for m in self.messages)
    ids = [f"call_{turn}_{k}" for k in range(len(calls))]
    self.messages.append({"role": "assistant", "content": "", "reasoning_content": reasoning,
                          "tool_calls": [{"id": i, "type": "function", "function": {
                              "name": name, "arguments": json.dumps(dict(args),
                                                                    ensure_ascii=False)}}
                                         for i, (name, args) in zip(ids, calls)]})
    out = []
    for i, (name, args) in zip(ids, calls):
      result = self.source.call_sync(name, dict(args))
      if not result.ok:  # the expert's calls are valid by construction
        raise RuntimeError(f"expert call {name}({args}) failed: {result.text}")
      self.messages.append({"role": "tool", "tool_call_id": i, "content": result.text})
      self.texts.append(result.text)
      out.append(result.text)
    return out

  def answer(self, reasoning: str, text: str) -> list[dict[str, Any]]:
    self.messages.append({"role": "assistant", "content": text, "reasoning_content": reasoning})
    return self.messages


class TravelExpert:
  """``solve(task, error_rate, rng)`` -> reference-format messages."""

  def __init__(self, world: world_lib.World, source: inprocess.InProcessToolSource):
    self.world = world
    self.source = source

  def solve(self, task: base.Task, error_rate: float, rng: np.random.Generator | int,
            kinds: Sequence[str] = KINDS) -> list[dict[str, Any]]:
    errors = draw_errors(error_rate, rng, kinds)
    gt = truth_lib.derive(self.world, task.subtask, task.constraints)
    conv = _Conversation(self.source, task.query)
    return _SOLVERS[task.subtask](self, task, gt, errors, conv)

  # -- helpers --------------------------------------------------------------------------------
  @staticmethod
  def _first_calls(gt: truth_lib.Truth, errors) -> list[tuple[str, Mapping[str, Any]]]:
    """The needed calls that do not depend on results, minus skipped leaves."""
    return [(s.tool, s.args) for k, s in enumerate(gt.calls)
            if not (k < 2 and ("skip_tool", k) in errors)]

  @staticmethod
  def _repeat(conv: _Conversation, gt: truth_lib.Truth, errors) -> None:
    n = sum(("redundant_call", k) in errors for k in range(SITES_PER_KIND))
    main = gt.calls[2]
    conv.turn("Let me double-check that result.", [(main.tool, main.args)] * n)

  @staticmethod
  def _invent(conv: _Conversation, query: str, value: float, step: float) -> str:
    """A value close to ``value`` that no received result (nor the query) contains."""
    allowed = (checker_lib.numbers("\n".join(conv.texts)) | checker_lib.numbers(query)
               | conv.invented)
    x = value + 7 * step
    while checker_lib.canon(f"{x:.1f}" if step < 1 else str(int(x))) in allowed:
      x += step
    text = f"{x:.1f}" if step < 1 else str(int(x))
    conv.invented.add(checker_lib.canon(text))  # two invented facts never coincide
    return text

  def _info_line(self, title: str) -> str:
    doc = self.world.doc_by_title[title]
    return f"{doc.title}: {doc.text}"


def _price_phrase(p: world_lib.Poi, price: str) -> str:
  if p.kind == "restaurant":
    return f"average ¥{price} per person"
  if p.kind == "hotel":
    return f"¥{price} per night"
  return "free entry" if price == "0" else f"ticket ¥{price}"


def _solve_search(ex: TravelExpert, task, gt, errors, conv: _Conversation):
  c = task.constraints
  conv.turn(f"I need {c['landmark']}'s details, places of category {c['category']} around it, "
            "and the side question.", ex._first_calls(gt, errors))
  ex._repeat(conv, gt, errors)
  picks = list(gt.choices["picks"])
  for k in range(SITES_PER_KIND):
    if ("break_constraint", k) in errors and k < len(gt.violators):
      picks[len(picks) - 1 - k] = gt.violators[k]
  dist = {p.name: str(gt.choices["distance"][p.name]) for p in picks}
  price = {p.name: str(p.price) for p in picks}
  if ("unsupported_fact", 0) in errors:
    price[picks[0].name] = ex._invent(conv, task.query, picks[0].price, 1)
  if ("unsupported_fact", 1) in errors:
    dist[picks[1].name] = ex._invent(conv, task.query, int(dist[picks[1].name]), 1)
  lines = [f"Here are {len(picks)} {c['category']} places within {c['radius']} m of "
           f"{c['landmark']} in {c['city']}:"]
  for k, p in enumerate(picks):
    lines.append(f"{k + 1}. {p.name}: rating {p.rating}, {_price_phrase(p, price[p.name])}, "
                 f"{dist[p.name]} m away, open {p.hours}, at {p.address}.")
  if ("skip_tool", 0) not in errors:
    lines.append(f"{c['landmark']} itself is at {gt.choices['landmark'].address}.")
  if ("skip_tool", 1) not in errors:
    lines.append(ex._info_line(c["info"]))
  return conv.answer("All picks meet the radius, rating and price limits.", "\n".join(lines))


def _solve_direction(ex: TravelExpert, task, gt, errors, conv: _Conversation):
  c = task.constraints
  conv.turn(f"I need the {c['mode']} route through all stops in order, plus the side questions.",
            ex._first_calls(gt, errors))
  ex._repeat(conv, gt, errors)
  legs = gt.choices["legs"]
  start = c["start"] + (gt.violators[0] if ("break_constraint", 0) in errors else 0)
  kms = [str(leg.km) for leg in legs]
  mins = [leg.minutes for leg in legs]
  shown = [str(m) for m in mins]
  if ("unsupported_fact", 0) in errors:
    kms[0] = ex._invent(conv, task.query, legs[0].km, 0.1)
  if ("unsupported_fact", 1) in errors:
    shown[-1] = ex._invent(conv, task.query, mins[-1], 1)
  lines = [f"Route by {c['mode']} in {c['city']}.", f"Leave {c['waypoints'][0]} at "
           f"{world_lib.clock(start)}."]
  t = start
  for k, leg in enumerate(legs):
    t += mins[k]
    lines.append(f"{k + 1}. {leg.origin} -> {leg.destination}: {kms[k]} km, {shown[k]} min, "
                 f"¥{leg.cost}; reach {leg.destination} at {world_lib.clock(t)}"
                 + (f", stay {c['stay']} min." if k < len(legs) - 1 else "."))
    if k < len(legs) - 1:
      t += c["stay"]
  lines.append(f"Total travel: {round(sum(leg.km for leg in legs), 1)} km, {sum(mins)} min, "
               f"¥{sum(leg.cost for leg in legs)}.")
  lines.append(f"Arrival at {c['waypoints'][-1]}: {world_lib.clock(t)} (needed by "
               f"{world_lib.clock(c['deadline'])}).")
  if ("skip_tool", 0) not in errors:
    lines.append(f"{c['detail_stop']} is open {gt.choices['detail'].hours}.")
  if ("skip_tool", 1) not in errors:
    lines.append(ex._info_line(c["info"]))
  return conv.answer("Arrival times add the legs and the stays.", "\n".join(lines))


def _solve_compare(ex: TravelExpert, task, gt, errors, conv: _Conversation):
  c = task.constraints
  conv.turn("I need a route for every mode and the side question.", ex._first_calls(gt, errors))
  ex._repeat(conv, gt, errors)
  legs, best = gt.choices["legs"], gt.choices["best"]
  rec = gt.violators[0] if ("break_constraint", 0) in errors else best
  cost = {m: str(legs[m].cost) for m in c["modes"]}
  km = {m: str(legs[m].km) for m in c["modes"]}
  if ("unsupported_fact", 0) in errors:
    cost[best] = ex._invent(conv, task.query, legs[best].cost, 1)
  if ("unsupported_fact", 1) in errors:
    km[best] = ex._invent(conv, task.query, legs[best].km, 0.1)
  lines = [f"From {c['origin']} to {c['destination']} in {c['city']} (limits ¥{c['max_cost']}, "
           f"{c['max_minutes']} min):"]
  for m in c["modes"]:
    if m == gt.choices["skipped_mode"] and ("skip_tool", 0) in errors:
      continue
    leg = legs[m]
    verdict = ("over budget" if leg.cost > c["max_cost"] else "too slow"
               if leg.minutes > c["max_minutes"] else "within your limits")
    lines.append(f"- {m}: {km[m]} km, {leg.minutes} min, ¥{cost[m]} ({verdict})")
  lines.append(f"Recommendation: {rec}, the fastest option that fits your limits.")
  if ("skip_tool", 1) not in errors:
    lines.append(ex._info_line(c["info"]))
  return conv.answer("The fastest mode within both limits wins.", "\n".join(lines))


def _solve_one_day(ex: TravelExpert, task, gt, errors, conv: _Conversation):
  c = task.constraints
  conv.turn("I need the hotel, the sights and restaurants of the asked kinds, and the side "
            "question.", ex._first_calls(gt, errors)[:-1])
  ex._repeat(conv, gt, errors)
  plan = dict(gt.choices)
  if ("break_constraint", 0) in errors:
    plan["lunch"] = gt.violators[0]
  if ("break_constraint", 1) in errors:
    plan["sight2"] = gt.violators[1]
  hotel = plan["hotel"]
  route = truth_lib.one_day_route(hotel, plan)
  conv.turn("Now the transit route through the chosen places.", [(
      "get_navigation", {"city": c["city"], "mode": "transit",
                         "waypoints": [p.name for p in route]})])
  legs = ex.world.route(route, "transit")
  price = {k: str(plan[k].price) for k in ("sight1", "lunch", "sight2")}
  if ("unsupported_fact", 0) in errors:
    price["sight1"] = ex._invent(conv, task.query, plan["sight1"].price, 1)
  if ("unsupported_fact", 1) in errors:
    price["lunch"] = ex._invent(conv, task.query, plan["lunch"].price, 1)
  total = truth_lib.one_day_cost(ex.world, c, hotel, plan)
  lines = [f"Day plan for {c['city']} on {c['date']} (party of {c['party']}), leaving "
           f"{hotel.name} at {world_lib.clock(c['start'])}:"]
  if ("skip_tool", 0) not in errors:
    lines.append(f"Hotel address: {hotel.address}.")
  for label, key in (("Morning", "sight1"), ("Lunch", "lunch"), ("Afternoon", "sight2")):
    p = plan[key]
    lines.append(f"{label}: {p.name} ({p.category}), rating {p.rating}, "
                 f"{_price_phrase(p, price[key])}, open {p.hours}.")
  lines.append("Transit legs:")
  for leg in legs:
    lines.append(f"- {leg.origin} -> {leg.destination}: {leg.km} km, {leg.minutes} min, "
                 f"¥{leg.cost}")
  lines.append(f"Total for {c['party']}: ¥{total} (budget ¥{c['budget']}).")
  if ("skip_tool", 1) not in errors:
    lines.append(ex._info_line(c["info"]))
  return conv.answer("Each pick meets the price and rating limits; the total fits the budget.",
                     "\n".join(lines))


def _dep_line(label: str, d: world_lib.Departure, price: str) -> str:
  kind = "flight" if d.fares[0][0] == "economy" else "train"
  return (f"{label}: {kind} {d.number}, {d.origin} {world_lib.clock(d.depart_min)} -> "
          f"{d.destination} {world_lib.clock(d.arrive_min)}, {d.minutes} min, ¥{price} "
          "per person.")


def _solve_multi_day(ex: TravelExpert, task, gt, errors, conv: _Conversation):
  c = task.constraints
  conv.turn("I need outbound trains and flights, return trains, hotels, sights, weather and the "
            "policy.", ex._first_calls(gt, errors))
  ex._repeat(conv, gt, errors)
  plan = dict(gt.choices)
  if ("break_constraint", 0) in errors:
    plan["outbound"] = gt.violators[0]
  if ("break_constraint", 1) in errors:
    plan["hotel"] = gt.violators[1]
  hotel_price, out_price = str(plan["hotel"].price), str(plan["outbound"].price)
  if ("unsupported_fact", 0) in errors:
    hotel_price = ex._invent(conv, task.query, plan["hotel"].price, 1)
  if ("unsupported_fact", 1) in errors:
    out_price = ex._invent(conv, task.query, plan["outbound"].price, 1)
  h = plan["hotel"]
  lines = [f"Trip from {c['origin']} to {c['destination']}, {c['date']} to {c['return_date']}, "
           f"party of {c['party']}:",
           _dep_line("Outbound", plan["outbound"], out_price),
           f"Hotel: {h.name} ({h.category}), rating {h.rating}, ¥{hotel_price} per night, "
           f"{h.address}."]
  for k, p in enumerate(plan["sights"]):
    lines.append(f"Day {k + 2}: {p.name}, rating {p.rating}, {_price_phrase(p, str(p.price))}, "
                 f"open {p.hours}.")
  lines.append(_dep_line("Return", plan["return"], str(plan["return"].price)))
  lines.append(f"Total for {c['party']}: ¥{truth_lib.multi_day_cost(c, plan)} (budget "
               f"¥{c['budget']}).")
  if ("skip_tool", 0) not in errors:
    lines.append(ex._info_line(c["info"]))
  if ("skip_tool", 1) not in errors:
    lines.append(ex._info_line(c["policy"]))
  return conv.answer("Cheapest transport within the time limits, best hotel within budget.",
                     "\n".join(lines))


_SOLVERS = {"search": _solve_search, "direction": _solve_direction, "compare": _solve_compare,
            "one_day": _solve_one_day, "multi_day": _solve_multi_day}


def make_expert(seed: int) -> TravelExpert:
  w = world_lib.make_world(seed)
  return TravelExpert(w, tools_lib.make_tool_source(w))

