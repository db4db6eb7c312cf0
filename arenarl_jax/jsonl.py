"""JSON lines logs: values made JSON-safe, files that are only ever created, never overwritten
(the rollout logs of RL steps and the evaluation logs), and reading them back."""
from __future__ import annotations

import json
import math
import os
from typing import Any, Mapping

import numpy as np


def jsonable(x: Any) -> Any:
  """``x`` as JSON-safe values: arrays and tuples to lists, NaN/inf to None, keys to str, other
  objects to their ``str``."""
  if isinstance(x, Mapping):
    return {str(k): jsonable(v) for k, v in x.items()}
  if isinstance(x, (list, tuple)):
    return [jsonable(v) for v in x]
  if isinstance(x, np.ndarray):
    return jsonable(x.tolist())
  if isinstance(x, np.generic):
    return jsonable(x.item())
  if isinstance(x, float):
    return x if math.isfinite(x) else None
  if x is None or isinstance(x, (str, int, bool)):
    return x
  return str(x)


def create_jsonl(directory: str | os.PathLike, base_name: str):
  """A new file ``<directory>/<base_name>.jsonl`` opened for writing (``_1``, ``_2``, ... when
  that exists: a file is only ever created, never overwritten); returns (file, path)."""
  os.makedirs(directory, exist_ok=True)
  for n in range(10_000):
    path = os.path.join(directory, base_name + (f"_{n}" if n else "") + ".jsonl")
    try:
      return open(path, "x", encoding="utf-8"), path  # pylint: disable=consider-using-with
    except FileExistsError:
      continue
  raise FileExistsError(f"{directory}: too many files named {base_name}_*.jsonl")


def read_numbered(path: str | os.PathLike) -> list[tuple[int, dict]]:
  """The JSON objects of ``path`` with their line numbers (blank lines skipped); a line that is
  not a JSON object is a ValueError naming the file and the line."""
  rows = []
  try:
    with open(path, encoding="utf-8") as f:
      for n, line in enumerate(f, 1):
        if not line.strip():
          continue
        try:
          row = json.loads(line)
        except json.JSONDecodeError as e:
          raise ValueError(f"{path}:{n}: not valid JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(row, dict):
          raise ValueError(f"{path}:{n}: expected a JSON object, got {type(row).__name__}")
        rows.append((n, row))
  except UnicodeDecodeError as e:
    raise ValueError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
  return rows


def read_jsonl(path: str | os.PathLike) -> list[dict]:
  """The JSON objects of ``path`` (``read_numbered`` without the line numbers)."""
  return [row for _, row in read_numbered(path)]
