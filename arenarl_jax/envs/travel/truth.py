"""Ground truth of a travel task, re-derived from the world and the task's constraints.

:func:`derive` says which tool calls a task needs (:class:`CallSpec`), which two of them are leaf
look-ups an answer section depends on (the expert's ``skip_tool`` sites), the correct choices, the
constraint-breaking alternatives (``break_constraint`` sites) and the budgets. The checker and the
expert both use it; neither reads ground truth from a trajectory.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

from arenarl_jax.envs.travel import world as world_lib


class Unusable(Exception):
  """The drawn constraints have no unique answer or no breakable alternative; draw again."""


@dataclasses.dataclass(frozen=True)
class CallSpec:
  """A needed call: ``tool`` with the expert's ``args``; a trajectory's call matches when the
  arguments named in ``match_args`` are equal (case-insensitive) and its ok result contains every
  string of ``must_contain``."""

  label: str
  tool: str
  args: Mapping[str, Any]
  match_args: tuple[str, ...] = ()
  must_contain: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Truth:
  subtask: str
  calls: tuple[CallSpec, ...]  # every needed call; the first two are the skippable leaf calls
  choices: Mapping[str, Any]  # the correct picks (subtask-specific keys)
  violators: tuple[Any, ...]  # up to two constraint-breaking alternatives, in site order
  budget: int = 0


def norm(value: Any) -> Any:
  """Argument values compared case- and space-insensitively (lists element-wise)."""
  if isinstance(value, str):
    return " ".join(value.lower().split())
  if isinstance(value, (list, tuple)):
    return [norm(v) for v in value]
  return value


def _info_spec(label: str, title: str) -> CallSpec:
  return CallSpec(label, "universal_search", {"query": title}, (), (title,))


def _poi_spec(label: str, city: str, keyword: str, contain: tuple[str, ...]) -> CallSpec:
  return CallSpec(label, "search_poi", {"city": city, "keyword": keyword}, ("city",), contain)


def meets(p: world_lib.Poi, max_price: int, min_rating: float) -> bool:
  return p.price <= max_price and p.rating >= min_rating


def derive(w: world_lib.World, subtask: str, c: Mapping[str, Any]) -> Truth:
  return _DERIVE[subtask](w, c)


def _search(w: world_lib.World, c: Mapping[str, Any]) -> Truth:
  land = w.poi(c["city"], c["landmark"])
  near = []
  for p in w.pois[c["city"]]:
    if p.category != c["category"] or p.name == land.name:
      continue
    m = int(round(world_lib.distance_km(land.lat, land.lng, p.lat, p.lng) * 1000))
    if m <= c["radius"]:
      near.append((m, p))
  good = sorted((x for x in near if meets(x[1], c["max_price"], c["min_rating"])),
                key=lambda x: (-x[1].rating, x[0], x[1].name))
  bad = sorted((x for x in near if not meets(x[1], c["max_price"], c["min_rating"])),
               key=lambda x: (x[0], x[1].name))
  if len(good) < c["count"] or not bad:
    raise Unusable
  picks = [p for _, p in good[:c["count"]]]
  calls = (
      _poi_spec("landmark", c["city"], c["landmark"], (c["landmark"], land.address)),
      _info_spec("info", c["info"]),
      CallSpec("around", "around_search", {"city": c["city"], "location": c["landmark"],
                                           "keyword": c["category"], "radius": c["radius"]},
               ("city",), tuple(p.name for p in picks)),
  )
  dist = {p.name: m for m, p in near}
  return Truth("search", calls, {"picks": picks, "landmark": land, "distance": dist},
               tuple(p for _, p in bad[:2]))


def _direction(w: world_lib.World, c: Mapping[str, Any]) -> Truth:
  stops = [w.poi(c["city"], n) for n in c["waypoints"]]
  legs = w.route(stops, c["mode"])
  arrival = c["start"] + sum(leg.minutes for leg in legs) + c["stay"] * (len(stops) - 2)
  detail = w.poi(c["city"], c["detail_stop"])
  calls = (
      _poi_spec("detail_stop", c["city"], c["detail_stop"], (detail.name, detail.hours)),
      _info_spec("info", c["info"]),
      CallSpec("route", "get_navigation", {"city": c["city"], "mode": c["mode"],
                                           "waypoints": list(c["waypoints"])},
               ("city", "mode", "waypoints")),
  )
  # The breaking alternative: leave late enough to miss the deadline.
  late = c["deadline"] - arrival + 15
  return Truth("direction", calls, {"stops": stops, "legs": legs, "arrival": arrival,
                                    "detail": detail}, (late,))


def _compare(w: world_lib.World, c: Mapping[str, Any]) -> Truth:
  a, b = w.poi(c["city"], c["origin"]), w.poi(c["city"], c["destination"])
  legs = {m: w.leg(a, b, m) for m in c["modes"]}
  ok = [m for m in c["modes"] if legs[m].cost <= c["max_cost"] and
        legs[m].minutes <= c["max_minutes"]]
  bad = [m for m in c["modes"] if m not in ok]
  if not ok or len(bad) < 2:
    raise Unusable
  best = min(ok, key=lambda m: (legs[m].minutes, legs[m].cost))
  if sum(legs[m].minutes == legs[best].minutes for m in ok) > 1:
    raise Unusable
  nav = {m: CallSpec(f"route_{m}", "get_navigation", {"city": c["city"], "mode": m,
                                                      "waypoints": [a.name, b.name]},
                     ("city", "mode", "waypoints")) for m in c["modes"]}
  calls = (nav[bad[0]], _info_spec("info", c["info"])) + tuple(
      nav[m] for m in c["modes"] if m != bad[0])
  return Truth("compare", calls, {"legs": legs, "best": best, "skipped_mode": bad[0]},
               (bad[1],))


def _one_day(w: world_lib.World, c: Mapping[str, Any]) -> Truth:
  pois = w.pois[c["city"]]
  hotel = w.poi(c["city"], c["hotel"])
  sights = sorted((p for p in pois if p.category == c["category"]),
                  key=lambda p: (-p.rating, p.name))
  food = sorted((p for p in pois if p.category == c["cuisine"]), key=lambda p: (-p.rating, p.name))
  good_s = [p for p in sights if meets(p, c["max_ticket"], c["min_rating"])]
  bad_s = [p for p in sights if not meets(p, c["max_ticket"], c["min_rating"])]
  good_f = [p for p in food if meets(p, c["max_meal"], c["min_rating"])]
  bad_f = [p for p in food if not meets(p, c["max_meal"], c["min_rating"])]
  if len(good_s) < 2 or not bad_s or not good_f or not bad_f:
    raise Unusable
  picks = {"sight1": good_s[0], "sight2": good_s[1], "lunch": good_f[0]}
  violators = (bad_f[0], bad_s[0])  # site 0 replaces lunch, site 1 the second sight
  worst = 0
  for swap_food in (False, True):
    for swap_sight in (False, True):
      plan = dict(picks, lunch=bad_f[0] if swap_food else picks["lunch"],
                  sight2=bad_s[0] if swap_sight else picks["sight2"])
      worst = max(worst, one_day_cost(w, c, hotel, plan))
  budget = int(math.ceil((worst + 30 * c["party"]) / 50.0)) * 50
  calls = (
      _poi_spec("hotel", c["city"], c["hotel"], (hotel.name, hotel.address)),
      _info_spec("info", c["info"]),
      _poi_spec("sights", c["city"], c["category"], (good_s[0].name, good_s[1].name)),
      _poi_spec("lunch", c["city"], c["cuisine"], (good_f[0].name,)),
      CallSpec("route", "get_navigation", {"city": c["city"], "mode": "transit"},
               ("city", "mode"), (hotel.name, good_s[0].name)),
  )
  return Truth("one_day", calls, dict(picks, hotel=hotel), violators, budget)


def one_day_route(hotel: world_lib.Poi, plan: Mapping[str, Any]) -> list[world_lib.Poi]:
  return [hotel, plan["sight1"], plan["lunch"], plan["sight2"], hotel]


def one_day_cost(w: world_lib.World, c: Mapping[str, Any], hotel: world_lib.Poi,
                 plan: Mapping[str, Any]) -> int:
  legs = w.route(one_day_route(hotel, plan), "transit")
  per_person = plan["sight1"].price + plan["sight2"].price + plan["lunch"].price
  return per_person * c["party"] + sum(leg.cost for leg in legs) * c["party"]


def _multi_day(w: world_lib.World, c: Mapping[str, Any]) -> Truth:
  o, d = c["origin"], c["destination"]
  trains = w.departures("train", o, d, c["date"])
  flights = w.departures("flight", o, d, c["date"])
  back = w.departures("train", d, o, c["return_date"])
  if not trains or not flights or not back:
    raise Unusable
  out_all = list(trains) + list(flights)
  out_ok = [x for x in out_all if x.depart_min >= c["earliest"]]
  out_bad = [x for x in out_all if x.depart_min < c["earliest"]]
  back_ok = [x for x in back if x.depart_min >= c["return_earliest"]]
  hotels = sorted((p for p in w.pois[d] if p.kind == "hotel"), key=lambda p: (-p.rating, p.name))
  h_ok = [p for p in hotels if meets(p, c["hotel_max"], c["hotel_min_rating"])]
  h_bad = [p for p in hotels if not meets(p, c["hotel_max"], c["hotel_min_rating"])]
  if not out_ok or not out_bad or not back_ok or not h_ok or not h_bad:
    raise Unusable
  key = lambda x: (x.price, x.depart_min, x.number)  # noqa: E731
  outbound, ret = min(out_ok, key=key), min(back_ok, key=key)
  if sum(x.price == outbound.price for x in out_ok) > 1:
    raise Unusable
  sights = sorted((p for p in w.pois[d] if p.category == c["category"]),
                  key=lambda p: (-p.rating, p.name))[:2]
  picks = {"outbound": outbound, "return": ret, "hotel": h_ok[0], "sights": sights}
  violators = (min(out_bad, key=key), h_bad[0])
  worst = 0
  for v_out in (outbound, violators[0]):
    for v_hotel in (h_ok[0], violators[1]):
      worst = max(worst, multi_day_cost(c, dict(picks, outbound=v_out, hotel=v_hotel)))
  budget = int(math.ceil((worst + 100) / 100.0)) * 100
  calls = (
      _info_spec("weather", c["info"]),
      _info_spec("policy", c["policy"]),
      CallSpec("trains_out", "search_train_tickets", {"date": c["date"], "from_city": o,
                                                      "to_city": d},
               ("date", "from_city", "to_city")),
      CallSpec("flights_out", "search_flights", {"date": c["date"], "from_city": o, "to_city": d},
               ("date", "from_city", "to_city")),
      CallSpec("trains_back", "search_train_tickets", {"date": c["return_date"], "from_city": d,
                                                       "to_city": o},
               ("date", "from_city", "to_city")),
      _poi_spec("hotels", d, "hotel", (h_ok[0].name,)),
      _poi_spec("sights", d, c["category"], tuple(p.name for p in sights)),
  )
  return Truth("multi_day", calls, picks, violators, budget)


def multi_day_cost(c: Mapping[str, Any], plan: Mapping[str, Any]) -> int:
  rooms = (c["party"] + 1) // 2
  tickets = sum(p.price for p in plan["sights"])
  return ((plan["outbound"].price + plan["return"].price + tickets) * c["party"]
          + plan["hotel"].price * c["nights"] * rooms)


_DERIVE = {"search": _search, "direction": _direction, "compare": _compare, "one_day": _one_day,
           "multi_day": _multi_day}
