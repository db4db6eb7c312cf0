"""What a travel answer puts forward, read against one trajectory's evidence: the checker's and the
verifier's shared view of an answer (neither scores anything here).

:func:`read` returns a :class:`Reading`: the answer's claims and wrong facts (:mod:`facts`), the
places it names for each pick slot of the task (search picks, day-trip sights and lunch, the
trip's hotel and sights) in the order it names them, the services it names (outbound, return,
other), the documents it cites, its recommended mode, its schedule (the time it leaves and the
arrival times it states per stop) and its stated total, plus the true cost of the plan it names
when that plan is complete. A slot naming more places than the task asks for makes no choice:
:meth:`Reading.picks` is then empty.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Sequence

from arenarl_jax import types
from arenarl_jax.envs import base
from arenarl_jax.envs.travel import facts as facts_lib
from arenarl_jax.envs.travel import truth as truth_lib
from arenarl_jax.envs.travel import world as world_lib

_LEAVE = re.compile(r"\b(?:leav|depart)\w*[^\n\d]{0,60}?(\d{1,2}):(\d{2})", re.IGNORECASE)
_ARRIVE = re.compile(r"\b(?:reach|arriv)\w*", re.IGNORECASE)
_RECOMMEND = re.compile(r"recommend\w*[^\n.]{0,80}?\b(" + "|".join(world_lib.MODES) + r")\b",
                        re.IGNORECASE)


def calls_of(trajectory: types.Trajectory) -> list[tuple[str, dict, str, bool]]:
  """(tool, arguments, result text, ok) for every call, in order (a call without a result
  failed)."""
  out = []
  for step in trajectory.steps:
    for k, call in enumerate(step.tool_calls):
      text = step.tool_results[k] if k < len(step.tool_results) else ""
      args = call.arguments if isinstance(call.arguments, dict) else {}
      out.append((call.name, dict(args), text, bool(text) and not text.startswith("Error:")))
  return out


def cities_of(task: base.Task) -> list[str]:
  c = task.constraints
  return [c["destination"], c["origin"]] if task.subtask == "multi_day" else [c["city"]]


def slot_specs(task: base.Task) -> dict[str, tuple[int, Any]]:
  """Pick slot -> (how many the task asks for, which places fill it)."""
  c = task.constraints
  if task.subtask == "search":
    return {"picks": (c["count"], lambda p: p.category == c["category"] and
                      p.name != c["landmark"] and p.city == c["city"])}
  if task.subtask == "one_day":
    return {"sights": (2, lambda p: p.category == c["category"] and p.city == c["city"]),
            "lunch": (1, lambda p: p.category == c["cuisine"] and p.city == c["city"])}
  if task.subtask == "multi_day":
    d = c["destination"]
    return {"hotel": (1, lambda p: p.kind == "hotel" and p.city == d),
            "sights": (2, lambda p: p.category == c["category"] and p.city == d)}
  return {}


@dataclasses.dataclass
class Reading:
  world: world_lib.World
  task: base.Task
  truth: truth_lib.Truth
  answer: str
  evidence: facts_lib.Evidence
  claims: list[facts_lib.Claim]
  wrong: set[tuple]
  checked: int
  named: list[world_lib.Poi]  # the task cities' places, in the order the answer names them
  slots: dict[str, list[world_lib.Poi]]
  sizes: dict[str, int]
  services: dict[str, list[world_lib.Departure]]  # outbound / return
  other_services: list[str]
  docs: list[str]  # lower-case titles of the documents the answer cites
  recommendation: str | None = None
  leave: int | None = None  # minutes after midnight
  arrivals: list[tuple[int, int]] = dataclasses.field(default_factory=list)  # (stop index, min)
  total: float | None = None
  plan_cost: int | None = None

  def picks(self, slot: str) -> list[world_lib.Poi]:
    """The slot's places when the answer makes a choice (no more than asked), else []."""
    named = self.slots[slot]
    return named if len(named) <= self.sizes[slot] else []

  def extras(self) -> int:
    """Places, services and documents named beyond what the task asks for."""
    asked = {self.task.constraints[k].lower() for k in ("info", "policy")
             if k in self.task.constraints}
    n = sum(max(0, len(v) - self.sizes[k]) for k, v in self.slots.items())
    n += sum(max(0, len(v) - 1) for v in self.services.values()) + len(self.other_services)
    return n + sum(t not in asked for t in self.docs)

  def neutral(self, kind: str, value: Any) -> bool:
    return (kind, value) in facts_lib.query_figures(self.task.query)

  def fact(self, entities: Sequence[tuple], kind: str, truth: Any, support: bool) -> bool:
    """Whether the answer states ``truth`` as the ``kind`` of one of ``entities`` (and nothing
    else but restated query figures), and the evidence holds it (``support``)."""
    values = [v for e in entities for v in facts_lib.stated(self.claims, e, kind)]
    return support and truth in values and all(v == truth or self.neutral(kind, v)
                                                for v in values)

  def poi_fact(self, p: world_lib.Poi, kind: str, truth: Any = None) -> bool:
    """The answer states ``p``'s true ``kind`` (price, rating, hours, address, distance) on a
    line naming it, as this trajectory's results give it."""
    if truth is None:
      truth = {"price": facts_lib.num(p.price), "rating": facts_lib.num(p.rating),
               "hours": p.hours, "address": p.address.lower()}[kind]
    name = p.name.lower()
    have = self.evidence.pois.get(name, {}).get(kind, ())
    return self.fact([("poi", name)], kind, truth, truth in have)

  def leg_fact(self, a: str, b: str, mode: str, kind: str, truth: float,
               bare_mode: bool = False) -> bool:
    """The answer states a leg's true minutes / price (on ``a -> b`` lines, or on the mode's own
    line when ``bare_mode``), as a navigation result of this trajectory gives it."""
    a, b = a.lower(), b.lower()
    entities = [c.entity for c in self.claims if c.entity[0] == "leg" and
                {c.entity[1], c.entity[2]} == {a, b} and c.entity[3] in ("", mode)]
    if bare_mode:
      entities.append(("mode", mode))
    col = {"distance": 1, "minutes": 2, "price": 3}[kind]
    support = any(r[col] == truth for r in self.evidence.leg_records(a, b, mode))
    return self.fact(list(dict.fromkeys(entities)), kind, facts_lib.num(truth), support)

  def doc_covered(self, title: str) -> bool:
    """The answer gives the document's key content (on a line naming that document or none)
    and this trajectory retrieved it."""
    doc, title = self.world.doc_by_title[title], title.lower()
    if title not in self.evidence.docs:
      return False
    for line in self.answer.splitlines():
      if doc.key.lower() in line.lower():
        named = facts_lib.find_title(self.world, line)
        if named is None or named[2] == title:
          return True
    return False

  def expected_arrival(self, stop: int) -> int:
    """When the route reaches waypoint ``stop`` leaving at the stated time (else the asked one)."""
    c, legs = self.task.constraints, self.truth.choices["legs"]
    start = c["start"] if self.leave is None else self.leave
    return start + sum(leg.minutes for leg in legs[:stop]) + c["stay"] * (stop - 1)


def read(world: world_lib.World, task: base.Task, gt: truth_lib.Truth, answer: str,
         calls: Sequence[tuple[str, dict, str, bool]]) -> Reading:
  """The answer of one trajectory read against its own calls' results."""
  c = task.constraints
  evidence = facts_lib.Evidence(text for *_, text, ok in calls if ok)
  aliases = {"hotel": c["hotel"]} if task.subtask == "one_day" else {}
  reader = facts_lib.Reader(world, cities_of(task), aliases)
  claims = reader.claims(answer)
  named: list[world_lib.Poi] = []
  for cl in claims:
    names = [cl.entity[1]] if cl.entity[0] == "poi" else (
        list(cl.entity[1:3]) if cl.entity[0] == "leg" else [])
    for name in names:
      p = reader.poi(name)
      if p is not None and p not in named:
        named.append(p)
  specs = slot_specs(task)
  slots = {k: [p for p in named if fits(p)] for k, (_, fits) in specs.items()}
  services: dict[str, list[world_lib.Departure]] = {}
  other: list[str] = []
  if task.subtask == "multi_day":
    o, d = c["origin"], c["destination"]
    out = {x.number: x for kind in ("train", "flight")
           for x in world.departures(kind, o, d, c["date"])}
    back = {x.number: x for x in world.departures("train", d, o, c["return_date"])}
    services = {"outbound": [], "return": []}
    for number in dict.fromkeys(cl.entity[1] for cl in claims if cl.entity[0] == "service"):
      if number in out:
        services["outbound"].append(out[number])
      elif number in back:
        services["return"].append(back[number])
      else:
        other.append(number)
  r = Reading(world, task, gt, answer, evidence, claims, set(), 0, named, slots,
              {k: n for k, (n, _) in specs.items()}, services, other,
              list(dict.fromkeys(cl.entity[1] for cl in claims if cl.entity[0] == "doc")))
  if task.subtask == "compare":
    m = _RECOMMEND.search(answer)
    r.recommendation = m.group(1).lower() if m else None
  if task.subtask == "direction":
    _read_schedule(r, c["waypoints"])
  totals = [v for cl in claims if cl.entity == ("total",) for k, v in cl.figures if k == "price"]
  r.total = totals[0] if totals else None
  r.plan_cost = _plan_cost(world, r)
  r.wrong, r.checked = facts_lib.audit(
      claims, evidence, task.query,
      pair=(c["origin"].lower(), c["destination"].lower()) if task.subtask == "compare" else None,
      plan_totals=() if r.plan_cost is None else (r.plan_cost,))
  return r


def _read_schedule(r: Reading, waypoints: Sequence[str]) -> None:
  m = _LEAVE.search(r.answer)
  r.leave = int(m[1]) * 60 + int(m[2]) if m else None
  stops = [w.lower() for w in waypoints]
  for line in r.answer.splitlines():
    low = line.lower()
    for key in _ARRIVE.finditer(line):
      when = facts_lib.CLOCK.search(line, key.end())
      if when is None:
        continue
      between = low[key.end():when.start()]
      hit = [k for k, s in enumerate(stops) if k > 0 and s in between]
      stop = hit[0] if hit else len(stops) - 1
      r.arrivals.append((stop, int(when[1]) * 60 + int(when[2])))


def _plan_cost(world: world_lib.World, r: Reading) -> int | None:
  c = r.task.constraints
  if r.task.subtask == "one_day":
    sights, lunch = r.picks("sights"), r.picks("lunch")
    if len(sights) != 2 or len(lunch) != 1:
      return None
    order = [p for p in r.named if p in sights + lunch]
    hotel = world.poi(c["city"], c["hotel"])
    legs = world.route([hotel] + order + [hotel], "transit")
    return c["party"] * (sum(p.price for p in order) + sum(leg.cost for leg in legs))
  if r.task.subtask == "multi_day":
    hotel, sights = r.picks("hotel"), r.picks("sights")
    out, back = r.services["outbound"], r.services["return"]
    if len(hotel) != 1 or len(sights) != 2 or len(out) != 1 or len(back) != 1:
      return None
    return truth_lib.multi_day_cost(c, {"outbound": out[0], "return": back[0], "hotel": hotel[0],
                                        "sights": sights})
  return None


_LIMITS = {"search": {"picks": ("max_price", "min_rating")},
           "one_day": {"sights": ("max_ticket", "min_rating"),
                       "lunch": ("max_meal", "min_rating")},
           "multi_day": {"hotel": ("hotel_max", "hotel_min_rating")}}


def place_breaks(r: Reading, slot: str, p: world_lib.Poi) -> list[str]:
  """The limits a place chosen for ``slot`` breaks: ``price``, ``rating``, ``radius``."""
  c, out = r.task.constraints, []
  keys = _LIMITS.get(r.task.subtask, {}).get(slot)
  if keys and p.price > c[keys[0]]:
    out.append("price")
  if keys and p.rating < c[keys[1]]:
    out.append("rating")
  if r.task.subtask == "search":
    land = r.truth.choices["landmark"]
    if world_lib.distance_km(land.lat, land.lng, p.lat, p.lng) * 1000 > c["radius"]:
      out.append("radius")
  return out


def plan_breaks(r: Reading) -> dict[str, list[str]]:
  """What the answer chooses (a place, a service, a mode, the schedule, the budget of a
  complete plan) -> the constraints it breaks ([] when it keeps them all). Only chosen things
  appear."""
  c, gt, sub = r.task.constraints, r.truth, r.task.subtask
  out: dict[str, list[str]] = {}
  for slot in r.slots:
    for p in r.picks(slot):
      out[p.name] = place_breaks(r, slot, p)
  for side, key in (("outbound", "earliest"), ("return", "return_earliest")):
    chosen = r.services.get(side, [])
    if len(chosen) == 1:
      out[chosen[0].number] = ["departure"] if chosen[0].depart_min < c[key] else []
  if sub in ("one_day", "multi_day") and r.plan_cost is not None:
    out["budget"] = ["budget"] if r.plan_cost > c["budget"] else []
  if sub == "compare" and r.recommendation:
    leg = gt.choices["legs"][r.recommendation]
    out[r.recommendation] = ((["cost"] if leg.cost > c["max_cost"] else [])
                             + (["minutes"] if leg.minutes > c["max_minutes"] else []))
  if sub == "direction" and (r.leave is not None or r.arrivals):
    late = r.expected_arrival(len(c["waypoints"]) - 1) > c["deadline"]
    early = r.leave is not None and r.leave < c["start"]
    out["schedule"] = (["deadline"] if late else []) + (["start"] if early else [])
  return out
