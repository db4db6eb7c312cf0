"""Per-run numbers a study's own tables read from result files: step means, gains, correlations.

The generic tables (``tables.py``) pool per-task outcomes over an arm's seeds. Some questions are
about runs instead: how many judge requests a topology spent per group, how well its rewards
recovered the noise-free checker's order, and whether runs that recovered the order better
gained more. These read a result file's per-step rows (``record.STEP_KEYS``) and its per-task
outcomes.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np


def step_mean(result: dict, key: str) -> float:
  """The mean of ``key`` over the run's RL steps that logged a finite value (NaN if none)."""
  vals = [row[key] for row in result["steps"] if key in row and row[key] is not None
          and math.isfinite(row[key])]
  return float(np.mean(vals)) if vals else math.nan


def gain(result: dict, metric: str) -> float:
  """The run's mean over test tasks of ``<metric>_end - <metric>_start`` (tasks with both)."""
  diffs = [t[f"{metric}_end"] - t[f"{metric}_start"] for t in result["tasks"].values()
           if t.get(f"{metric}_end") is not None and t.get(f"{metric}_start") is not None]
  return float(np.mean(diffs)) if diffs else math.nan


def arm_runs(results: Sequence[dict], arm: str) -> list[dict]:
  """The arm's result files, by seed."""
  return sorted((r for r in results if r["arm"] == arm), key=lambda r: r["seed"])


def arm_step_mean(results: Sequence[dict], arm: str, key: str) -> float:
  """The mean over the arm's runs of each run's ``step_mean`` (NaN when no run logged it)."""
  vals = [v for v in (step_mean(r, key) for r in arm_runs(results, arm)) if math.isfinite(v)]
  return float(np.mean(vals)) if vals else math.nan


def correlation(xs: Sequence[float], ys: Sequence[float], samples: int = 2000,
                seed: int = 0) -> tuple[float, float, float, int]:
  """(Pearson r, 95% bootstrap low, high, n) over the finite (x, y) pairs; the bootstrap
  resamples pairs (runs). NaN where undefined: fewer than 3 pairs, or a constant side."""
  pairs = np.array([(x, y) for x, y in zip(xs, ys) if math.isfinite(x) and math.isfinite(y)],
                   np.float64).reshape(-1, 2)
  n = len(pairs)
  if n < 3 or np.ptp(pairs[:, 0]) == 0 or np.ptp(pairs[:, 1]) == 0:
    return math.nan, math.nan, math.nan, n
  r = float(np.corrcoef(pairs[:, 0], pairs[:, 1])[0, 1])
  rng = np.random.default_rng(seed)
  draws = []
  for idx in rng.integers(0, n, (samples, n)):
    x, y = pairs[idx, 0], pairs[idx, 1]
    if np.ptp(x) > 0 and np.ptp(y) > 0:  # a resample of one repeated run has no correlation
      draws.append(np.corrcoef(x, y)[0, 1])
  if len(draws) < samples // 2:
    return r, math.nan, math.nan, n
  low, high = np.percentile(draws, [2.5, 97.5])
  return r, float(low), float(high), n


def fmt(x: float, digits: int = 3, signed: bool = False) -> str:
  """``x`` for a table cell (``n/a`` for NaN)."""
  if x is None or not math.isfinite(x):
    return "n/a"
  return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"
