"""The six travel tools: valid calls (hand-checked against the world), every bad-argument kind,
no results, the waypoint limit and truncation."""
from __future__ import annotations

import itertools
import math
import re

import pytest

from arenarl_jax.envs import base
from arenarl_jax.envs.travel import tools
from arenarl_jax.envs.travel import world as world_lib


@pytest.fixture(scope="module")
def world():
  return world_lib.make_world(0)


@pytest.fixture(scope="module")
def source(world):
  return tools.make_tool_source(world)


def _ok(source, name, args):
  r = source.call_sync(name, args)
  assert r.ok and r.error_kind is None, r.text
  return r.text


def _err(source, name, args, kind, needle):
  r = source.call_sync(name, args)
  assert not r.ok and r.error_kind == kind, r
  assert needle in r.text, r.text
  return r.text


def test_schemas_are_the_six_paper_tools(source):
  names = [t["name"] for t in source.tools()]
  assert names == ["search_poi", "around_search", "get_navigation", "universal_search",
                   "search_flights", "search_train_tickets"]
  for t in source.tools():
    assert t["parameters"]["type"] == "object" and t["parameters"]["additionalProperties"] is False
    assert set(t["parameters"]["required"]) <= set(t["parameters"]["properties"])
    assert t["description"]


def test_search_poi(world, source):
  city = world.cities[0]
  museums = sorted((p for p in world.pois[city.name] if p.category == "museum"),
                   key=lambda p: (-p.rating, p.name))
  text = _ok(source, "search_poi", {"city": city.name.upper(), "keyword": "Museum"})
  lines = text.splitlines()
  assert lines[0] == f"4 place(s) in {city.name} matching 'Museum':"
  assert lines[1:] == [f"{k + 1}. {tools.poi_line(p)}" for k, p in enumerate(museums)]
  target = museums[-1]
  first = _ok(source, "search_poi", {"city": city.name, "keyword": target.name}).splitlines()[1]
  assert first.startswith(f"1. {target.name} | attraction/museum | rating {target.rating}")
  assert f"ticket ¥{target.price}" in first or target.price == 0
  for plural in ("museums", "MUSEUMS"):  # plural and case-insensitive keywords
    assert _ok(source, "search_poi", {"city": city.name, "keyword": plural}).splitlines()[1:] \
        == lines[1:]
  galleries = _ok(source, "search_poi", {"city": city.name, "keyword": "galleries"})
  assert galleries.splitlines()[0].startswith("4 place(s)")
  many = _ok(source, "search_poi", {"city": city.name, "keyword": "attraction"})
  assert many.splitlines()[0].endswith("showing 10:") and len(many.splitlines()) == 11


def test_around_search_is_sorted_and_within_radius(world, source):
  city = world.cities[1]
  hotel = next(p for p in world.pois[city.name] if p.kind == "hotel")
  text = _ok(source, "around_search", {"city": city.name, "location": hotel.name,
                                       "keyword": "restaurant", "radius": 8000})
  dists = [int(m) for m in re.findall(r"\| (\d+) m away$", text, re.M)]
  assert dists == sorted(dists) and all(d <= 8000 for d in dists) and dists
  expected = sum(1 for p in world.pois[city.name] if p.kind == "restaurant" and
                 world_lib.distance_km(hotel.lat, hotel.lng, p.lat, p.lng) * 1000 <= 8000)
  assert len(dists) == min(expected, tools.MAX_RESULTS)
  # "lng,lat" centres work like names; the default radius is 3,000 m.
  by_coords = source.call_sync("around_search", {"city": city.name, "location": hotel.location,
                                                 "keyword": "restaurant", "radius": 8000})
  assert by_coords.text.splitlines()[1:] == text.splitlines()[1:]
  default = source.call_sync("around_search", {"city": city.name, "location": hotel.name,
                                               "keyword": "restaurant"})
  assert "within 3000 m" in default.text


def test_get_navigation_matches_the_travel_model(world, source):
  city = world.cities[2]
  a, b, c = world.pois[city.name][0], world.pois[city.name][20], world.pois[city.name][40]
  text = _ok(source, "get_navigation", {"city": city.name, "mode": "driving",
                                        "waypoints": [a.name, b.name, c.name]})
  # Hand-worked leg a -> b: haversine x detour 1.4, 32 km/h + 5 min, ¥10 + ¥2.6/km.
  km = round(world_lib.distance_km(a.lat, a.lng, b.lat, b.lng) * 1.4, 1)
  minutes = int(round(km / 32 * 60)) + 5
  cost = int(round(10 + 2.6 * km))
  assert text.splitlines()[1] == f"1. {a.name} -> {b.name}: {km} km, {minutes} min, ¥{cost}"
  legs = world.route([a, b, c], "driving")
  assert text.splitlines()[-1] == (f"Total: {round(sum(x.km for x in legs), 1)} km, "
                                   f"{sum(x.minutes for x in legs)} min, "
                                   f"¥{sum(x.cost for x in legs)}")
  modes = {}
  for mode in world_lib.MODES:
    t = _ok(source, "get_navigation", {"city": city.name, "mode": mode,
                                       "waypoints": [a.name, b.name]})
    modes[mode] = int(re.search(r"Total: [\d.]+ km, (\d+) min", t).group(1))
  assert modes["walking"] > modes["bicycling"] > modes["transit"] > modes["driving"]


def test_waypoint_limit(world, source):
  city = world.cities[0]
  names = [p.name for p in world.pois[city.name]]
  _ok(source, "get_navigation", {"city": city.name, "mode": "walking",
                                 "waypoints": names[:tools.MAX_WAYPOINTS]})
  _err(source, "get_navigation", {"city": city.name, "mode": "walking",
                                   "waypoints": names[:tools.MAX_WAYPOINTS + 1]},
       base.BAD_ARGUMENTS, "'waypoints' allows at most 16 items, got 17")
  _err(source, "get_navigation", {"city": city.name, "mode": "walking", "waypoints": names[:1]},
       base.BAD_ARGUMENTS, "needs at least 2 items")


def test_universal_search(world, source):
  city = world.cities[3].name
  doc = world.weather_doc(city, world_lib.DATES[4])
  text = _ok(source, "universal_search", {"query": f"weather {city} {world_lib.DATES[4]}"})
  assert text.splitlines()[0] == f"[1] {doc.title}: {doc.text}" and len(text.splitlines()) == 3
  policy = _ok(source, "universal_search", {"query": "train luggage policy"})
  assert policy.startswith("[1] Train luggage policy: ")


def test_flights_and_trains(world, source):
  a, b = world.cities[0].name, world.cities[1].name
  date = world_lib.DATES[2]
  for tool, kind in (("search_flights", "flight"), ("search_train_tickets", "train")):
    deps = world.departures(kind, a, b, date)
    assert deps
    text = _ok(source, tool, {"date": date, "from_city": a, "to_city": b})
    lines = text.splitlines()
    assert len(lines) == len(deps) + 1 and f"from {a} to {b} on {date}" in lines[0]
    for line, d in zip(lines[1:], deps):
      assert line.startswith(f"{d.number} | {d.origin} {world_lib.clock(d.depart_min)} -> ")
      assert f"| {d.minutes} min | " in line and f"¥{d.price}" in line
    assert [d.depart_min for d in deps] == sorted(d.depart_min for d in deps)


def test_no_results_are_errors_not_empty_successes(world, source):
  city = world.cities[0]
  _err(source, "search_poi", {"city": city.name, "keyword": "zzzz"}, base.NOT_FOUND,
       f"no place in {city.name} matches 'zzzz'")
  p = world.pois[city.name][0]
  _err(source, "around_search", {"city": city.name, "location": p.name, "keyword": "airport",
                                 "radius": 100}, base.NOT_FOUND, "try a larger radius")
  _err(source, "universal_search", {"query": "qqqq xxxx"}, base.NOT_FOUND, "nothing found")
  pairs = list(itertools.permutations(world.cities, 2))
  close = next((a, b) for a, b in pairs if world_lib.distance_km(a.lat, a.lng, b.lat, b.lng) < 300)
  far = next((a, b) for a, b in pairs if world_lib.distance_km(a.lat, a.lng, b.lat, b.lng) > 1600)
  date = world_lib.DATES[0]
  _err(source, "search_flights", {"date": date, "from_city": close[0].name,
                                  "to_city": close[1].name}, base.NOT_FOUND, "too close to fly")
  _err(source, "search_train_tickets", {"date": date, "from_city": far[0].name,
                                        "to_city": far[1].name}, base.NOT_FOUND, "no rail link")


@pytest.mark.parametrize("name, args, kind, needle", [
    ("search_poi", {"keyword": "museum"}, base.BAD_ARGUMENTS, "missing required argument(s)"),
    ("search_poi", {"city": "X", "keyword": "m", "page": 2}, base.BAD_ARGUMENTS, "not accepted"),
    ("search_poi", {"city": 5, "keyword": "m"}, base.BAD_ARGUMENTS, "'city' must be string"),
    ("search_poi", {"city": "Atlantis", "keyword": "m"}, base.NOT_FOUND, "unknown city"),
    ("around_search", {"city": "{c}", "location": "Nowhere Plaza", "keyword": "park"},
     base.NOT_FOUND, "no place named 'Nowhere Plaza'"),
    ("around_search", {"city": "{c}", "location": "200,95", "keyword": "park"},
     base.BAD_ARGUMENTS, "not a valid"),
    ("around_search", {"city": "{c}", "location": "{p}", "keyword": "park", "radius": 50},
     base.BAD_ARGUMENTS, "'radius' must be >= 100"),
    ("around_search", {"city": "{c}", "location": "{p}", "keyword": "park", "radius": "5 km"},
     base.BAD_ARGUMENTS, "'radius' must be integer"),
    ("get_navigation", {"city": "{c}", "mode": "flying", "waypoints": ["{p}", "{p}"]},
     base.BAD_ARGUMENTS, "'mode' must be one of"),
    ("get_navigation", {"city": "{c}", "mode": "driving", "waypoints": "{p};{p}"},
     base.BAD_ARGUMENTS, "'waypoints' must be array"),
    ("get_navigation", {"city": "{c}", "mode": "driving", "waypoints": ["{p}", "Ghost Hall"]},
     base.NOT_FOUND, "no place named 'Ghost Hall'"),
    ("universal_search", {"query": ""}, base.BAD_ARGUMENTS, "'query' must not be empty"),
    ("search_flights", {"date": "2026/05/03", "from_city": "{c}", "to_city": "{d}"},
     base.BAD_ARGUMENTS, "must be YYYY-MM-DD"),
    ("search_flights", {"date": "2026-07-01", "from_city": "{c}", "to_city": "{d}"},
     base.BAD_ARGUMENTS, "outside the timetable (2026-05-01 to 2026-05-30)"),
    ("search_flights", {"date": "2026-05-03", "from_city": "{c}"}, base.BAD_ARGUMENTS,
     "'to_city'"),
    ("search_train_tickets", {"date": "2026-04-30", "from_city": "{c}", "to_city": "{d}"},
     base.BAD_ARGUMENTS, "outside the timetable"),
    ("search_train_tickets", {"date": "2026-05-03", "from_city": "{c}", "to_city": "{c}"},
     base.BAD_ARGUMENTS, "the same city"),
    ("search_train_tickets", {"date": "2026-05-03", "from_city": "{c}", "to_city": "Oz"},
     base.NOT_FOUND, "unknown city 'Oz'"),
    ("get_weather", {"city": "{c}"}, base.UNKNOWN_TOOL, "available tools"),
])
def test_bad_arguments(world, source, name, args, kind, needle):
  c, d = world.cities[0].name, world.cities[1].name
  p = world.pois[c][0].name

  def fill(v):
    if isinstance(v, str):
      return v.replace("{c}", c).replace("{d}", d).replace("{p}", p)
    return [fill(x) for x in v] if isinstance(v, list) else v

  _err(source, name, {k: fill(v) for k, v in args.items()}, kind, needle)


def test_truncation(world):
  small = tools.make_tool_source(world, max_chars=120)
  r = small.call_sync("search_poi", {"city": world.cities[0].name, "keyword": "hotel"})
  assert r.ok and len(r.text) < 170
  m = re.search(r"\n\.\.\.\[truncated: (\d+) more characters\]$", r.text)
  full = tools.make_tool_source(world).call_sync("search_poi", {
      "city": world.cities[0].name, "keyword": "hotel"}).text
  assert m and int(m.group(1)) == len(full) - 120 and r.text.startswith(full[:120])


def test_world_scale(world):
  assert len(world.cities) >= 20 and len(world_lib.DATES) >= 30
  for city in world.cities:
    pois = world.pois[city.name]
    assert len(pois) >= 40 and {p.kind for p in pois} == set(world_lib.KINDS)
    assert len({p.name for p in pois}) == len(pois) and len({p.address for p in pois}) == len(pois)
    assert all(3.0 <= p.rating <= 5.0 and p.open_min < p.close_min for p in pois)
  assert math.isclose(world_lib.distance_km(0, 0, 0, 1), 111.19, rel_tol=1e-3)
