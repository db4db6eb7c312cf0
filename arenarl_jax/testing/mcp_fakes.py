"""Test doubles for the MCP tests: a tiny "mcp_fake" environment and a slow, counting tool source.

``mcp_fake`` has the six travel tool names over a hand-written world of two cities, so the MCP tests
(``tests/envs/test_mcp.py``; and ``benchmarks/tools.py``, until the travel world is importable)
exercise valid calls, bad-argument and not-found errors and truncation without the real world.
Importing this module registers ``mcp_fake`` in the environment registry; the MCP server reaches it
with ``--import arenarl_jax.testing.mcp_fakes --env mcp_fake``.

``slow_source()`` answers ``wait`` after a short asyncio sleep and counts how many calls were in
progress at once; ``stats`` reports the peak and the number of calls served, so a test can check a
client's concurrency limit and cache from the server's side.
"""
from __future__ import annotations

import asyncio
import json
import os
from typing import Any, Mapping

from arenarl_jax.envs import base, inprocess

CITIES = {  # name -> points of interest (name, category, rating, price)
    "Alpha": {"pois": [("Old Museum", "attraction", 4.5, 12.0),
                       ("Blue Cafe", "restaurant", 4.1, 8.5),
                       ("Grand Hotel", "hotel", 4.7, 120.0),
                       ("Alpha Station", "station", 3.9, 0.0)]},
    "Beta": {"pois": [("Harbor Walk", "attraction", 4.2, 0.0),
                      ("Fish House", "restaurant", 4.6, 22.0)]},
}
DATES = ("2026-05-01", "2026-05-02")
MAX_WAYPOINTS = 4
MODES = ("walking", "bicycling", "driving", "transit")


def _city(city: str) -> dict[str, Any]:
  if city not in CITIES:
    raise inprocess.ToolError(base.NOT_FOUND, f"unknown city {city!r}; known: {sorted(CITIES)}")
  return CITIES[city]


def search_poi(city: str, keyword: str) -> str:
  rows = [p for p in _city(city)["pois"] if keyword.lower() in (p[0] + " " + p[1]).lower()]
  if not rows:
    return f"No places matching {keyword!r} in {city}."
  return "\n".join(f"{n} ({k}), rating {r}, price {c:.1f}" for n, k, r, c in rows)


def around_search(city: str, center: str, category: str = "restaurant") -> str:
  names = [p[0] for p in _city(city)["pois"]]
  if center not in names:
    raise inprocess.ToolError(base.NOT_FOUND, f"no place {center!r} in {city}")
  near = [p for p in _city(city)["pois"] if p[1] == category and p[0] != center]
  return "\n".join(f"{n}: {200 * (k + 1)} m" for k, (n, *_) in enumerate(near)) or "Nothing near."


def get_navigation(mode: str, waypoints: list[str]) -> str:
  legs = [f"{a} -> {b}: {len(a) + len(b)} min by {mode}" for a, b in zip(waypoints, waypoints[1:])]
  return "\n".join(legs)


def universal_search(query: str) -> str:
  # Long on purpose: the source truncates it (the tests check the note survives MCP unchanged).
  return f"Results for {query}: " + " ".join(f"tip{k}" for k in range(400))


def _timetable(kind: str, origin: str, destination: str, date: str) -> str:
  _city(origin), _city(destination)
  if date not in DATES:
    raise inprocess.ToolError(base.BAD_ARGUMENTS, f"date {date!r} outside the timetable {DATES}")
  return f"{kind} {origin}->{destination} on {date}: 08:00 (99.0), 17:30 (79.0)"


def search_flights(origin: str, destination: str, date: str) -> str:
  return _timetable("Flights", origin, destination, date)


def search_train_tickets(origin: str, destination: str, date: str) -> str:
  return _timetable("Trains", origin, destination, date)


def _obj(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
  return {"type": "object", "properties": properties, "required": required,
          "additionalProperties": False}


_S = {"type": "string", "minLength": 1}
_TRIP = _obj({"origin": _S, "destination": _S, "date": _S}, ["origin", "destination", "date"])
TOOLS = (
    inprocess.Tool("search_poi", "Find places in a city by keyword.",
                   _obj({"city": _S, "keyword": _S}, ["city", "keyword"]), search_poi),
    inprocess.Tool("around_search", "Places of a category near a place.",
                   _obj({"city": _S, "center": _S, "category": {
                       "type": "string", "enum": ["restaurant", "hotel", "attraction"]}},
                        ["city", "center"]), around_search),
    inprocess.Tool("get_navigation", "A route through ordered waypoints by one mode.",
                   _obj({"mode": {"type": "string", "enum": list(MODES)},
                         "waypoints": {"type": "array", "items": _S, "minItems": 2,
                                       "maxItems": MAX_WAYPOINTS}}, ["mode", "waypoints"]),
                   get_navigation),
    inprocess.Tool("universal_search", "Tips, weather and policies.",
                   _obj({"query": _S}, ["query"]), universal_search),
    inprocess.Tool("search_flights", "Flights between two cities on a date.", _TRIP,
                   search_flights),
    inprocess.Tool("search_train_tickets", "Trains between two cities on a date.", _TRIP,
                   search_train_tickets),
)

# One call of every kind the tests compare over MCP: valid, empty, not found, bad arguments.
CALLS: tuple[tuple[str, Any], ...] = (
    ("search_poi", {"city": "Alpha", "keyword": "cafe"}),
    ("search_poi", {"city": "Alpha", "keyword": "zoo"}),
    ("search_poi", {"city": "Gamma", "keyword": "cafe"}),
    ("search_poi", {"city": "Alpha"}),
    ("around_search", {"city": "Alpha", "center": "Grand Hotel", "category": "restaurant"}),
    ("around_search", {"city": "Alpha", "center": "Nowhere"}),
    ("get_navigation", {"mode": "walking",
                        "waypoints": ["Old Museum", "Blue Cafe", "Grand Hotel"]}),
    ("get_navigation", {"mode": "walking", "waypoints": ["a", "b", "c", "d", "e"]}),
    ("get_navigation", {"mode": "teleport", "waypoints": ["a", "b"]}),
    ("universal_search", {"query": "weather in Beta"}),
    ("universal_search", '{"query": "visa policy"}'),
    ("universal_search", "{not json"),
    ("search_flights", {"origin": "Alpha", "destination": "Beta", "date": "2026-05-01"}),
    ("search_flights", {"origin": "Alpha", "destination": "Beta", "date": "2030-01-01"}),
    ("search_train_tickets", {"origin": "Alpha", "destination": "Beta", "date": "2026-05-02",
                              "class": "first"}),
    ("search_train_tickets", {"origin": "Beta", "destination": "Alpha", "date": 20260502}),
    ("book_hotel", {"city": "Alpha"}),
)

# Valid calls of all six tools: what the fake expert makes (the benchmark's mix).
VALID_CALLS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("search_poi", {"city": "Alpha", "keyword": "cafe"}),
    ("around_search", {"city": "Alpha", "center": "Grand Hotel", "category": "restaurant"}),
    ("get_navigation", {"mode": "transit", "waypoints": ["Alpha Station", "Old Museum"]}),
    ("universal_search", {"query": "weather in Beta"}),
    ("search_flights", {"origin": "Alpha", "destination": "Beta", "date": "2026-05-01"}),
    ("search_train_tickets", {"origin": "Beta", "destination": "Alpha", "date": "2026-05-02"}),
)


def fake_source() -> inprocess.InProcessToolSource:
  return inprocess.InProcessToolSource(TOOLS, max_chars=500)


@base.register("mcp_fake")
class FakeEnvironment:
  """Enough of an Environment for tool-source tests and the tools benchmark."""

  name = "mcp_fake"
  rubric = "travel"
  subtasks = ("search",)

  def __init__(self, seed: int = 0, tool_max_chars: int = 5000,
               reference_error_rate: float = 0.3):  # envs/base.py COMMON_KEYS
    self.seed = seed

  def tasks(self, split: str) -> list[base.Task]:
    return [base.Task(id=f"mcp_fake/search/{k:06d}", env="mcp_fake", subtask="search",
                      query=f"Plan something in Alpha #{k}") for k in range(8)]

  def tool_source(self) -> inprocess.InProcessToolSource:
    return fake_source()

  def checker(self, trajectory):  # not used by the tool tests
    raise NotImplementedError

  def valid(self, answer: str) -> tuple[bool, str]:
    return (bool(answer.strip()), "" if answer.strip() else "empty answer")

  def expert(self, task: base.Task, error_rate: float, rng) -> list[dict[str, Any]]:
    """A conversation that calls every tool once, validly."""
    del error_rate, rng
    calls = VALID_CALLS
    return [{"role": "user", "content": task.query},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": f"call_0_{k}", "type": "function",
                 "function": {"name": n, "arguments": json.dumps(a)}}
                for k, (n, a) in enumerate(calls)]},
            {"role": "assistant", "content": "Done."}]


class SlowSource:
  """``wait`` sleeps ``delay_s`` and echoes its arguments; ``stats`` reports counts and the pid."""

  def __init__(self, delay_s: float = 0.05):
    self.delay_s = delay_s
    self.in_flight = self.peak = self.served = 0

  def tools(self) -> list[dict[str, Any]]:
    return [{"name": "wait", "description": "Sleeps, then echoes.",
             "parameters": {"type": "object", "properties": {"tag": {"type": "string"},
                                                             "delay_s": {"type": "number"}}}},
            {"name": "stats", "description": "Served calls and the peak in flight.",
             "parameters": {"type": "object", "properties": {}}}]

  async def call(self, name: str, arguments: Mapping[str, Any] | str | None = None, *,
                 timeout: float | None = None) -> base.ToolResult:
    if name == "stats":
      return base.ToolResult(text=json.dumps({"served": self.served, "peak": self.peak,
                                              "in_flight": self.in_flight, "pid": os.getpid()}))
    if name != "wait":
      return base.ToolResult(text=f"Error: unknown tool {name!r}", ok=False,
                             error_kind=base.UNKNOWN_TOOL)
    self.in_flight += 1
    self.peak = max(self.peak, self.in_flight)
    try:
      await asyncio.sleep(float((arguments or {}).get("delay_s", self.delay_s)))
    finally:
      self.in_flight -= 1
    self.served += 1
    return base.ToolResult(text=f"waited {json.dumps(arguments, sort_keys=True)}")


def slow_source() -> SlowSource:
  return SlowSource()
