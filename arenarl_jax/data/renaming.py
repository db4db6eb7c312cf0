"""Consistent random renaming of an SFT conversation's names: a world it cannot memorise.

In the travel world every place has one rating, one price and one address, so a small model
trained from scratch on the expert's conversations can lower its loss by memorising the world
(the rating that follows a place's name) instead of reading the tool result a few lines up, and
it can call the city or place it saw most often instead of the one the query names. Neither
generalises to the test tasks, whose places it has rarely or never seen.

``sft.rename_share`` of the SFT rows get every world name they mention replaced, in every
message (query, calls, tool results, answer, reasoning), by another name of the same group (a
city by a city, a noodle house by a noodle house), drawn at random per row and applied
consistently within the row. The conversation stays self-consistent as text: the query's place is
the one called, the one the result lists and the one the answer states, with the same figures.
Only reading can predict it. The rest of the rows keep the real world (what the test tasks are
about). Groups come from the environment (``name_groups()``); a name in no group stays as it is.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping, Sequence

import numpy as np

from arenarl_jax.data import records


class Renamer:
  """``renamer(example, rng)`` -> the example with its names renamed (with probability
  ``share``), or unchanged. Usable as a grain ``random_map``."""

  def __init__(self, groups: Mapping[str, Sequence[str]], share: float):
    if not 0.0 <= share <= 1.0:
      raise ValueError(f"sft.rename_share must be in [0, 1], got {share}")
    self.share = float(share)
    self.group_of: dict[str, str] = {}
    self.members: dict[str, tuple[str, ...]] = {}
    for group, names in sorted(groups.items()):
      kept = tuple(sorted({n for n in names if n not in self.group_of}))
      self.members[group] = kept
      self.group_of.update({n: group for n in kept})
    names = sorted(self.group_of, key=lambda n: (-len(n), n))  # the longest name wins a match
    self.pattern = (re.compile(r"(?<!\w)(?:" + "|".join(map(re.escape, names)) + r")(?!\w)")
                    if names else None)

  def mapping(self, texts: Sequence[str], rng: np.random.Generator) -> dict[str, str]:
    """A random one-to-one renaming of the names found in ``texts``, each within its group."""
    found: dict[str, list[str]] = {}
    for text in texts:
      for name in dict.fromkeys(self.pattern.findall(text)):
        group = found.setdefault(self.group_of[name], [])
        if name not in group:
          group.append(name)
    out = {}
    for group in sorted(found):
      names, members = sorted(found[group]), self.members[group]
      picks = rng.choice(len(members), size=min(len(names), len(members)), replace=False)
      out.update({n: members[k] for n, k in zip(names, picks)})
    return out

  def rename(self, text: str, mapping: Mapping[str, str]) -> str:
    return self.pattern.sub(lambda m: mapping.get(m.group(0), m.group(0)), text)

  def draw(self, example: records.Example, rng: np.random.Generator) -> dict[str, str]:
    """This row's renaming: empty (kept as it is) with probability 1 - ``share``."""
    if self.pattern is None or rng.random() >= self.share:
      return {}
    return self.mapping(_flat([example.query, *(_texts(m) for m in example.messages)]), rng)

  def __call__(self, example: records.Example, rng: np.random.Generator) -> records.Example:
    return self.apply(example, self.draw(example, rng))

  def apply(self, example: records.Example, mapping: Mapping[str, str]) -> records.Example:
    if not mapping:
      return example
    messages = tuple(_map_message(m, lambda s: self.rename(s, mapping)) for m in example.messages)
    return dataclasses.replace(example, query=self.rename(example.query, mapping),
                               messages=messages)


def _texts(message: Mapping[str, Any]) -> list[str]:
  out = []
  _map_message(message, lambda s: out.append(s) or s)
  return out


def _flat(items) -> list[str]:
  return [s for item in items for s in ([item] if isinstance(item, str) else item)]


def _map_message(message: Mapping[str, Any], fn) -> dict[str, Any]:
  """``message`` with ``fn`` applied to its content, reasoning and call arguments (the JSON
  string: names in it are plain string values, renamed in place)."""
  out = dict(message)
  for key in ("content", "reasoning_content"):
    if isinstance(out.get(key), str):
      out[key] = fn(out[key])
  if out.get("tool_calls"):
    calls = []
    for call in out["tool_calls"]:
      function = dict(call.get("function", {}))
      if isinstance(function.get("arguments"), str):
        function["arguments"] = fn(function["arguments"])
      calls.append({**call, "function": function})
    out["tool_calls"] = calls
  return out
