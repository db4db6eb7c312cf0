"""Run metrics: TensorBoard event files (tensorboardX) and a jsonl log, from process 0 only.

One writer, one call site in the loop (``MetricsWriter.write``). Keys under ``time/`` are timings
(they differ between identical runs); everything else is reproducible from the seed. On resume the
jsonl log is cut back to the resumed step so a replayed step is not logged twice.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Any, Iterable, Mapping

import jax
import numpy as np

from arenarl_jax import jsonl


def _scalar(value: Any) -> float | int:
  value = np.asarray(value)
  if value.size != 1:
    raise ValueError(f"metrics: expected a scalar, got shape {value.shape}")
  value = value.reshape(())
  return int(value) if np.issubdtype(value.dtype, np.integer) else float(value)


class MetricsWriter:
  """Writes ``{key: scalar}`` per step to ``workdir/metrics.jsonl`` and ``workdir/tb``."""

  def __init__(self, workdir: str, *, tensorboard: bool = True, jsonl: bool = True,
               resume_step: int = 0, enabled: bool | None = None):
    self.enabled = jax.process_index() == 0 if enabled is None else enabled
    self.path = os.path.join(workdir, "metrics.jsonl")
    self._jsonl = self._tb = None
    if not self.enabled:
      return
    os.makedirs(workdir, exist_ok=True)
    if jsonl:
      kept = []
      if os.path.exists(self.path):
        with open(self.path, encoding="utf-8") as f:
          kept = [line for line in f if line.strip() and json.loads(line)["step"] <= resume_step]
      self._jsonl = open(self.path, "w", encoding="utf-8")
      self._jsonl.writelines(kept)
      self._jsonl.flush()
    if tensorboard:
      self._tb = _summary_writer()(os.path.join(workdir, "tb"), purge_step=resume_step + 1)

  def write(self, step: int, metrics: Mapping[str, Any]) -> dict[str, float | int]:
    """Logs one step (device arrays are fetched here); returns the host scalars."""
    values = {k: _scalar(v) for k, v in jax.device_get(dict(metrics)).items()}
    if not self.enabled:
      return values
    if self._jsonl is not None:
      self._jsonl.write(json.dumps({"step": int(step), **values}, sort_keys=True) + "\n")
      self._jsonl.flush()
    if self._tb is not None:
      for key, value in values.items():
        self._tb.add_scalar(key, value, int(step))
      self._tb.flush()
    return values

  def close(self) -> None:
    for sink in (self._jsonl, self._tb):
      if sink is not None:
        sink.close()
    self._jsonl = self._tb = None


def read_jsonl(path: str) -> list[dict]:
  return jsonl.read_jsonl(path)


def without_timings(rows: Iterable[Mapping[str, Any]]) -> list[dict]:
  """The reproducible part of logged rows (drops ``time/*`` keys)."""
  return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in rows]


def progress(total: int, *, desc: str, initial: int = 0, enabled: bool | None = None):
  """A tqdm bar with rate and ETA on stderr (process 0 only; disabled otherwise)."""
  from tqdm import tqdm
  enabled = jax.process_index() == 0 if enabled is None else enabled
  return tqdm(total=total, initial=initial, desc=desc, disable=not enabled, file=sys.stderr,
              dynamic_ncols=True, leave=True)


def _summary_writer():
  """tensorboardX's SummaryWriter (flax.metrics.tensorboard would import TensorFlow).

  tensorboardX imports torch, when installed, only to accept torch tensors, which this module
  never passes; that import alone takes seconds on a small CPU, in every run. It is skipped unless
  torch is already loaded; a later ``import torch`` works as usual."""
  if "torch" in sys.modules:
    from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
    return SummaryWriter
  sys.modules["torch"] = None  # makes tensorboardX's guarded `import torch` fail fast
  try:
    from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
  finally:
    del sys.modules["torch"]
  return SummaryWriter
