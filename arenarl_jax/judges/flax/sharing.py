"""Which prompt tokens the local judge's logit mode computes once for several rows of a call.

Every row of a judge call already shares the rubric's system prompt (``programs``). Rows can
share more: in a tournament the two orders of a match are different prompts, but every match in
which trajectory A is shown first begins with the same tokens (the query, then A's path and
answer), so a round robin over N trajectories has N - 1 rows per first trajectory and an anchor
round N - 1 rows that start with the anchor. ``plan_chunks`` finds such rows and packs them into
the compiled calls: each group's common tokens run once, into a cache row that every member then
copies before running only its own tail.

Groups are runs of the rows in lexicographic order (rows with a common beginning are then
adjacent, and a run's common prefix is the smallest of its adjacent ones), chosen to save the most
tokens, (members - 1) x common length summed over the runs: a 7-row group sharing 365 tokens is
not cut down to the 40 tokens that every trajectory of a prompt may begin with. Groups then
follow one another in order of their longest tail, so the rows of a chunk pad to similar lengths,
and that order is cut into chunks where the padded tokens are fewest (``cut``): a chunk pads
every tail to its longest one, so a long tail among short ones, or a group split between two
chunks (its beginning then runs in both), is worth a boundary only when that pads less. Pure Python: no device work.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, Sequence

Ids = tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Chunk:
  """The rows of one compiled call and what they share.

  ``rows``: each row's tokens after the system prompt. ``shared``: the B common beginnings that
  run once each. Row r starts from shared[group[r]]'s first ``offset[r]`` tokens (offset 0: it
  shares nothing and ``group`` is ignored) and runs ``rows[r][offset[r]:]`` itself.
  """

  rows: tuple[Ids, ...]
  shared: tuple[Ids, ...] = ()
  group: tuple[int, ...] = ()
  offset: tuple[int, ...] = ()

  def __post_init__(self):
    if not self.group:
      object.__setattr__(self, "group", (0,) * len(self.rows))
      object.__setattr__(self, "offset", (0,) * len(self.rows))
    for r, (g, o) in enumerate(zip(self.group, self.offset)):
      if o and (g >= len(self.shared) or self.rows[r][:o] != self.shared[g][:o]):
        raise ValueError(f"row {r} does not begin with the {o} tokens of shared prefix {g}")
      if o >= len(self.rows[r]):
        raise ValueError(f"row {r} must keep at least one token of its own")

  def tails(self) -> list[Ids]:
    """What each row runs itself."""
    return [ids[o:] for ids, o in zip(self.rows, self.offset)]


def common_length(a: Sequence[int], b: Sequence[int]) -> int:
  """Length of the longest common prefix of ``a`` and ``b``."""
  n = min(len(a), len(b))
  for k in range(n):
    if a[k] != b[k]:
      return k
  return n


def group_rows(rows: Sequence[Ids], max_rows: int, min_shared: int) -> list[tuple[list[Ids], int]]:
  """(members, common length) per group: the split of the sorted rows into runs of at most
  ``max_rows`` that saves the most tokens, sum of (members - 1) x common length over runs whose
  common length is at least ``min_shared`` (others share nothing: length 0). A common part
  always leaves each member at least one token of its own. Dynamic programming over the sorted
  rows, O(rows x max_rows)."""
  order = sorted(set(rows))
  n = len(order)
  adjacent = [common_length(order[i], order[i + 1]) for i in range(n - 1)]
  best = [0] * (n + 1)  # best[i]: most tokens saved by the first i rows
  choice = [(1, 0)] * (n + 1)  # (run size, its common length) ending at row i
  for i in range(1, n + 1):
    best[i], choice[i] = best[i - 1], (1, 0)
    length = len(order[i - 1]) - 1
    for k in range(2, min(max_rows, i) + 1):
      length = min(length, adjacent[i - k], len(order[i - k]) - 1)
      if length < max(min_shared, 1):
        break
      if best[i - k] + (k - 1) * length > best[i]:
        best[i], choice[i] = best[i - k] + (k - 1) * length, (k, length)
  groups: list[tuple[list[Ids], int]] = []
  i = n
  while i > 0:
    k, length = choice[i]
    groups.append((order[i - k:i], length))
    i -= k
  return groups[::-1]


Pad = Callable[[int], int]


def _exact(n: int) -> int:
  return n


def padded_shape(chunk: Chunk, pad: Pad = _exact,
                 pad_rows: Pad = _exact) -> tuple[int, int, int, int]:
  """(rows, tail tokens, shared beginnings, their tokens) of ``chunk``'s padded arrays
  (``pad``: a length's padded length, the judge's buckets; ``pad_rows``: a row count's)."""
  n, t = pad_rows(len(chunk.rows)), pad(max(map(len, chunk.tails())))
  if not chunk.shared:
    return n, t, 0, 0
  return n, t, pad_rows(len(chunk.shared)), pad(max(map(len, chunk.shared)))


def chunk_cost(chunk: Chunk, pad: Pad = _exact, pad_rows: Pad = _exact) -> int:
  """Tokens that ``chunk``'s padded arrays run: rows x tail tokens + beginnings x theirs."""
  n, t, b, l = padded_shape(chunk, pad, pad_rows)
  return n * t + b * l


def _chunk(part: Sequence[tuple[Ids, int, int]]) -> Chunk:
  """The chunk of (row, group, common length) items: each group's beginning once."""
  shared: dict[int, int] = {}  # group -> index in this chunk's shared parts
  beginnings, group, offset = [], [], []
  for ids, k, length in part:
    if length and k not in shared:
      shared[k] = len(beginnings)
      beginnings.append(ids[:length])
    group.append(shared.get(k, 0))
    offset.append(length)
  return Chunk(tuple(ids for ids, _, _ in part), tuple(beginnings), tuple(group), tuple(offset))


def cut(order: Sequence[tuple[Ids, int, int]], max_rows: int, pad: Pad | None = None,
        pad_rows: Pad = _exact, call_tokens: int = 0) -> list[Chunk]:
  """Chunks of consecutive (row, group, common length) items of ``order``.

  Without ``pad``, every chunk but the last is filled to ``max_rows``. With it, the cuts are the
  ones whose chunks run the fewest padded tokens (``chunk_cost``) plus ``call_tokens`` per chunk,
  fewer chunks on a tie: dynamic programming over the cut points, O(items x max_rows). A chunk
  pads every tail to its longest, so a long tail among short ones, or a group cut in two (its
  beginning then runs in both chunks), is worth a chunk boundary only when that pads less.
  """
  if pad is None:
    return [_chunk(order[k:k + max_rows]) for k in range(0, len(order), max_rows)]
  n = len(order)
  best = [(0, 0)] + [(math.inf, 0)] * n  # best[i]: (tokens, chunks) for the first i items
  size = [0] * (n + 1)  # size of the last chunk of best[i]
  for i in range(1, n + 1):
    for k in range(1, min(max_rows, i) + 1):
      tokens, chunks = best[i - k]
      candidate = (tokens + call_tokens + chunk_cost(_chunk(order[i - k:i]), pad, pad_rows),
                   chunks + 1)
      if candidate < best[i]:
        best[i], size[i] = candidate, k
  bounds, i = [], n
  while i > 0:
    bounds.append((i - size[i], i))
    i -= size[i]
  return [_chunk(order[a:b]) for a, b in reversed(bounds)]


def plan_chunks(rows: Sequence[Ids], max_rows: int, min_shared: int, pad: Pad | None = None,
                pad_rows: Pad = _exact, call_tokens: int = 0) -> list[Chunk]:
  """The calls for ``rows`` (distinct token tuples), <= ``max_rows`` rows each.

  ``min_shared`` 0: no sharing, rows in order of length. Otherwise groups of rows with at least
  ``min_shared`` common tokens, group after group in order of their longest tail (the rows of a
  chunk then pad to similar lengths); that plan is returned when it runs fewer padded tokens
  than the one by length (``chunk_cost``: a chunk pads every tail to its longest, so grouping
  rows by their beginning can pad more than it saves). ``pad``, ``pad_rows`` and ``call_tokens``
  (a call's fixed costs in tokens): see ``cut``.
  """
  if max_rows < 1:
    raise ValueError(f"max_rows must be >= 1, got {max_rows}")
  by_length = sorted(set(rows), key=lambda ids: (len(ids), ids))
  plain = cut([(ids, 0, 0) for ids in by_length], max_rows, pad, pad_rows, call_tokens)
  if min_shared <= 0:
    return plain
  groups = group_rows(rows, max_rows, min_shared)
  groups.sort(key=lambda g: (max(len(m) - g[1] for m in g[0]), g[0][0]))
  order = [(ids, k, length) for k, (members, length) in enumerate(groups)
           for ids in sorted(members, key=lambda ids: (len(ids), ids))]
  shared = cut(order, max_rows, pad, pad_rows, call_tokens)
  total = lambda plan: sum(chunk_cost(c, pad or _exact, pad_rows) + call_tokens for c in plan)
  return shared if total(shared) < total(plain) else plain
