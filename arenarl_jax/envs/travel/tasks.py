"""Travel tasks for the five subtasks, with explicit constraints and varied natural wording.

Subtasks (names used in task ids ``travel/<subtask>/<index:06d>``):

- ``search``: places of a category near a landmark, with radius, rating and price limits.
- ``direction``: a multi-waypoint route by one mode, with a start time, stops and a deadline.
- ``compare``: the transport modes between two places, under a cost cap and a time cap.
- ``one_day``: a one-day city plan (two attractions, lunch, transit) for a party, with limits.
- ``multi_day``: a multi-day trip to another city (trains/flights, hotel, sights, return).

Every task also asks one or two side questions answered by ``universal_search`` (weather, tips,
policies). Tasks are drawn from ``np.random.default_rng([seed, subtask, index])`` and kept only if
their ground truth is unambiguous and has a constraint-breaking alternative (the expert's
``break_constraint`` errors need one); train indices are ``0..TRAIN_PER_SUBTASK-1``, test indices
start at ``TEST_OFFSET`` and test tasks whose constraints equal a train task's are skipped.
Validation tasks (``valid_<subtask>``, as many as the test split has, for choosing settings so
that the test tasks are used once) start at ``VALID_OFFSET`` and skip any task whose constraints
equal a train or test task's; adding them changed no test task.
"""
from __future__ import annotations

import functools
import json
from typing import Any

import numpy as np

from arenarl_jax.envs import base
from arenarl_jax.envs import settings as env_settings
from arenarl_jax.envs.travel import truth as truth_lib
from arenarl_jax.envs.travel import world as world_lib

SUBTASKS = ("search", "direction", "compare", "one_day", "multi_day")
SFT_EXCLUDED = ("multi_day",)  # held out of SFT data as a generalization test
TRAIN_PER_SUBTASK = env_settings.TravelSettings.train_per_subtask  # env.travel's defaults
TEST_PER_SUBTASK = env_settings.TravelSettings.test_per_subtask
TEST_OFFSET = 900000
VALID_OFFSET = 800000
ENV_NAME = "travel"


def plural(word: str) -> str:
  return word[:-1] + "ies" if word.endswith("y") else word + "s"


def _pick(rng: np.random.Generator, items):
  return items[int(rng.integers(len(items)))]


def _info(rng: np.random.Generator, w: world_lib.World, city: str, date: str) -> tuple[str, str]:
  """(doc title, the question asking for it)."""
  kind = int(rng.integers(3))
  if kind == 0:
    return w.weather_doc(city, date).title, _pick(rng, (
        f"What's the weather forecast for {city} on {date}?",
        f"Also tell me the weather in {city} on {date}.",
        f"How will the weather be in {city} on {date}?"))
  doc = w.city_docs(city)[kind - 1]
  if kind == 1:
    return doc.title, _pick(rng, (f"Any advice on getting around {city} by public transport?",
                                  f"How do I get around {city} (metro, passes)?"))
  return doc.title, _pick(rng, (f"Any visiting tips for {city}?",
                                f"Do you have visiting tips for sights in {city}?"))


def _search(rng: np.random.Generator, w: world_lib.World) -> dict[str, Any] | None:
  city = _pick(rng, w.cities).name
  landmark = _pick(rng, [p for p in w.pois[city] if p.kind in ("attraction", "hotel", "station")])
  kind = "restaurant" if rng.random() < 0.6 else "attraction"
  category = _pick(rng, list(world_lib.CUISINES if kind == "restaurant" else
                             world_lib.ATTRACTIONS))
  c = dict(city=city, landmark=landmark.name, kind=kind, category=category,
           radius=int(rng.integers(6, 25)) * 500, min_rating=round(float(rng.uniform(3.4, 4.3)), 1),
           max_price=int(rng.integers(6, 25)) * 5 if kind == "restaurant" else
           int(_pick(rng, (30, 40, 50, 60, 80))), count=2, date=_pick(rng, world_lib.DATES))
  c["info"], info_q = _info(rng, w, city, c["date"])
  price = (f"at most ¥{c['max_price']} per person" if kind == "restaurant" else
           f"tickets at most ¥{c['max_price']}")
  what = f"{category} restaurants" if kind == "restaurant" else plural(category)
  c["query"] = _pick(rng, (
      f"I'm staying near {landmark.name} in {city} on {c['date']}. Recommend {c['count']} {what} "
      f"within {c['radius']} m of it, rated at least {c['min_rating']}, {price}. Where exactly is "
      f"{landmark.name}? {info_q}",
      f"Find me {c['count']} {what} no more than {c['radius']} m from {landmark.name} ({city}). "
      f"They should have a rating of {c['min_rating']} or more and {price}. Please include the "
      f"address of {landmark.name} too. {info_q}",
      f"In {city}, which {what} within {c['radius']} m of {landmark.name} are rated "
      f"{c['min_rating']}+ with {price}? Give me {c['count']}, plus the address of "
      f"{landmark.name}. {info_q}"))
  return c


def _direction(rng: np.random.Generator, w: world_lib.World) -> dict[str, Any] | None:
  city = _pick(rng, w.cities).name
  n = int(rng.integers(3, 6))
  pois = [p for p in w.pois[city] if p.kind in ("attraction", "restaurant", "hotel")]
  stops = [pois[int(k)] for k in rng.choice(len(pois), size=n, replace=False)]
  mode = _pick(rng, world_lib.MODES)
  if mode == "walking" and n > 3:
    mode = "transit"
  c = dict(city=city, mode=mode, waypoints=[p.name for p in stops],
           start=int(rng.integers(16, 24)) * 30, stay=int(_pick(rng, (20, 30, 45, 60))),
           date=_pick(rng, world_lib.DATES), detail_stop=stops[1].name)
  legs = w.route(stops, mode)
  arrival = c["start"] + sum(leg.minutes for leg in legs) + c["stay"] * (n - 2)
  c["deadline"] = (arrival + int(rng.integers(2, 7)) * 5 + 4) // 5 * 5
  c["info"], info_q = _info(rng, w, city, c["date"])
  via = ", then ".join(p.name for p in stops[1:-1])
  start, deadline = world_lib.clock(c["start"]), world_lib.clock(c["deadline"])
  c["query"] = _pick(rng, (
      f"In {city}, I leave {stops[0].name} at {start} by {mode}, visit {via}, and must reach "
      f"{stops[-1].name} by {deadline}. I'll spend {c['stay']} minutes at each stop. Plan the "
      f"route with times, and tell me the opening hours of {stops[1].name}. {info_q}",
      f"Route by {mode} in {city}: start at {stops[0].name} ({start}), stops in this order: "
      f"{via}, finish at {stops[-1].name} no later than {deadline}; {c['stay']} minutes per stop. "
      f"When is {stops[1].name} open? {info_q}",
      f"Please plan my {mode} trip through {city}: {stops[0].name} -> {via} -> "
      f"{stops[-1].name}, departing {start}, {c['stay']} min at every stop, arriving by "
      f"{deadline}. Also, what are {stops[1].name}'s opening hours? {info_q}"))
  return c


def _compare(rng: np.random.Generator, w: world_lib.World) -> dict[str, Any] | None:
  city = _pick(rng, w.cities).name
  pois = [p for p in w.pois[city] if p.kind != "airport"]
  a, b = (pois[int(k)] for k in rng.choice(len(pois), size=2, replace=False))
  legs = {m: w.leg(a, b, m) for m in world_lib.MODES}
  if not 2 <= legs["driving"].km <= 20:
    return None
  c = dict(city=city, origin=a.name, destination=b.name, modes=list(world_lib.MODES),
           max_minutes=legs["transit"].minutes + int(rng.integers(0, 16)),
           max_cost=int(rng.integers(legs["transit"].cost, max(legs["driving"].cost,
                                                               legs["transit"].cost + 1))),
           date=_pick(rng, world_lib.DATES))
  c["info"], info_q = _info(rng, w, city, c["date"])
  c["query"] = _pick(rng, (
      f"In {city}, how should I get from {a.name} to {b.name}? Compare walking, bicycling, "
      f"driving and transit. I can spend at most ¥{c['max_cost']} and {c['max_minutes']} "
      f"minutes. {info_q}",
      f"Compare all four ways (walking, bicycling, driving, transit) from {a.name} to {b.name} "
      f"in {city}; my limits are ¥{c['max_cost']} and {c['max_minutes']} minutes. Which one do "
      f"you recommend? {info_q}",
      f"{a.name} to {b.name} ({city}): which transport mode is fastest while costing no more "
      f"than ¥{c['max_cost']} and taking under {c['max_minutes']} minutes? Show each mode's "
      f"time and cost. {info_q}"))
  return c


def _one_day(rng: np.random.Generator, w: world_lib.World) -> dict[str, Any] | None:
  city = _pick(rng, w.cities).name
  hotel = _pick(rng, [p for p in w.pois[city] if p.kind == "hotel"])
  c = dict(city=city, date=_pick(rng, world_lib.DATES), party=int(rng.integers(1, 5)),
           hotel=hotel.name, category=_pick(rng, list(world_lib.ATTRACTIONS)),
           cuisine=_pick(rng, list(world_lib.CUISINES)),
           max_ticket=int(_pick(rng, (30, 40, 50, 60, 80))), max_meal=int(rng.integers(10, 25)) * 5,
           min_rating=round(float(rng.uniform(3.2, 4.0)), 1), start=9 * 60, budget=0)
  c["info"], c["info_question"] = _info(rng, w, city, c["date"])
  return c


def _multi_day(rng: np.random.Generator, w: world_lib.World) -> dict[str, Any] | None:
  a, b = (w.cities[int(k)] for k in rng.choice(len(w.cities), size=2, replace=False))
  nights = int(rng.integers(2, 4))
  day = int(rng.integers(0, world_lib.NUM_DATES - nights))
  c = dict(origin=a.name, destination=b.name, date=world_lib.DATES[day], nights=nights,
           return_date=world_lib.DATES[day + nights], party=int(rng.integers(1, 4)),
           earliest=int(rng.integers(14, 25)) * 30, return_earliest=int(rng.integers(26, 34)) * 30,
           hotel_max=int(rng.integers(30, 100)) * 10, hotel_min_rating=round(
               float(rng.uniform(3.2, 4.0)), 1),
           category=_pick(rng, list(world_lib.ATTRACTIONS)), budget=0)
  policy = _pick(rng, w.policy_docs())
  c["info"] = w.weather_doc(b.name, c["date"]).title
  c["policy"] = policy.title
  return c


_MAKERS = {"search": _search, "direction": _direction, "compare": _compare, "one_day": _one_day,
           "multi_day": _multi_day}


def _finish(rng: np.random.Generator, w: world_lib.World, subtask: str,
            c: dict[str, Any]) -> dict[str, Any] | None:
  """Checks the ground truth; fills budgets and the wording of the plan subtasks."""
  try:
    gt = truth_lib.derive(w, subtask, c)
  except truth_lib.Unusable:
    return None
  if subtask == "one_day":
    c["budget"] = gt.budget
    start = world_lib.clock(c["start"])
    who = "me" if c["party"] == 1 else f"the {c['party']} of us"
    info_q = c.pop("info_question")
    c["query"] = _pick(rng, (
        f"Plan a day in {c['city']} on {c['date']} for {who}, starting from {c['hotel']} at "
        f"{start}: two {plural(c['category'])} (tickets at most ¥{c['max_ticket']}, rated "
        f"{c['min_rating']}+), lunch at a {c['cuisine']} restaurant (at most ¥{c['max_meal']} per "
        f"person), by transit, back to the hotel. Total budget ¥{c['budget']}. What's the hotel's "
        f"address? {info_q}",
        f"One-day trip in {c['city']} ({c['date']}), party of {c['party']}, from {c['hotel']} at "
        f"{start}. I'd like to see two {plural(c['category'])} rated at least {c['min_rating']} "
        f"with tickets up to ¥{c['max_ticket']}, and eat {c['cuisine']} for lunch for no more "
        f"than ¥{c['max_meal']} a head. We use public transit and must stay within "
        f"¥{c['budget']} in total. Include the address of {c['hotel']}. {info_q}"))
  elif subtask == "multi_day":
    c["budget"] = gt.budget
    dep, ret = world_lib.clock(c["earliest"]), world_lib.clock(c["return_earliest"])
    policy_q = f"And what is the {c['policy'].lower()}?"
    weather_q = f"What's the weather in {c['destination']} on {c['date']}?"
    who = "I" if c["party"] == 1 else f"{c['party']} of us"
    people = "one person" if c["party"] == 1 else f"{c['party']} people"
    c["query"] = _pick(rng, (
        f"Plan a {c['nights'] + 1}-day trip from {c['origin']} to {c['destination']} for "
        f"{people}, leaving {c['date']} (not before {dep}) and coming back by train "
        f"on {c['return_date']} (departing {ret} or later). Compare trains and flights for the "
        f"outbound trip. Hotel at most ¥{c['hotel_max']} per night, rated "
        f"{c['hotel_min_rating']}+. We love {plural(c['category'])}. Total budget "
        f"¥{c['budget']}. {weather_q} {policy_q}",
        f"{who} want to go from {c['origin']} to {c['destination']} on {c['date']} "
        f"(departure {dep} or later; train or plane, whichever is cheaper) and return by train on "
        f"{c['return_date']} after {ret}. Find a hotel rated at least {c['hotel_min_rating']} for "
        f"no more than ¥{c['hotel_max']} a night and some {plural(c['category'])} to visit; "
        f"budget ¥{c['budget']} overall. {weather_q} {policy_q}"))
  return c


@functools.lru_cache(maxsize=64)
def make_task(seed: int, subtask: str, index: int) -> base.Task:
  """Task ``index`` of ``subtask`` for world ``seed`` (rejection-sampled, deterministic)."""
  if subtask not in _MAKERS:
    raise ValueError(f"unknown travel subtask {subtask!r}; expected one of {SUBTASKS}")
  w = world_lib.make_world(seed)
  for attempt in range(1000):
    rng = np.random.default_rng([seed, 10 + SUBTASKS.index(subtask), index, attempt])
    c = _MAKERS[subtask](rng, w)
    if c is not None and (c := _finish(rng, w, subtask, c)) is not None:
      query = c.pop("query")
      return base.Task(id=f"{ENV_NAME}/{subtask}/{index:06d}", env=ENV_NAME, subtask=subtask,
                       query=query, constraints=c)
  raise RuntimeError(f"no usable {subtask} task for seed {seed}, index {index}")


_BY_ID: dict[tuple[int, str], base.Task] = {}  # every task a split of this process has built


def _key(task: base.Task) -> str:
  return json.dumps(task.constraints, sort_keys=True)


def make_split(seed: int, split: str, train_per_subtask: int = TRAIN_PER_SUBTASK,
               test_per_subtask: int = TEST_PER_SUBTASK) -> tuple[base.Task, ...]:
  """``train`` (all subtasks), ``sft`` (train without M-Day), ``test_<subtask>`` or
  ``valid_<subtask>``; cached."""
  return _split(int(seed), split, int(train_per_subtask), int(test_per_subtask))


@functools.lru_cache(maxsize=16)
def _split(seed: int, split: str, train_per_subtask: int,
           test_per_subtask: int) -> tuple[base.Task, ...]:
  if split == "sft":
    return tuple(t for t in _split(seed, "train", train_per_subtask, test_per_subtask)
                 if t.subtask not in SFT_EXCLUDED)
  if split == "train":
    out = tuple(make_task.__wrapped__(seed, s, k) for s in SUBTASKS
                for k in range(train_per_subtask))
    _BY_ID.update(((seed, t.id), t) for t in out)
    return out
  kind, _, sub = split.partition("_")
  if kind not in ("test", "valid") or sub not in SUBTASKS:
    raise ValueError(f"unknown split {split!r}; expected train, sft, test_<subtask> or "
                     f"valid_<subtask> with subtask in {SUBTASKS}")
  taken = {_key(t) for t in _split(seed, "train", train_per_subtask, test_per_subtask)
           if t.subtask == sub}
  if kind == "valid":
    taken |= {_key(t) for t in _split(seed, f"test_{sub}", train_per_subtask, test_per_subtask)}
  out: list[base.Task] = []
  index = TEST_OFFSET if kind == "test" else VALID_OFFSET
  while len(out) < test_per_subtask:
    task = make_task.__wrapped__(seed, sub, index)
    if _key(task) not in taken:
      out.append(task)
      if kind == "valid":  # no two validation tasks alike (the test split keeps its own rule)
        taken.add(_key(task))
    index += 1
  _BY_ID.update(((seed, t.id), t) for t in out)
  return tuple(out)


def task_by_id(seed: int, task_id: str) -> base.Task:
  """The task with id ``travel/<subtask>/<index>`` (re-derived from the seed)."""
  parts = task_id.split("/") if isinstance(task_id, str) else []
  if len(parts) != 3 or parts[0] != ENV_NAME or parts[1] not in SUBTASKS or not parts[2].isdigit():
    raise ValueError(f"task_id {task_id!r} is not of the form travel/<subtask>/<index> with "
                     f"subtask in {SUBTASKS}")
  hit = _BY_ID.get((seed, task_id))
  return hit if hit is not None else make_task(seed, parts[1], int(parts[2]))
