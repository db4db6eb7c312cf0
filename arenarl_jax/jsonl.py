"""JSON lines logs: values made JSON-safe, and files that are only ever created, never overwritten
(the rollout logs of RL steps and the evaluation logs)."""
from __future__ import annotations

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
