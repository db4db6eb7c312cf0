"""Bucketed chunk lengths, so prompts and observations of any length reuse few compiled programs."""
from __future__ import annotations

from typing import Sequence

import numpy as np


def power_of_two_buckets(max_len: int, min_len: int = 16) -> tuple[int, ...]:
  """min_len, 2*min_len, ... and finally max_len itself (the cache length)."""
  out, b = [], min_len
  while b < max_len:
    out.append(b)
    b *= 2
  return tuple(out) + (max_len,)


def bucket_length(n: int, buckets: Sequence[int], *, what: str = "chunk") -> int:
  """The smallest bucket >= n."""
  for b in buckets:
    if b >= n:
      return b
  raise ValueError(f"{what} of {n} tokens is longer than the largest bucket {max(buckets)}")


def pad_rows(rows: Sequence[Sequence[int]], length: int, pad_id: int = 0):
  """(tokens [R, length] int32 right-padded with pad_id, counts [R] int32)."""
  tokens = np.full((len(rows), length), pad_id, np.int32)
  counts = np.zeros((len(rows),), np.int32)
  for i, row in enumerate(rows):
    row = np.asarray(row, np.int64).reshape(-1)
    if len(row) > length:
      raise ValueError(f"row {i}: {len(row)} tokens do not fit a chunk of {length}")
    tokens[i, : len(row)] = row
    counts[i] = len(row)
  return tokens, counts
