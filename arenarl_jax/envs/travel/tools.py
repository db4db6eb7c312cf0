"""The six Open-Travel tools over a :class:`~arenarl_jax.envs.travel.world.World`, as plain text.

Names and argument shapes follow the paper (ARENARL.md §6): ``search_poi(city, keyword)``,
``around_search(city, location, keyword, radius)``, ``get_navigation(city, mode, waypoints)``,
``universal_search(query)``, ``search_flights(date, from_city, to_city)`` and
``search_train_tickets(date, from_city, to_city)``. Schemas catch missing, extra and mistyped
arguments (``BAD_ARGUMENTS``, via :class:`InProcessToolSource`); the functions raise
``ToolError(NOT_FOUND)`` for an unknown city or POI and for searches with no results, and
``ToolError(BAD_ARGUMENTS)`` for malformed dates or coordinates and dates outside the timetable.
Nothing ever returns an empty success.
"""
from __future__ import annotations

import re

from arenarl_jax.envs import base
from arenarl_jax.envs import inprocess
from arenarl_jax.envs.travel import world as world_lib

MAX_WAYPOINTS = 16  # as the reference direction tool
MAX_RESULTS = 10
_LOCATION_RE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*,\s*(-?\d+(?:\.\d+)?)\s*$")
_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def _str(description: str, **extra) -> dict:
  return {"type": "string", "minLength": 1, "maxLength": 200, "description": description, **extra}


SCHEMAS = {
    "search_poi": {
        "type": "object", "additionalProperties": False, "required": ["city", "keyword"],
        "properties": {"city": _str("City name."),
                       "keyword": _str("A place name, or a kind/category such as museum, "
                                       "seafood, hotel, railway station.")}},
    "around_search": {
        "type": "object", "additionalProperties": False,
        "required": ["city", "location", "keyword"],
        "properties": {"city": _str("City name."),
                       "location": _str("Centre: a place name in the city or \"lng,lat\"."),
                       "keyword": _str("Kind or category to look for, e.g. restaurant, park."),
                       "radius": {"type": "integer", "minimum": 100, "maximum": 20000,
                                  "description": "Search radius in metres (default 3000)."}}},
    "get_navigation": {
        "type": "object", "additionalProperties": False,
        "required": ["city", "mode", "waypoints"],
        "properties": {"city": _str("City name."),
                       "mode": {"type": "string", "enum": list(world_lib.MODES)},
                       "waypoints": {"type": "array", "minItems": 2, "maxItems": MAX_WAYPOINTS,
                                     "items": _str("Place name or \"lng,lat\"."),
                                     "description": "Ordered stops, origin first, destination "
                                                    "last."}}},
    "universal_search": {
        "type": "object", "additionalProperties": False, "required": ["query"],
        "properties": {"query": _str("Search words: weather, tips, travel policies.")}},
    "search_flights": {
        "type": "object", "additionalProperties": False,
        "required": ["date", "from_city", "to_city"],
        "properties": {"date": _str("Date, YYYY-MM-DD."), "from_city": _str("Departure city."),
                       "to_city": _str("Arrival city.")}},
    "search_train_tickets": {
        "type": "object", "additionalProperties": False,
        "required": ["date", "from_city", "to_city"],
        "properties": {"date": _str("Date, YYYY-MM-DD."), "from_city": _str("Departure city."),
                       "to_city": _str("Arrival city.")}},
}
DESCRIPTIONS = {
    "search_poi": "Find places in a city by name, kind or category (rating, hours, price).",
    "around_search": "Find places of a kind or category near a location, nearest first.",
    "get_navigation": "Route through ordered waypoints by walking, bicycling, driving or transit: "
                      "distance, duration and cost per leg and in total.",
    "universal_search": "Search weather forecasts, city tips and travel policies.",
    "search_flights": "Flights between two cities on a date.",
    "search_train_tickets": "Trains between two cities on a date.",
}


def poi_line(p: world_lib.Poi) -> str:
  """One POI as the tools print it."""
  if p.kind == "attraction":
    price = f"ticket ¥{p.price}" if p.price else "free entry"
  elif p.kind == "restaurant":
    price = f"average ¥{p.price} per person"
  elif p.kind == "hotel":
    price = f"¥{p.price} per night"
  else:
    price = "no fee"
  return (f"{p.name} | {p.kind}/{p.category} | rating {p.rating} | open {p.hours} | {price} | "
          f"{p.address} | location {p.location}")


class TravelTools:
  """The tool functions bound to one world."""

  def __init__(self, world: world_lib.World):
    self.world = world

  def _city(self, name: str) -> world_lib.City:
    city = self.world.city(name)
    if city is None:
      raise inprocess.ToolError(base.NOT_FOUND, f"unknown city {name!r}; known cities include "
                                + ", ".join(c.name for c in self.world.cities[:6]) + ", ...")
    return city

  def _matches(self, city: str, keyword: str) -> list[world_lib.Poi]:
    key = " ".join(keyword.lower().split())
    singular = key[:-3] + "y" if key.endswith("ies") else key[:-1] if key.endswith("s") else key
    out = []
    for p in self.world.pois[city]:
      if key in (p.kind, p.category) or singular in (p.kind, p.category) or key in p.name.lower():
        out.append(p)
    return out

  def _place(self, city: world_lib.City, text: str) -> tuple[float, float, str]:
    m = _LOCATION_RE.match(text)
    if m:
      lng, lat = float(m.group(1)), float(m.group(2))
      if not (-180 <= lng <= 180 and -90 <= lat <= 90):
        raise inprocess.ToolError(base.BAD_ARGUMENTS, f"location {text!r} is not a valid "
                                  "\"lng,lat\" pair")
      return lat, lng, text.strip()
    poi = self.world.poi(city.name, text)
    if poi is None:
      raise inprocess.ToolError(base.NOT_FOUND, f"no place named {text!r} in {city.name}; use "
                                "search_poi to find exact names, or give \"lng,lat\"")
    return poi.lat, poi.lng, poi.name

  def search_poi(self, city: str, keyword: str) -> str:
    c = self._city(city)
    found = self._matches(c.name, keyword)
    if not found:
      raise inprocess.ToolError(base.NOT_FOUND, f"no place in {c.name} matches {keyword!r}")
    exact = keyword.strip().lower()
    found.sort(key=lambda p: (p.name.lower() != exact, -p.rating, p.name))
    lines = [f"{len(found)} place(s) in {c.name} matching {keyword!r}"
             + (f", showing {MAX_RESULTS}" if len(found) > MAX_RESULTS else "") + ":"]
    lines += [f"{k + 1}. {poi_line(p)}" for k, p in enumerate(found[:MAX_RESULTS])]
    return "\n".join(lines)

  def around_search(self, city: str, location: str, keyword: str, radius: int = 3000) -> str:
    c = self._city(city)
    lat, lng, label = self._place(c, location)
    near = []
    for p in self._matches(c.name, keyword):
      m = int(round(world_lib.distance_km(lat, lng, p.lat, p.lng) * 1000))
      if m <= radius and p.name != label:
        near.append((m, p))
    if not near:
      raise inprocess.ToolError(base.NOT_FOUND, f"no {keyword!r} within {radius} m of {label} "
                                f"in {c.name}; try a larger radius")
    near.sort(key=lambda x: (x[0], x[1].name))
    lines = [f"{len(near)} {keyword!r} place(s) within {radius} m of {label}"
             + (f", showing the nearest {MAX_RESULTS}" if len(near) > MAX_RESULTS else "") + ":"]
    lines += [f"{k + 1}. {poi_line(p)} | {m} m away" for k, (m, p) in
              enumerate(near[:MAX_RESULTS])]
    return "\n".join(lines)

  def get_navigation(self, city: str, mode: str, waypoints: list) -> str:
    c = self._city(city)
    stops = []
    for w in waypoints:
      lat, lng, label = self._place(c, w)
      stops.append(world_lib.Poi(label, c.name, "point", "point", lat, lng, 0.0, 0, 0, 0, ""))
    legs = self.world.route(stops, mode)
    lines = [f"Route by {mode} in {c.name}, {len(legs)} leg(s):"]
    for k, leg in enumerate(legs):
      lines.append(f"{k + 1}. {leg.origin} -> {leg.destination}: {leg.km} km, {leg.minutes} min, "
                   f"¥{leg.cost}")
    total_km = round(sum(leg.km for leg in legs), 1)
    lines.append(f"Total: {total_km} km, {sum(leg.minutes for leg in legs)} min, "
                 f"¥{sum(leg.cost for leg in legs)}")
    return "\n".join(lines)

  def universal_search(self, query: str) -> str:
    docs = self.world.search_docs(query)
    if not docs:
      raise inprocess.ToolError(base.NOT_FOUND, f"nothing found for {query!r}; try other words "
                                "(a city name, 'weather', 'policy', 'tips')")
    return "\n".join(f"[{k + 1}] {d.title}: {d.text}" for k, d in enumerate(docs))

  def _departures(self, kind: str, date: str, from_city: str, to_city: str) -> str:
    if not _DATE_RE.match(date.strip()):
      raise inprocess.ToolError(base.BAD_ARGUMENTS, f"date {date!r} must be YYYY-MM-DD")
    date = date.strip()
    if date not in world_lib.DATES:
      raise inprocess.ToolError(base.BAD_ARGUMENTS, f"date {date} is outside the timetable "
                                f"({world_lib.DATES[0]} to {world_lib.DATES[-1]})")
    a, b = self._city(from_city), self._city(to_city)
    if a is b:
      raise inprocess.ToolError(base.BAD_ARGUMENTS, "from_city and to_city are the same city")
    what = "flights" if kind == "flight" else "trains"
    deps = self.world.departures(kind, a.name, b.name, date)
    if not deps:
      raise inprocess.ToolError(base.NOT_FOUND, f"no {what} run between {a.name} and {b.name}"
                                + (" (too close to fly)" if kind == "flight" else
                                   " (no rail link)"))
    lines = [f"{len(deps)} {what} from {a.name} to {b.name} on {date}:"]
    for d in deps:
      fares = ", ".join(f"{cls} ¥{p}" for cls, p in d.fares)
      lines.append(f"{d.number} | {d.origin} {world_lib.clock(d.depart_min)} -> {d.destination} "
                   f"{world_lib.clock(d.arrive_min)} | {d.minutes} min | {fares}")
    return "\n".join(lines)

  def search_flights(self, date: str, from_city: str, to_city: str) -> str:
    return self._departures("flight", date, from_city, to_city)

  def search_train_tickets(self, date: str, from_city: str, to_city: str) -> str:
    return self._departures("train", date, from_city, to_city)


def make_tools(world: world_lib.World) -> list[inprocess.Tool]:
  impl = TravelTools(world)
  return [inprocess.Tool(name, DESCRIPTIONS[name], SCHEMAS[name], getattr(impl, name))
          for name in SCHEMAS]


def make_tool_source(world: world_lib.World,
                     max_chars: int = inprocess.DEFAULT_MAX_CHARS) -> inprocess.InProcessToolSource:
  """The travel tool source (schema-checked, truncated to ``max_chars``)."""
  return inprocess.InProcessToolSource(make_tools(world), max_chars=max_chars)
