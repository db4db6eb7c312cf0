"""The travel environment's strict verifier: did a trajectory solve its task? All or nothing.

It is the evaluation's headline metric and never part of a reward. The requirements come from
the task's ground truth (:mod:`truth`) and the answer is read with the checker's per-entity fact
extraction (:mod:`reading`, :mod:`facts`); no partial credit is computed. A fact counts only when
it is stated on a line naming its entity, equals the truth for that entity and a tool result of
this trajectory gives it (a memorised fact is unsupported). Requirements, by name:

  finished                    the trajectory ended with its own answer (``base.final_answer``)
  facts_supported             no stated fact is wrong for its entity (an invented or moved
                              figure, a place or service no result names, a wrong total)
  fact:info                   the side question's document: its key content, retrieved
  search     fact:address:<landmark>; count (exactly ``count`` places of the category);
             per pick fact:price|rating|distance:<place> and
             constraint:price|rating|radius:<place>
  direction  fact:hours:<stop>; fact:minutes:<a> -> <b> per leg; schedule (the final arrival is
             stated, every stated arrival follows from the leave time and the legs, the leave
             time is not before the asked one and the arrival not after the deadline)
  compare    fact:minutes:<mode> and fact:cost:<mode> per mode; recommendation (the fastest mode
             within both caps); constraint:cost|minutes:<recommended mode>
  one_day    fact:address:<hotel>; count (two sights, one lunch); per pick fact:price|rating
             and constraint:price|rating; budget (the stated total is the named plan's true cost
             and within the budget)
  multi_day  fact:policy; count (one outbound and one return service, one hotel, two sights);
             per service fact:price|departure:<number> and constraint:departure:<number>;
             hotel fact:price|rating and constraint:price|rating; budget

A missing pick or service is named by its slot (``pick2``, ``lunch1``, ``outbound``). ``total``
is fixed per task; an unfinished trajectory meets nothing and names only ``finished``.
"""
from __future__ import annotations

from arenarl_jax import types
from arenarl_jax.envs import base
from arenarl_jax.envs.travel import facts as facts_lib
from arenarl_jax.envs.travel import reading as reading_lib
from arenarl_jax.envs.travel import world as world_lib

Checks = list[tuple[str, bool]]


def verify(world: world_lib.World, task: base.Task, gt, trajectory: types.Trajectory
           ) -> base.Verification:
  answer = base.final_answer(trajectory)
  calls = reading_lib.calls_of(trajectory) if answer.strip() else []
  r = reading_lib.read(world, task, gt, answer, calls)
  return base.verdict(requirements(r), bool(answer.strip()), is_content)


FORMAT = ("finished", "facts_supported")  # met by any well-formed answer that states nothing


def is_content(name: str) -> bool:
  """Whether requirement ``name`` asks for content (what the task asked), not format."""
  return name not in FORMAT


def requirements(r: reading_lib.Reading) -> Checks:
  """(name, met) of every requirement of the task, in a fixed order."""
  c = r.task.constraints
  checks: Checks = [("finished", bool(r.answer.strip())), ("facts_supported", not r.wrong),
                    ("fact:info", r.doc_covered(c["info"]))]
  return checks + _SUBTASK[r.task.subtask](r)


def _slot(r: reading_lib.Reading, slot: str, label: str, facts=("price", "rating"),
          limits=("price", "rating")) -> Checks:
  """Facts and limits of each place the slot asks for (the first ones named)."""
  out: Checks = []
  named = r.slots[slot]
  for k in range(r.sizes[slot]):
    p = named[k] if k < len(named) else None
    name = p.name if p else f"{label}{k + 1}"
    breaks = reading_lib.place_breaks(r, slot, p) if p else list(limits)
    for kind in facts:
      truth = _distance(r, p) if kind == "distance" and p else None
      out.append((f"fact:{kind}:{name}", bool(p) and r.poi_fact(p, kind, truth)))
    out += [(f"constraint:{kind}:{name}", kind not in breaks) for kind in limits]
  return out


def _distance(r: reading_lib.Reading, p: world_lib.Poi) -> float:
  land = r.truth.choices["landmark"]
  return facts_lib.num(round(world_lib.distance_km(land.lat, land.lng, p.lat, p.lng) * 1000))


def _search(r: reading_lib.Reading) -> Checks:
  land = r.truth.choices["landmark"]
  return ([(f"fact:address:{land.name}", r.poi_fact(land, "address")),
           ("count", len(r.slots["picks"]) == r.sizes["picks"])]
          + _slot(r, "picks", "pick", ("price", "rating", "distance"),
                  ("price", "rating", "radius")))


def _direction(r: reading_lib.Reading) -> Checks:
  c, legs = r.task.constraints, r.truth.choices["legs"]
  last = len(c["waypoints"]) - 1
  final = r.expected_arrival(last)
  schedule = (any(stop == last for stop, _ in r.arrivals)
              and all(t == r.expected_arrival(stop) for stop, t in r.arrivals)
              and final <= c["deadline"] and (r.leave is None or r.leave >= c["start"]))
  detail = r.truth.choices["detail"]
  return ([(f"fact:hours:{detail.name}", r.poi_fact(detail, "hours")), ("schedule", schedule)]
          + [(f"fact:minutes:{leg.origin} -> {leg.destination}",
              r.leg_fact(leg.origin, leg.destination, c["mode"], "minutes", leg.minutes))
             for leg in legs])


def _compare(r: reading_lib.Reading) -> Checks:
  c, legs = r.task.constraints, r.truth.choices["legs"]
  out: Checks = []
  for m in c["modes"]:
    for kind, name, truth in (("minutes", "minutes", legs[m].minutes), ("price", "cost",
                                                                         legs[m].cost)):
      out.append((f"fact:{name}:{m}", r.leg_fact(c["origin"], c["destination"], m, kind, truth,
                                                  bare_mode=True)))
  rec = r.recommendation
  breaks = reading_lib.plan_breaks(r).get(rec, ["cost", "minutes"]) if rec else ["cost",
                                                                                  "minutes"]
  out.append(("recommendation", rec == r.truth.choices["best"]))
  out += [(f"constraint:{kind}:{rec or 'recommendation'}", kind not in breaks)
          for kind in ("cost", "minutes")]
  return out


def _budget(r: reading_lib.Reading) -> tuple[str, bool]:
  cost = r.plan_cost
  return ("budget", cost is not None and r.total is not None and r.total == cost
          and cost <= r.task.constraints["budget"])


def _one_day(r: reading_lib.Reading) -> Checks:
  hotel = r.truth.choices["hotel"]
  count = len(r.slots["sights"]) == 2 and len(r.slots["lunch"]) == 1
  return ([(f"fact:address:{hotel.name}", r.poi_fact(hotel, "address")), ("count", count)]
          + _slot(r, "sights", "sight") + _slot(r, "lunch", "lunch") + [_budget(r)])


def _service(r: reading_lib.Reading, side: str) -> Checks:
  c = r.task.constraints
  chosen = r.services[side]
  if not chosen:
    return [(f"fact:price:{side}", False), (f"fact:departure:{side}", False),
            (f"constraint:departure:{side}", False)]
  d = chosen[0]
  svc = r.evidence.services.get(d.number)
  entity = ("service", d.number)
  prices = facts_lib.stated(r.claims, entity, "price")
  clocks = facts_lib.stated(r.claims, entity, "clock")
  depart, arrive = world_lib.clock(d.depart_min)[:5], world_lib.clock(d.arrive_min)[:5]
  price_ok = (svc is not None and facts_lib.num(d.price) in svc.fares
              and facts_lib.num(d.price) in prices and all(v in svc.fares for v in prices))
  clock_ok = (svc is not None and svc.depart == depart and depart in clocks
              and all(v in (depart, arrive) for v in clocks))
  earliest = c["earliest"] if side == "outbound" else c["return_earliest"]
  return [(f"fact:price:{d.number}", price_ok), (f"fact:departure:{d.number}", clock_ok),
          (f"constraint:departure:{d.number}", d.depart_min >= earliest)]


def _multi_day(r: reading_lib.Reading) -> Checks:
  count = (len(r.services["outbound"]) == 1 and len(r.services["return"]) == 1
           and len(r.slots["hotel"]) == 1 and len(r.slots["sights"]) == 2)
  return ([("fact:policy", r.doc_covered(r.task.constraints["policy"])), ("count", count)]
          + _service(r, "outbound") + _service(r, "return") + _slot(r, "hotel", "hotel")
          + [_budget(r)])


_SUBTASK = {"search": _search, "direction": _direction, "compare": _compare,
            "one_day": _one_day, "multi_day": _multi_day}
