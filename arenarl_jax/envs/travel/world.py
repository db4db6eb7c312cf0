"""The offline travel world: cities, points of interest, travel model, timetables and a text corpus.

Everything is generated from one integer seed with numpy (no downloads), so the same seed gives the
same world in every process. Sizes: ``NUM_CITIES`` cities with coordinates; per city 20 attractions
(5 categories x 4), 16 restaurants (4 cuisines x 4), 8 hotels, 3 railway stations and 2 airports
(49 POIs), each with category, coordinates, rating, opening hours, price and an address; a travel
time/cost model per mode; flight and train timetables for every city pair over ``DATES`` (generated
on first use per (pair, date) and cached); and a corpus of weather forecasts, city tips and travel
policies for ``universal_search``. :func:`make_world` caches one world per seed in-process.
"""
from __future__ import annotations

import dataclasses
import datetime
import functools
import math
import re
from typing import Sequence

import numpy as np

NUM_CITIES = 24
FIRST_DATE = datetime.date(2026, 5, 1)
NUM_DATES = 30
DATES = tuple((FIRST_DATE + datetime.timedelta(days=k)).isoformat() for k in range(NUM_DATES))
MODES = ("walking", "bicycling", "driving", "transit")

ATTRACTIONS = {"museum": "Museum", "park": "Park", "temple": "Temple", "gallery": "Gallery",
               "market": "Market"}
CUISINES = {"noodles": "Noodle House", "seafood": "Seafood", "hotpot": "Hotpot",
            "vegetarian": "Vegetarian Kitchen"}
HOTELS = {"budget": "Inn", "business": "Hotel", "luxury": "Grand Hotel"}
KINDS = ("attraction", "restaurant", "hotel", "station", "airport")

_SYLLABLES = ("ar", "bel", "cor", "dan", "el", "fen", "gar", "hal", "is", "jor", "kel", "lun",
              "mar", "nor", "os", "pel", "quin", "ros", "sal", "tor", "ul", "ven", "wen", "zar")
_ADJ = ("Jade", "Golden", "Silver", "Red", "Blue", "Old", "Eastern", "Western", "Quiet", "Bright",
        "Grand", "Hidden", "Royal", "Green", "Misty", "Sunny", "Crystal", "Amber", "Cedar", "Coral")
_NOUN = ("Lotus", "Dragon", "Harbor", "River", "Lantern", "Willow", "Pine", "Crane", "Stone",
         "Bridge", "Garden", "Moon", "Maple", "Phoenix", "Cloud", "Bamboo", "Orchid", "Tiger",
         "Lake", "Summit")
STREETS = ("Road", "Street", "Avenue", "Lane")
_WEATHER = ("sunny", "cloudy", "light rain", "showers", "overcast", "clear")

# Speed (km/h), fixed minutes (waiting, parking), cost base and per km (yuan), route detour factor.
_SPEED = {"walking": 4.8, "bicycling": 14.0, "driving": 32.0, "transit": 22.0}
_FIXED_MIN = {"walking": 0, "bicycling": 2, "driving": 5, "transit": 8}
_COST = {"walking": (0.0, 0.0), "bicycling": (1.5, 0.0), "driving": (10.0, 2.6),
         "transit": (2.0, 0.25)}
_DETOUR = {"walking": 1.25, "bicycling": 1.3, "driving": 1.4, "transit": 1.35}


@dataclasses.dataclass(frozen=True)
class City:
  name: str
  lat: float
  lng: float


@dataclasses.dataclass(frozen=True)
class Poi:
  """One place. ``price``: ticket (attraction), average per person (restaurant), per night
  (hotel), 0 for stations and airports. Hours are minutes after midnight."""

  name: str
  city: str
  kind: str
  category: str
  lat: float
  lng: float
  rating: float
  open_min: int
  close_min: int
  price: int
  address: str

  @property
  def location(self) -> str:
    return f"{self.lng:.4f},{self.lat:.4f}"

  @property
  def hours(self) -> str:
    return f"{clock(self.open_min)}-{clock(self.close_min)}"


@dataclasses.dataclass(frozen=True)
class Leg:
  origin: str
  destination: str
  km: float
  minutes: int
  cost: int


@dataclasses.dataclass(frozen=True)
class Departure:
  """One flight or train: ``number``, stations/airports, clock minutes, duration and fares."""

  number: str
  origin: str
  destination: str
  depart_min: int
  arrive_min: int
  fares: tuple[tuple[str, int], ...]  # (class, yuan), cheapest first

  @property
  def minutes(self) -> int:
    return self.arrive_min - self.depart_min

  @property
  def price(self) -> int:
    return self.fares[0][1]


@dataclasses.dataclass(frozen=True)
class Doc:
  """One ``universal_search`` document; ``key`` is a phrase an answer using it would contain."""

  title: str
  text: str
  key: str


def clock(minutes: int) -> str:
  """``HH:MM``; times past midnight get " (+1 day)"."""
  day, minutes = divmod(minutes, 24 * 60)
  return f"{minutes // 60:02d}:{minutes % 60:02d}" + (" (+1 day)" if day else "")


def tokens(text: str) -> list[str]:
  return re.findall(r"[a-z0-9]+(?:-[0-9]+)*", text.lower())


def distance_km(lat1: float, lng1: float, lat2: float, lng2: float) -> float:
  """Great-circle distance (haversine), kilometres."""
  p1, p2 = math.radians(lat1), math.radians(lat2)
  dp, dl = p2 - p1, math.radians(lng2 - lng1)
  h = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
  return 2 * 6371.0 * math.asin(min(1.0, math.sqrt(h)))


class World:
  """The deterministic world for one seed (read-only after construction)."""

  def __init__(self, seed: int):
    self.seed = int(seed)
    rng = np.random.default_rng([self.seed, 1])
    self.cities = self._make_cities(rng)
    self.city_by_key = {c.name.lower(): c for c in self.cities}
    self.city_index = {c.name: k for k, c in enumerate(self.cities)}
    self.pois: dict[str, tuple[Poi, ...]] = {}
    self.poi_by_key: dict[tuple[str, str], Poi] = {}
    for k, city in enumerate(self.cities):
      pois = self._make_pois(np.random.default_rng([self.seed, 2, k]), city)
      self.pois[city.name] = pois
      for p in pois:
        self.poi_by_key[(city.name.lower(), p.name.lower())] = p
    self.docs = self._make_docs(np.random.default_rng([self.seed, 3]))
    self.doc_by_title = {d.title: d for d in self.docs}
    self.doc_index: dict[str, list[int]] = {}
    for k, doc in enumerate(self.docs):
      for t in set(tokens(doc.title + " " + doc.text)):
        self.doc_index.setdefault(t, []).append(k)

  # -- construction ---------------------------------------------------------------------------
  @staticmethod
  def _make_cities(rng: np.random.Generator) -> tuple[City, ...]:
    names: list[str] = []
    while len(names) < NUM_CITIES:
      parts = rng.choice(len(_SYLLABLES), size=int(rng.integers(2, 4)), replace=False)
      name = "".join(_SYLLABLES[p] for p in parts).capitalize()
      if name not in names and len(name) >= 4:
        names.append(name)
    return tuple(City(n, round(float(rng.uniform(22, 45)), 4), round(float(rng.uniform(100, 124)),
                                                                       4)) for n in names)

  @staticmethod
  def _make_pois(rng: np.random.Generator, city: City) -> tuple[Poi, ...]:
    pairs = rng.permutation(len(_ADJ) * len(_NOUN))
    numbers = iter(int(x) + 1 for x in rng.permutation(400))
    used = iter(pairs)
    specs = ([("attraction", c, s) for c, s in ATTRACTIONS.items() for _ in range(4)]
             + [("restaurant", c, s) for c, s in CUISINES.items() for _ in range(4)]
             + [("hotel", c, s) for c, s in HOTELS.items() for _ in range(3)][:8])
    out: list[Poi] = []
    for kind, category, suffix in specs:
      n = int(next(used))
      out.append(_poi(rng, city, f"{_ADJ[n // len(_NOUN)]} {_NOUN[n % len(_NOUN)]} {suffix}",
                      kind, category, next(numbers)))
    for direction in ("North", "South", "East"):
      out.append(_poi(rng, city, f"{city.name} {direction} Railway Station", "station",
                      "railway station", next(numbers)))
    out.append(_poi(rng, city, f"{city.name} International Airport", "airport", "airport",
                    next(numbers)))
    out.append(_poi(rng, city, f"{city.name} {_NOUN[int(rng.integers(len(_NOUN)))]} Airport",
                    "airport", "airport", next(numbers)))
    return tuple(out)

  def _make_docs(self, rng: np.random.Generator) -> tuple[Doc, ...]:
    docs: list[Doc] = []
    for city in self.cities:
      base = float(rng.uniform(12, 28))
      for date in DATES:
        high = int(round(base + rng.normal(0, 3)))
        low = high - int(rng.integers(5, 11))
        sky = _WEATHER[int(rng.integers(len(_WEATHER)))]
        docs.append(Doc(f"Weather forecast {city.name} {date}",
                        f"{sky}, high {high}°C, low {low}°C", f"high {high}°C"))
      pass_price = int(rng.integers(10, 31))
      docs.append(Doc(f"Getting around {city.name}",
                      f"Metro runs 06:00-23:00; a one-day transit pass costs ¥{pass_price}.",
                      f"transit pass costs ¥{pass_price}"))
      tip_hour = int(rng.integers(16, 20))
      docs.append(Doc(f"Visiting tips {city.name}",
                      f"Most museums close their ticket desks at {tip_hour}:00; book popular "
                      "sights a day ahead.", f"ticket desks at {tip_hour}:00"))
    policies = [
        ("Train luggage policy", "Each passenger may carry 20 kg of luggage free on trains.",
         "20 kg of luggage"),
        ("Flight baggage policy", "Economy fares include one checked bag of 23 kg.",
         "checked bag of 23 kg"),
        ("Train ticket refund policy", "Refunds more than 48 hours before departure are free; "
         "later refunds cost 5% of the fare.", "48 hours before departure"),
        ("Child fare policy", "Children under 1.2 m travel free on trains; children under 12 pay "
         "half fare.", "under 12 pay half fare"),
        ("Flight check-in policy", "Check-in closes 45 minutes before departure.",
         "closes 45 minutes before"),
        ("Hotel check-in policy", "Hotels check guests in from 14:00 and out by 12:00.",
         "in from 14:00"),
        ("Pets on trains policy", "Small pets in carriers under 10 kg are allowed in second "
         "class.", "carriers under 10 kg"),
        ("Student discount policy", "Students with a valid card get 25% off attraction "
         "tickets.", "card get 25% off"),
    ]
    docs += [Doc(t, x, k) for t, x, k in policies]
    return tuple(docs)

  # -- lookups --------------------------------------------------------------------------------
  def city(self, name: str) -> City | None:
    return self.city_by_key.get(name.strip().lower())

  def poi(self, city: str, name: str) -> Poi | None:
    return self.poi_by_key.get((city.strip().lower(), name.strip().lower()))

  def weather_doc(self, city: str, date: str) -> Doc:
    return self.docs[self.city_index[city] * (NUM_DATES + 2) + DATES.index(date)]

  def city_docs(self, city: str) -> tuple[Doc, Doc]:
    k = self.city_index[city] * (NUM_DATES + 2) + NUM_DATES
    return self.docs[k], self.docs[k + 1]

  def policy_docs(self) -> tuple[Doc, ...]:
    return self.docs[len(self.cities) * (NUM_DATES + 2):]

  def search_docs(self, query: str, limit: int = 3) -> list[Doc]:
    """Documents ranked by how many distinct query tokens they contain (ties: corpus order)."""
    hits: dict[int, int] = {}
    for t in set(tokens(query)):
      for k in self.doc_index.get(t, ()):
        hits[k] = hits.get(k, 0) + 1
    ranked = sorted(hits, key=lambda k: (-hits[k], k))
    return [self.docs[k] for k in ranked[:limit]]

  # -- travel model ---------------------------------------------------------------------------
  @staticmethod
  def leg(a: Poi, b: Poi, mode: str) -> Leg:
    """Distance, duration and cost of one leg by ``mode`` (detour factor, speed, fixed time)."""
    km = round(distance_km(a.lat, a.lng, b.lat, b.lng) * _DETOUR[mode], 1)
    minutes = int(round(km / _SPEED[mode] * 60)) + _FIXED_MIN[mode] if km > 0 else 0
    base, per_km = _COST[mode]
    cost = int(round(base + per_km * km)) if km > 0 else 0
    return Leg(a.name, b.name, km, max(minutes, 1) if km > 0 else 0, cost)

  def route(self, pois: Sequence[Poi], mode: str) -> list[Leg]:
    return [self.leg(a, b, mode) for a, b in zip(pois[:-1], pois[1:])]

  @functools.lru_cache(maxsize=65536)
  def departures(self, kind: str, origin: str, destination: str, date: str
                 ) -> tuple[Departure, ...]:
    """Flights (``kind="flight"``) or trains between two city names on a date; () if none run."""
    a, b = self.city(origin), self.city(destination)
    if a is None or b is None or a is b:
      return ()
    ia, ib = self.city_index[a.name], self.city_index[b.name]
    km = distance_km(a.lat, a.lng, b.lat, b.lng)
    rng = np.random.default_rng([self.seed, 4 if kind == "flight" else 5, ia, ib,
                                 DATES.index(date)])
    out: list[Departure] = []
    # One array draw per field (scalar numpy draws dominate the cost otherwise).
    if kind == "flight":
      if km < 300:
        return ()
      count, dur = int(rng.integers(3, 6)), int(round(50 + km / 750 * 60))
      src = [p.name for p in self.pois[a.name] if p.kind == "airport"]
      dst = [p.name for p in self.pois[b.name] if p.kind == "airport"]
      codes = ("CA", "MU", "CZ", "HU")
      dep = (rng.integers(6 * 12, 21 * 12, count) * 5).tolist()
      price = np.round((300 + km * 0.6) * rng.uniform(0.7, 1.5, count) / 10).astype(int) * 10
      code, number = rng.integers(4, size=count).tolist(), rng.integers(500, 4999, count).tolist()
      s_k, d_k = rng.integers(len(src), size=count).tolist(), rng.integers(len(dst),
                                                                             size=count).tolist()
      late = (rng.integers(0, 4, count) * 5).tolist()
      for k in range(count):
        p = int(price[k])
        out.append(Departure(f"{codes[code[k]]}{number[k] * 2}", src[s_k[k]], dst[d_k[k]],
                             dep[k], dep[k] + dur + late[k],
                             (("economy", p), ("business", p * 3))))
    else:
      if km > 1600:
        return ()
      count = int(rng.integers(4, 8))
      src = [p.name for p in self.pois[a.name] if p.kind == "station"]
      dst = [p.name for p in self.pois[b.name] if p.kind == "station"]
      fast = (rng.random(count) < 0.6).tolist()
      dep = (rng.integers(6 * 12, 20 * 12, count) * 5).tolist()
      factor = rng.uniform(0.9, 1.1, count).tolist()
      number = rng.integers(5, 4999, count).tolist()
      s_k, d_k = rng.integers(len(src), size=count).tolist(), rng.integers(len(dst),
                                                                             size=count).tolist()
      for k in range(count):
        dur = int(round(km * 1.2 / (250 if fast[k] else 120) * 60)) + 10
        second = int(round(km * 1.2 * (0.45 if fast[k] else 0.2) * factor[k]))
        out.append(Departure(f"{'G' if fast[k] else 'K'}{number[k] * 2}", src[s_k[k]],
                             dst[d_k[k]], dep[k], dep[k] + dur,
                             (("second class", second), ("first class", int(second * 1.6)))))
    out.sort(key=lambda d: (d.depart_min, d.number))
    # Numbers are odd in one direction and even in the other (as on Chinese railways), so a
    # trip's outbound and return services never share one; duplicates of a day move up by 2.
    parity = int(ia < ib)
    seen: set[str] = set()
    unique = []
    for d in out:
      prefix, n = d.number[:2 if kind == "flight" else 1], int(d.number[2 if kind == "flight"
                                                                        else 1:]) + parity
      while f"{prefix}{n}" in seen:
        n += 2
      d = dataclasses.replace(d, number=f"{prefix}{n}")
      seen.add(d.number)
      unique.append(d)
    return tuple(unique)


def _poi(rng: np.random.Generator, city: City, name: str, kind: str, category: str,
         number: int) -> Poi:
  """One POI; ``number`` (the house number) is unique within the city, so addresses are too."""
  r = float(rng.uniform(0.005, 0.09))
  angle = float(rng.uniform(0, 2 * math.pi))
  lat = round(city.lat + r * math.sin(angle), 4)
  lng = round(city.lng + r * math.cos(angle) / math.cos(math.radians(city.lat)), 4)
  rating = round(float(rng.uniform(3.0, 5.0)), 1)
  if kind == "attraction":
    open_min, close_min = int(rng.integers(8, 11)) * 60, int(rng.integers(16, 22)) * 60
    price = int(rng.choice([0, 20, 30, 40, 50, 60, 80, 100, 120]))
  elif kind == "restaurant":
    open_min, close_min = int(rng.integers(10, 12)) * 60, int(rng.integers(20, 24)) * 60
    price = int(rng.integers(6, 40)) * 5
  elif kind == "hotel":
    open_min, close_min = 0, 24 * 60 - 1
    price = {"budget": 150, "business": 350, "luxury": 800}[category] + int(rng.integers(0, 40)) * 5
  else:
    open_min, close_min, price = 5 * 60, 23 * 60 + 30, 0
  address = f"{number} {_NOUN[int(rng.integers(len(_NOUN)))]} " \
            f"{STREETS[int(rng.integers(len(STREETS)))]}"
  return Poi(name, city.name, kind, category, lat, lng, rating, open_min, close_min, price,
             address)


@functools.lru_cache(maxsize=8)
def make_world(seed: int) -> World:
  """The world for ``seed`` (cached per process; worlds are read-only)."""
  return World(seed)
