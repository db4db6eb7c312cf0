"""Where a from-scratch model's whole-name embeddings start (``model.init.name_init``).

With ``model.init.whole_names`` each city and place is one id. Copying one from the query into a
call is then one attention head's work, but the head must find "the place in the query" among all
the other tokens: its keys must single out place ids. Random embeddings give the ~1,000 place ids
no common direction, and each place is seen in a handful of training rows, so a common direction
forms slowly (a small model learns to copy the query's city, seen in every row, long before any
place). ``by_kind`` starts every name's embedding as a vector shared by its kind
(``env.name_kinds()``: city, place) plus a random part of the same scale: the kind is readable
from the first step, and the random part keeps the names apart for the copy itself.
"""
from __future__ import annotations

from typing import Any, Mapping

import jax.numpy as jnp
import numpy as np

from arenarl_jax.text.tokenizer import Tokenizer

NAME_INITS = ("random", "by_kind")


def check(choice: str) -> str:
  """``choice`` if it is a ``model.init.name_init`` value, else an error naming the key."""
  if choice not in NAME_INITS:
    raise ValueError(f"model.init.name_init: unknown value {choice!r}; known: {list(NAME_INITS)}")
  return choice


def name_ids(tokenizer: Tokenizer, kinds: Mapping[str, str]) -> dict[str, list[int]]:
  """Per kind, the ids of its names: ``name`` and, where the tokenizer gives it an id of its own
  (``model.init.name_space=joined``), ``" name"``; a name the tokenizer does not keep as one id
  is an error (the tokenizer was trained without it)."""
  out: dict[str, list[int]] = {}
  for name, kind in kinds.items():
    bare = tokenizer.encode(name)
    if len(bare) != 1:
      raise ValueError(f"model.init.name_init=by_kind: {name!r} is {len(bare)} ids, not one; "
                       "it needs model.init.whole_names=True")
    spaced = tokenizer.encode(" " + name)
    if len(spaced) == 1:  # name_space=joined: " name" is an id of its own
      forms = [bare[0], spaced[0]]
    elif len(spaced) == 2 and spaced[1] == bare[0]:  # name_space=apart: a space, then the name
      forms = [bare[0]]
    else:
      raise ValueError(f"model.init.name_init=by_kind: {' ' + name!r} is {len(spaced)} ids, "
                       "neither one nor a space and the name's id")
    out.setdefault(kind, []).extend(int(i) for i in forms)
  return out


def init_by_kind(model: Any, tokenizer: Tokenizer, kinds: Mapping[str, str], seed: int) -> None:
  """Rewrites, in place, the embedding rows of every name: its kind's shared vector plus a
  random part, both drawn like the rest of the table (the same per-entry scale)."""
  embed = np.array(model.embed[...], np.float32)  # a writable copy
  scale = float(np.std(embed))
  rng = np.random.default_rng([int(seed), 7])
  for kind, ids in sorted(name_ids(tokenizer, kinds).items()):
    shared = rng.normal(0.0, scale, embed.shape[1]).astype(np.float32)
    embed[ids] = shared + rng.normal(0.0, scale, (len(ids), embed.shape[1])).astype(np.float32)
  model.embed[...] = jnp.asarray(embed, model.embed[...].dtype)
