"""The percentile bootstrap over tasks that every interval of the evaluation uses.

Trajectories of one task share a query, so they are not independent draws: the unit of
resampling is the task. ``resamples`` draws ``samples`` resamples of ``num_tasks`` task indices
(with replacement) from ``seed``; an interval is the 2.5% and 97.5% quantiles (numpy's linear
interpolation) of a statistic over those resamples. A paired interval applies the SAME resamples
to per-task differences, so task difficulty, shared by both policies, cancels out.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

LEVEL = 0.95


def resamples(num_tasks: int, samples: int, seed: int) -> np.ndarray:
  """int [samples, num_tasks]: task indices of each resample, deterministic from ``seed``."""
  return np.random.default_rng(seed).integers(0, num_tasks, (samples, num_tasks))


def percentile_interval(values_R: np.ndarray) -> tuple[float, float]:
  """The central 95% of a statistic's resampled values (NaN entries, empty resamples, ignored)."""
  tail = (1.0 - LEVEL) / 2
  low, high = np.nanquantile(np.asarray(values_R, np.float64), [tail, 1.0 - tail])
  return float(low), float(high)


def task_means(values: Sequence[float], task_ids: Sequence[str]) -> tuple[list[str], np.ndarray]:
  """(sorted task ids, float64 [K] the mean of ``values`` per task)."""
  if len(values) != len(task_ids):
    raise ValueError(f"task_means: {len(values)} values but {len(task_ids)} task ids")
  tasks = sorted(set(task_ids))
  where = {t: k for k, t in enumerate(tasks)}
  sum_K = np.zeros(len(tasks))
  count_K = np.zeros(len(tasks))
  for v, t in zip(values, task_ids):
    sum_K[where[t]] += v
    count_K[where[t]] += 1
  return tasks, sum_K / np.maximum(count_K, 1)


def mean_interval(means_K: np.ndarray, samples: int, seed: int) -> tuple[float, float]:
  """The 95% interval of the mean over tasks of per-task values (or per-task differences).

  With fewer than two tasks there is no spread to resample: both bounds are NaN.
  """
  means_K = np.asarray(means_K, np.float64)
  if means_K.size < 2:
    return math.nan, math.nan
  return percentile_interval(means_K[resamples(means_K.size, samples, seed)].mean(axis=1))
