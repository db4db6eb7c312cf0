"""Rows of a group that hold the same history extend once.

The G rows of a group start from one prompt and, at the temperatures RL samples at, often write
the same tool calls: then they get the same tool results, and their caches after the extend are
the same too. In a headroom read of the pinned SmolLM2 start (groups of 9), only 144 of 1,080
row extends held a history that no other row of its group held (benchmarks/README.md, "Where a
group's wave goes"), and an extend costs as much per row as a prefill. So the sampler extends
one row per distinct history and copies its cache to the rows that share it.

The smaller batch keeps the sampler's row layout: B groups of D rows (D, a power of two below
G, the most distinct histories of any group), so row m still reads prompt m // D's shared
prefix and the cache needs no map from rows to prompts. A group with fewer distinct histories
fills its other rows with a copy that adds nothing (count 0).

Rounding: the smaller batch is another shape, so XLA may sum in another order; each row's cache
agrees with the whole batch's extend to float rounding, not bit for bit (sampled roll-outs only:
one row per group has nothing to share).
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from arenarl_jax.sampling import programs
from arenarl_jax.sampling.programs import SamplerState


def same_history(histories: Sequence[Sequence[int]], new_tokens: Sequence[Sequence[int]],
                 group_size: int) -> list[int]:
  """For each row, the first row of its group whose history and new tokens equal its own (the
  row itself when none does). Rows without new tokens point at themselves."""
  first: dict[tuple, int] = {}
  out = []
  for n, (history, new) in enumerate(zip(histories, new_tokens)):
    if not len(new):
      out.append(n)
      continue
    key = (n // group_size, tuple(history), tuple(new))
    out.append(first.setdefault(key, n))
  return out


@dataclasses.dataclass(frozen=True)
class Plan:
  """Which rows extend, as a batch of B groups of ``group_size`` rows.

  rows_M: the state's row behind each row of the smaller batch; counts_M: its token count (0
  for a filler); from_N: for each row of the state, its row in the smaller batch; take_N:
  whether the row takes the smaller batch's result (it has new tokens)."""

  group_size: int
  rows_M: np.ndarray
  counts_M: np.ndarray
  from_N: np.ndarray
  take_N: np.ndarray


def plan(counts_N: np.ndarray, same_as: Sequence[int], group_size: int,
         row_multiple: int = 1, lengths_N: np.ndarray | None = None) -> Plan | None:
  """The smaller batch, or None when it would not be smaller (or the mesh's 'data' axis,
  ``row_multiple``, does not divide it). ``lengths_N``: the rows' cache lengths; rows of other
  lengths hold other caches, whatever the host saw."""
  n, g = len(counts_N), group_size
  if len(same_as) != n or any(not 0 <= int(s) < n for s in same_as):
    raise ValueError(f"extend: same_as needs one row index in [0, {n}) per row, got "
                     f"{list(same_as)[:8]}{'...' if len(same_as) > 8 else ''} ({len(same_as)})")
  if g < 2 or n % g:
    return None
  b = n // g
  # Row r shares row s's extend only when s is in its group, adds as many tokens to a cache as
  # long, and shares no other row's (no chains); any other row extends on its own.
  lengths_N = np.zeros((n,), np.int64) if lengths_N is None else np.asarray(lengths_N)
  share = [s if s // g == r // g and counts_N[s] and counts_N[s] == counts_N[r]
           and lengths_N[s] == lengths_N[r] else r
           for r, s in ((r, int(same_as[r])) for r in range(n))]
  share = [s if share[s] == s else r for r, s in enumerate(share)]
  reps = [[] for _ in range(b)]
  for r in range(n):
    if counts_N[r] and share[r] == r:
      reps[r // g].append(r)
  d = 1
  while d < max(len(x) for x in reps):
    d *= 2
  if d >= g or (b * d) % row_multiple:
    return None
  rows_M = np.zeros((b * d,), np.int32)
  counts_M = np.zeros((b * d,), np.int32)
  slot = {}
  for group, members in enumerate(reps):
    for j in range(d):
      m = group * d + j
      rows_M[m] = members[j] if j < len(members) else group * g
      counts_M[m] = counts_N[members[j]] if j < len(members) else 0
      if j < len(members):
        slot[members[j]] = m
  from_N = np.zeros((n,), np.int32)
  take_N = np.asarray(counts_N) > 0
  for r in np.nonzero(take_N)[0]:
    from_N[r] = slot[share[r]]
  return Plan(d, rows_M, counts_M, from_N, take_N)


def _rows_of(tree, idx):
  return jax.tree.map(lambda x: jnp.take(x, idx, axis=0), tree)


@functools.partial(jax.jit, static_argnames=("group_size", "mesh"))
def take(state: SamplerState, rows_M, *, group_size: int, mesh: Mesh | None = None
         ) -> SamplerState:
  """The rows ``rows_M`` of ``state`` as a state of groups of ``group_size`` (same prefix)."""
  cache = state.cache.replace(k=_rows_of(state.cache.k, rows_M),
                              v=_rows_of(state.cache.v, rows_M))
  return programs.on_rows(SamplerState(
      cache=cache, lengths_N=state.lengths_N[rows_M], hidden_ND=state.hidden_ND[rows_M],
      done_N=state.done_N[rows_M], group_size=group_size), mesh)


@functools.partial(jax.jit, static_argnames=("mesh",), donate_argnames=("state",))
def put(state: SamplerState, part: SamplerState, from_N, take_N, *, mesh: Mesh | None = None
        ) -> SamplerState:
  """``state`` with row n replaced by ``part``'s row from_N[n] where take_N[n]."""
  def merge(whole, small):
    picked = jnp.take(small, from_N, axis=0)
    keep = take_N.reshape((-1,) + (1,) * (whole.ndim - 1))
    return jnp.where(keep, picked, whole)
  cache = state.cache.replace(k=tuple(map(merge, state.cache.k, part.cache.k)),
                              v=tuple(map(merge, state.cache.v, part.cache.v)))
  return programs.on_rows(state.replace(
      cache=cache, lengths_N=merge(state.lengths_N, part.lengths_N),
      hidden_ND=merge(state.hidden_ND, part.hidden_ND)), mesh)
