"""Per-entity facts: what this trajectory's tool results say about each entity, and what an answer
states about each, so a figure counts only for the entity it is stated about.

Entities are places (``("poi", name)`` for a place of the task's cities, ``("place", name)`` for
any other or invented one), route legs (``("leg", a, b, mode)``), a transport mode between the
task's two places (``("mode", mode)``), trains and flights (``("service", number)``), documents
(``("doc", title)``), totals (``("total",)``) and nothing (``("none",)``).

- :class:`Evidence` parses the ok results of one trajectory's calls: each place's rating, hours,
  price, address and distances (search results), each leg's and route total's km, minutes and
  cost by mode (navigation), each service's stations, clock times, minutes and fares, and each
  document's text. Nothing comes from the world: a fact the policy memorised is unsupported.
- :class:`Reader` splits an answer into :class:`Claim`\\ s, line by line. A line naming a service
  is about that service; one naming a document title about the document (its numbers after the
  title); a line saying "total" about a total; ``A -> B`` about that leg; a line naming a mode
  (and not two places) about that mode; otherwise each figure belongs to the place named before
  it on the line (the first place for figures before any). A figure on a line naming nothing
  belongs to no entity.
- :func:`audit` checks every claim against the evidence and returns the wrong facts: a figure
  its entity's evidence does not hold, a place or service no result names (one wrong fact, its
  figures unchecked). Figures the user's query states itself (a radius, a cap, a stay) are
  neutral restatements. Figures of a leg, mode or total are matched jointly to the closest
  record (a total to the route totals in the results and the named plan's true cost), so each
  disagreeing figure is one wrong fact; a total with nothing to check it against is not checked.
"""
from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any, Iterable, Mapping, Sequence

from arenarl_jax.envs.travel import world as world_lib

# (kind, value): price, rating, distance (metres), minutes, hours, address, clock; "number" on
# a document's line.
Figure = tuple[str, Any]

_RANGE = re.compile(r"\b(\d{1,2}):(\d{2})\s?[-–]\s?(\d{1,2}):(\d{2})\b")
CLOCK = re.compile(r"\b(\d{1,2}):(\d{2})\b")
_ADDRESS = re.compile(r"\b\d{1,4} [A-Z][a-z]+ (?:" + "|".join(world_lib.STREETS) + r")\b")
_MONEY = re.compile(r"¥\s?(\d+(?:\.\d+)?)")
_FREE = re.compile(r"\b(?:free entry|no fee)\b", re.IGNORECASE)
_RATING = re.compile(r"\brat(?:ed|ing)\s*(?:of\s*)?(\d(?:\.\d)?)\b", re.IGNORECASE)
_DIST = re.compile(r"(\d+(?:\.\d+)?)\s?(km|m)\b")
_MIN = re.compile(r"(\d+)\s?min(?:ute)?s?\b")
_NUM = re.compile(r"\d+(?:\.\d+)?")
SERVICE = re.compile(r"\b(?:[GK]\d{2,5}|(?:CA|MU|CZ|HU)\d{4,5})\b")
_MODE = re.compile(r"\b(" + "|".join(world_lib.MODES) + r")\b", re.IGNORECASE)
_ARROW = re.compile(r"->|→")
_TOTAL = re.compile(r"\btotal\b", re.IGNORECASE)
_SUFFIX = "|".join(sorted({*world_lib.ATTRACTIONS.values(), *world_lib.CUISINES.values(),
                           *world_lib.HOTELS.values(), "Railway Station", "Airport"},
                          key=len, reverse=True))
_PLACE = re.compile(r"\b[A-Z][a-z]+ [A-Z][a-z]+ (?:" + _SUFFIX + r")\b")
# Kinds a figure naming no entity would need one for.
ENTITY_KINDS = ("price", "rating", "distance", "minutes", "hours", "address")


def clock(h: str | int, m: str | int) -> str:
  return f"{int(h):02d}:{int(m):02d}"


def num(x: str | float) -> float:
  return round(float(x), 3)


def figures(text: str) -> list[tuple[int, str, Any]]:
  """(position, kind, value) of every figure in ``text``: opening hours and addresses first (so
  their numbers are not read again), prices (``¥`` or free), ratings, distances in metres,
  minutes and single clock times."""
  out: list[tuple[int, str, Any]] = []
  masked = list(text)

  def take(m: re.Match, kind: str, value: Any) -> None:
    out.append((m.start(), kind, value))
    masked[m.start():m.end()] = " " * (m.end() - m.start())

  for m in _RANGE.finditer(text):
    take(m, "hours", f"{clock(m[1], m[2])}-{clock(m[3], m[4])}")
  for m in _ADDRESS.finditer(text):
    take(m, "address", m.group(0).lower())
  rest = "".join(masked)
  out += [(m.start(), "price", num(m[1])) for m in _MONEY.finditer(rest)]
  out += [(m.start(), "price", 0.0) for m in _FREE.finditer(rest)]
  out += [(m.start(), "rating", num(m[1])) for m in _RATING.finditer(rest)]
  out += [(m.start(), "distance", num(float(m[1]) * (1000 if m[2] == "km" else 1)))
          for m in _DIST.finditer(rest)]
  out += [(m.start(), "minutes", num(m[1])) for m in _MIN.finditer(rest)]
  out += [(m.start(), "clock", clock(m[1], m[2])) for m in CLOCK.finditer(rest)]
  return sorted(out, key=lambda x: x[0])


@functools.lru_cache(maxsize=4096)
def query_figures(query: str) -> frozenset[Figure]:
  """The figures the user's query states (neutral when an answer restates them)."""
  return frozenset((k, v) for _, k, v in figures(query) if k != "clock")


@dataclasses.dataclass(frozen=True)
class Service:
  number: str
  origin: str  # lower-case station / airport names
  destination: str
  depart: str  # HH:MM
  arrive: str
  minutes: float
  fares: frozenset[float]


_POI_LINE = re.compile(r"^(?:\d+\.\s)?(.+?) \| \w+/.+? \| rating ([\d.]+) \| open (\S+) \| "
                       r"(.+?) \| (.+?) \| location \S+(?: \| (\d+) m away)?$")
_NAV_HEAD = re.compile(r"^Route by (\w+) in ")
_NAV_LEG = re.compile(r"^\d+\. (.+?) -> (.+?): ([\d.]+) km, (\d+) min, ¥(\d+)$")
_NAV_TOTAL = re.compile(r"^Total: ([\d.]+) km, (\d+) min, ¥(\d+)$")
_DEP_LINE = re.compile(r"^(\S+) \| (.+?) (\d\d:\d\d)(?: \(\+1 day\))? -> (.+?) (\d\d:\d\d)"
                       r"(?: \(\+1 day\))? \| (\d+) min \| (.+)$")
_DOC_LINE = re.compile(r"^\[\d+\] (.+?): (.*)$")

Record = tuple[str, float, float, float]  # (mode, metres, minutes, cost)


class Evidence:
  """What the ok results of one trajectory's calls say, per entity (see the module doc)."""

  def __init__(self, results: Iterable[str]):
    self.pois: dict[str, dict[str, set]] = {}
    self.legs: dict[tuple[str, str], list[Record]] = {}
    self.totals: list[Record] = []
    self.services: dict[str, Service] = {}
    self.docs: dict[str, str] = {}
    texts = []
    for text in results:
      texts.append(text.lower())
      mode = ""
      for line in text.splitlines():
        line = line.strip()
        if (m := _POI_LINE.match(line)):
          facts = self.pois.setdefault(m[1].lower(), {k: set() for k in ENTITY_KINDS})
          facts["rating"].add(num(m[2]))
          facts["hours"].add(m[3])
          price = _MONEY.search(m[4])
          facts["price"].add(num(price[1]) if price else 0.0)
          facts["address"].add(m[5].lower())
          if m[6]:
            facts["distance"].add(num(m[6]))
        elif (m := _NAV_HEAD.match(line)):
          mode = m[1].lower()
        elif (m := _NAV_LEG.match(line)):
          self.legs.setdefault((m[1].lower(), m[2].lower()), []).append(
              (mode, num(float(m[3]) * 1000), num(m[4]), num(m[5])))
        elif (m := _NAV_TOTAL.match(line)):
          self.totals.append((mode, num(float(m[1]) * 1000), num(m[2]), num(m[3])))
        elif (m := _DEP_LINE.match(line)):
          self.services[m[1]] = Service(m[1], m[2].lower(), m[4].lower(), m[3], m[5], num(m[6]),
                                        frozenset(num(x) for x in _MONEY.findall(m[7])))
        elif (m := _DOC_LINE.match(line)):
          self.docs[m[1].lower()] = m[2]
    self.text = "\n".join(texts)

  def names(self, name: str) -> bool:
    """Whether any result names ``name`` (lower case)."""
    return name in self.text

  def leg_records(self, a: str, b: str, mode: str = "") -> list[Record]:
    recs = self.legs.get((a, b), []) + self.legs.get((b, a), [])
    return [r for r in recs if not mode or r[0] == mode]


@dataclasses.dataclass(frozen=True)
class Claim:
  """What one stretch of one answer line states about one entity."""

  entity: tuple
  figures: tuple[Figure, ...]
  line: int
  names: tuple[str, ...] = ()  # places named inside a service's stretch (its stations)


_CANDIDATE = re.compile(r"\b[A-Za-z]+ [A-Za-z]+ (?:" + _SUFFIX + r")\b", re.IGNORECASE)


@functools.lru_cache(maxsize=8)
def _names(world: world_lib.World) -> frozenset[str]:
  """Every place name of the world, lower case."""
  return frozenset(p.name.lower() for ps in world.pois.values() for p in ps)


@functools.lru_cache(maxsize=8)
def _titles(world: world_lib.World) -> dict[str, dict[int, frozenset[str]]]:
  """Document titles (lower case) by their first two words, then by length."""
  out: dict[str, dict[int, set[str]]] = {}
  for d in world.docs:
    title = d.title.lower()
    out.setdefault(" ".join(title.split()[:2]), {}).setdefault(len(title), set()).add(title)
  return {k: {n: frozenset(v) for n, v in by_len.items()} for k, by_len in out.items()}


def find_title(world: world_lib.World, line: str) -> tuple[int, int, str] | None:
  """(start, end, lower-case title) of the first document title on ``line``, or None."""
  low = line.lower()
  hits = []
  for head, by_len in _titles(world).items():
    pos = low.find(head)
    while pos >= 0:
      for n in sorted(by_len, reverse=True):
        if low[pos:pos + n] in by_len[n]:
          hits.append((pos, pos + n, low[pos:pos + n]))
          break
      pos = low.find(head, pos + 1)
  return min(hits) if hits else None


class Reader:
  """Reads an answer into claims for one task's cities (see the module doc)."""

  def __init__(self, world: world_lib.World, cities: Sequence[str],
               aliases: Mapping[str, str] | None = None):
    self.world = world
    self.cities = tuple(cities)
    self.aliases = {k.lower(): v.lower() for k, v in (aliases or {}).items()}

  def poi(self, name: str) -> world_lib.Poi | None:
    """The place of the task's cities called ``name`` (first city first), or None."""
    for city in self.cities:
      p = self.world.poi(city, name)
      if p is not None:
        return p
    return None

  def places(self, line: str) -> list[tuple[int, int, tuple]]:
    """(start, end, entity) of every place named on ``line``."""
    out = []
    names = _names(self.world)
    for m in _CANDIDATE.finditer(line):
      name = m.group(0).lower()
      if name in names:
        out.append((m.start(), m.end(), ("poi" if self.poi(name) else "place", name)))
    for m in _PLACE.finditer(line):
      if not any(s < m.end() and m.start() < e for s, e, _ in out):
        out.append((m.start(), m.end(), ("place", m.group(0).lower())))
    return sorted(out)

  def claims(self, answer: str) -> list[Claim]:
    out: list[Claim] = []
    for k, line in enumerate(answer.splitlines()):
      out += self._line(k, line)
    return out

  def _line(self, k: int, line: str) -> list[Claim]:
    figs = figures(line)
    places = self.places(line)
    services = list(SERVICE.finditer(line))
    if services:
      return [Claim(("service", m.group(0)), _between(figs, m.start(), end, first=j == 0),
                    k, tuple(e[1] for s, _, e in places if m.start() <= s < end))
              for j, (m, end) in enumerate(_spans(services, len(line)))]
    title = find_title(self.world, line)
    if title:
      rest = line[title[1]:]
      return [Claim(("doc", title[2]),
                    tuple(("number", num(x)) for x in _NUM.findall(rest)), k)]
    plain = tuple((kind, v) for _, kind, v in figs)
    if _TOTAL.search(line):
      return [Claim(("total",), plain, k)]
    modes = list(_MODE.finditer(line))
    mode = modes[0].group(1).lower() if len({m.group(1).lower() for m in modes}) == 1 else ""
    arrow = _ARROW.search(line)
    if arrow:
      before = [e for s, _, e in places if s < arrow.start()]
      after = [e for s, _, e in places if s > arrow.start()]
      if before and after:
        return [Claim(("leg", before[-1][1], after[0][1], mode), plain, k)]
    if mode and len(places) >= 2:
      return [Claim(("leg", places[0][2][1], places[1][2][1], mode), plain, k)]
    if modes:
      return [Claim(("mode", m.group(1).lower()), _between(figs, m.start(), end, first=j == 0), k)
              for j, (m, end) in enumerate(_spans(modes, len(line)))]
    if places:
      return [Claim(e, _between(figs, s, end, first=j == 0), k)
              for j, ((s, _, e), end) in enumerate(_spans(places, len(line)))]
    low = line.lower()
    for word, name in self.aliases.items():
      if re.search(rf"\b{re.escape(word)}\b", low):
        return [Claim(("poi", name), plain, k)]
    return [Claim(("none",), plain, k)] if plain else []


def _spans(items: Sequence, length: int) -> list[tuple[Any, int]]:
  """Each item with the position where the next one starts (or the line's end)."""
  starts = [x[0] if isinstance(x, tuple) else x.start() for x in items]
  return [(x, starts[j + 1] if j + 1 < len(items) else length) for j, x in enumerate(items)]


def _between(figs, start: int, end: int, first: bool) -> tuple[Figure, ...]:
  return tuple((kind, v) for pos, kind, v in figs if (first or pos >= start) and pos < end)


def stated(claims: Sequence[Claim], entity: tuple, kind: str) -> list[Any]:
  """Every value of ``kind`` the claims state about ``entity``."""
  return [v for c in claims if c.entity == entity for k, v in c.figures if k == kind]


def _joint(figs: Sequence[Figure], records: Sequence[tuple[float | None, float | None,
                                                           float | None]]) -> list[Figure]:
  """The figures (distance, minutes, price) that disagree with the closest record."""
  index = {"distance": 0, "minutes": 1, "price": 2}
  figs = [f for f in figs if f[0] in index]
  best: list[Figure] | None = None
  for rec in records:
    bad = [f for f in figs if rec[index[f[0]]] != f[1]]
    if best is None or len(bad) < len(best):
      best = bad
  return figs if best is None else best


def audit(claims: Sequence[Claim], ev: Evidence, query: str, *,
          pair: tuple[str, str] | None = None,
          plan_totals: Sequence[float] = ()) -> tuple[set[tuple], int]:
  """(wrong facts, figures checked) of an answer's claims against this trajectory's evidence.

  ``pair``: the task's two places, which a bare mode line is about; ``plan_totals``: the costs a
  total line may state besides the route totals in the evidence (the stated plan's true cost).
  """
  neutral = query_figures(query)
  low_query = query.lower()
  wrong: set[tuple] = set()
  checked: set[tuple] = set()

  def check(entity: tuple, kind: str, value: Any, ok: bool) -> None:
    if kind != "entity":  # a place or service named is not yet a checkable figure
      checked.add((entity, kind, value))
    if not ok:
      wrong.add((entity, kind, value))

  for c in claims:
    figs = [f for f in c.figures if f not in neutral and f[0] != "clock" or
            c.entity[0] == "service" and f[0] == "clock"]
    kind = c.entity[0]
    if kind in ("poi", "place"):
      name = c.entity[1]
      facts = ev.pois.get(name)
      if facts is None:
        if figs or not (ev.names(name) or name in low_query):
          check(c.entity, "entity", None, False)
        continue
      check(c.entity, "entity", None, True)
      for k, v in figs:
        if k == "minutes":
          ok = any(r[2] == v for (a, b), recs in ev.legs.items() if name in (a, b) for r in recs)
        else:
          ok = k in facts and v in facts[k]
        check(c.entity, k, v, ok)
    elif kind == "service":
      svc = ev.services.get(c.entity[1])
      if svc is None:
        check(c.entity, "entity", None, False)
        continue
      for k, v in figs:
        ok = (k == "clock" and v in (svc.depart, svc.arrive) or k == "minutes" and v == svc.minutes
              or k == "price" and v in svc.fares)
        check(c.entity, k, v, ok)
      for station in c.names:
        check(c.entity, "station", station, station in (svc.origin, svc.destination))
    elif kind == "doc":
      text = ev.docs.get(c.entity[1])
      if text is None:
        check(c.entity, "entity", None, False)
        continue
      have = {num(x) for x in _NUM.findall(text)}
      for k, v in figs:
        check(c.entity, k, v, v in have)
    elif kind in ("leg", "mode", "total"):
      if kind == "leg":
        records = [r[1:] for r in ev.leg_records(c.entity[1], c.entity[2], c.entity[3])]
      elif kind == "mode":
        records = [r[1:] for r in (ev.leg_records(*pair, c.entity[1]) if pair else
                                   [r for recs in ev.legs.values() for r in recs
                                    if r[0] == c.entity[1]])]
      else:
        records = [r[1:] for r in ev.totals] + [(None, None, num(t)) for t in plan_totals]
      figs = [f for f in figs if f[0] in ("distance", "minutes", "price")]
      if not records:  # a leg or mode no result gives is unsupported; such a total unverifiable
        if figs and kind != "total":
          check(c.entity, "entity", None, False)
        continue
      bad = _joint(figs, records)
      for f in figs:
        check(c.entity, *f, f not in bad)
    else:
      for k, v in figs:
        if k in ENTITY_KINDS:
          check(c.entity, k, v, False)
  return wrong, len(checked)
