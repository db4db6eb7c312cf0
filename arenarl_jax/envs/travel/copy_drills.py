"""Copy drills: short synthetic conversations that only reading can answer, in the tools' format.

A small model trained from scratch learns to copy (an induction circuit: find where the current
name stood before, emit what followed it) only when copying is what lowers its loss. In the
expert's conversations it rarely is: the world is small and fixed, so a place's rating can be
recalled from its name. A drill draws places of the world with invented figures (rating, price,
hours, address, distance), lists them as the tools print them and asks for some of them back
(``sft.copy_steps``, ``sft/stage.py``):

  repeat  a list of the world's names and invented figures, then the same list again: the
          plain induction a lookup needs
  lookup  the places as a search result, then an answer in the expert's words that states, for
          the places the user asked for (in the asked order), the figures of their lines
  call    a query naming a city and a place, answered by the expert's first call on them

Every figure in the answer and every argument of the call is in the user's turn, and nowhere
else: the world's own figures for those names are replaced, so memory cannot answer.
"""
from __future__ import annotations

import json
from typing import Any

import numpy as np

from arenarl_jax.envs.travel import tools as tools_lib
from arenarl_jax.envs.travel import world as world_lib

KINDS = ("repeat", "lookup", "call")


def _clock(rng: np.random.Generator, lo: int, hi: int) -> int:
  return int(rng.integers(lo, hi + 1)) * 30


def invented_poi(world: world_lib.World, rng: np.random.Generator) -> world_lib.Poi:
  """A place of the world (its name, kind and category) with every figure drawn anew."""
  city = world.cities[int(rng.integers(len(world.cities)))].name
  real = world.pois[city][int(rng.integers(len(world.pois[city])))]
  donor = world.pois[city][int(rng.integers(len(world.pois[city])))]
  street = donor.address.split(" ", 1)[1] if " " in donor.address else donor.address
  price = {"attraction": int(rng.integers(0, 13)) * 10, "restaurant": int(rng.integers(3, 40)) * 5,
           "hotel": int(rng.integers(20, 120)) * 10}.get(real.kind, 0)
  return world_lib.Poi(
      name=real.name, city=city, kind=real.kind, category=real.category,
      lat=round(float(rng.uniform(20, 45)), 4), lng=round(float(rng.uniform(100, 125)), 4),
      rating=round(float(rng.uniform(3.0, 5.0)), 1), open_min=_clock(rng, 12, 22),
      close_min=_clock(rng, 32, 46), price=price,
      address=f"{int(rng.integers(1, 400))} {street}")


def _price_words(p: world_lib.Poi) -> str:
  if p.kind == "attraction":
    return f"ticket ¥{p.price}" if p.price else "free entry"
  if p.kind == "restaurant":
    return f"average ¥{p.price} per person"
  if p.kind == "hotel":
    return f"¥{p.price} per night"
  return "no fee"


def lookup(world: world_lib.World, rng: np.random.Generator) -> list[dict[str, Any]]:
  n = int(rng.integers(3, 9))
  pois, seen = [], set()
  while len(pois) < n:
    p = invented_poi(world, rng)
    if p.name not in seen:
      seen.add(p.name)
      pois.append(p)
  meters = [int(rng.integers(100, 10_000)) for _ in pois]
  lines = [f"{k + 1}. {tools_lib.poi_line(p)} | {m} m away"
           for k, (p, m) in enumerate(zip(pois, meters))]
  picks = rng.choice(n, size=int(rng.integers(1, min(n, 3) + 1)), replace=False)
  names = " and ".join(pois[k].name for k in picks)
  query = (f"{n} place(s) found:\n" + "\n".join(lines)
           + f"\nGive me the rating, price, distance, hours and address of {names}.")
  answer = "\n".join(
      f"{j + 1}. {pois[k].name}: rating {pois[k].rating}, {_price_words(pois[k])}, "
      f"{meters[k]} m away, open {pois[k].hours}, at {pois[k].address}."
      for j, k in enumerate(picks))
  return [{"role": "user", "content": query}, {"role": "assistant", "content": answer}]


def call(world: world_lib.World, rng: np.random.Generator) -> list[dict[str, Any]]:
  p = invented_poi(world, rng)
  other = invented_poi(world, rng)
  query = rng.choice([f"What are the opening hours of {p.name} in {p.city}?",
                      f"Find {p.name} ({p.city}) for me, and tell me its rating.",
                      f"I am visiting {p.city}. Where is {p.name}, and what does it cost?"])
  calls = [("search_poi", {"city": p.city, "keyword": p.name})]
  if rng.random() < 0.5:  # a second place, so the call must pick the right name per slot
    query += f" Also look up {other.name} in {other.city}."
    calls.append(("search_poi", {"city": other.city, "keyword": other.name}))
  return [{"role": "user", "content": str(query)},
          {"role": "assistant", "content": "",
           "reasoning_content": "I need the places the user named.",
           "tool_calls": [{"id": f"call_0_{k}", "type": "function",
                           "function": {"name": name, "arguments": json.dumps(args,
                                                                             ensure_ascii=False)}}
                          for k, (name, args) in enumerate(calls)]}]


def repeat(world: world_lib.World, rng: np.random.Generator) -> list[dict[str, Any]]:
  items = []
  for _ in range(int(rng.integers(6, 16))):
    p = invented_poi(world, rng)
    items.append(str(rng.choice([p.name, p.city, p.address, f"rating {p.rating}",
                                 f"¥{p.price}", p.hours, f"{int(rng.integers(100, 10_000))} m"])))
  text = ", ".join(items)
  return [{"role": "user", "content": f"Repeat this list exactly: {text}"},
          {"role": "assistant", "content": text}]


DRILLS = {"repeat": repeat, "lookup": lookup, "call": call}


def drill(world: world_lib.World, rng: np.random.Generator) -> list[dict[str, Any]]:
  """One drill's messages (user, assistant), its kind drawn uniformly from ``KINDS``."""
  return DRILLS[KINDS[int(rng.integers(len(KINDS)))]](world, rng)
