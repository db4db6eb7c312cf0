"""The hierarchical bootstrap that pools an arm's seeds and test tasks into one interval.

A study's number is a mean over seeds (training runs) and test tasks. Both are samples: another
seed trains another policy, another test set has other tasks. Each resample draws the seeds with
replacement and, independently, the tasks with replacement; the statistic is the mean over the
drawn seeds and drawn tasks. Every seed evaluates the SAME test tasks (the test split comes from
``env.seed``, not from the run's seed), so the design is crossed, not nested: one task draw serves
every seed of a resample. That keeps the tasks' sampling error whole however many seeds there are
(averaging more seeds does not make the test set larger), and with one seed, or seeds that agree
exactly, the interval is exactly ``eval/bootstrap.py``'s task bootstrap with the same ``seed``.

Paired differences (arm A minus arm B, seed s against seed s on the same tasks; a run's end minus
its start) are the same bootstrap applied to the per-(seed, task) differences, so what a task's
difficulty and a seed's shared start contribute cancels within each resample.
"""
from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np

from arenarl_jax.eval import bootstrap


@dataclasses.dataclass(frozen=True)
class Interval:
  """A mean over seeds and tasks with its 95% hierarchical bootstrap interval."""

  value: float
  low: float
  high: float
  seeds: int
  tasks: int

  def excludes_zero(self) -> int:
    """+1 when the interval lies above 0, -1 below, 0 when it contains 0 (or is undefined)."""
    if math.isnan(self.low) or math.isnan(self.high):
      return 0
    return 1 if self.low > 0 else -1 if self.high < 0 else 0


def seed_resamples(num_seeds: int, samples: int, seed: int) -> np.ndarray:
  """int [samples, num_seeds]: seed indices of each resample (a stream apart from the tasks')."""
  rng = np.random.default_rng(np.random.SeedSequence([seed, 1]))
  return rng.integers(0, num_seeds, (samples, num_seeds))


def interval(values_SK: np.ndarray, samples: int = 2000, seed: int = 0) -> Interval:
  """The mean of ``values_SK`` (float [seeds, tasks]; NaN = no value, left out of the means) and
  its 95% hierarchical bootstrap interval. With fewer than two tasks, or no value, the bounds
  are NaN."""
  values_SK = np.asarray(values_SK, np.float64)
  if values_SK.ndim != 2 or values_SK.size == 0:
    raise ValueError(f"interval: expected a non-empty [seeds, tasks] array, got {values_SK.shape}")
  num_seeds, num_tasks = values_SK.shape
  value = float(np.nanmean(values_SK)) if np.isfinite(values_SK).any() else math.nan
  if num_tasks < 2 or math.isnan(value):  # one task, or no value at all: no interval
    return Interval(value, math.nan, math.nan, num_seeds, num_tasks)
  task_RK = bootstrap.resamples(num_tasks, samples, seed)
  seed_RS = seed_resamples(num_seeds, samples, seed)
  drawn_RSK = values_SK[seed_RS[:, :, None], task_RK[:, None, :]]
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)  # a resample of only NaN has no mean
    stat_R = np.nanmean(drawn_RSK.reshape(samples, -1), axis=1)
  low, high = bootstrap.percentile_interval(stat_R)
  return Interval(value, low, high, num_seeds, num_tasks)
