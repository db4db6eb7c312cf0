"""An arm's per-task outcomes as [seeds, tasks] arrays, and the intervals pooled from them.

Result files (``record.py``) hold, per test task, each outcome at the start and at the end of a
run. An arm's runs differ only in seed; its array has one row per seed (sorted) and one column per
test task (sorted ids, the tasks every run of the arm evaluated). A comparison of two arms pairs
seed s with seed s (the same SFT start and the same seeded prompt order) over the seeds both have.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from arenarl_jax.experiments import hierarchical

START = "start"  # ``versus`` naming a run's own start instead of another arm


def _runs(results: Sequence[dict], arm: str) -> dict[int, dict]:
  runs = {int(r["seed"]): r for r in results if r["arm"] == arm}
  if not runs:
    raise KeyError(f"no results for arm {arm!r}")
  return runs


def values(results: Sequence[dict], arm: str, metric: str, when: str = "end",
           seeds: Sequence[int] | None = None) -> tuple[list[int], list[str], np.ndarray]:
  """(seeds, task ids, float [S, K]) of ``<metric>_<when>`` for the arm's runs (None -> NaN)."""
  runs = _runs(results, arm)
  seeds = sorted(runs) if seeds is None else list(seeds)
  tasks = sorted(set.intersection(*(set(runs[s]["tasks"]) for s in seeds)))
  key = f"{metric}_{when}"
  # .get: a result file written before an outcome was recorded has none of it (NaN).
  table = [[runs[s]["tasks"][t].get(key) for t in tasks] for s in seeds]
  return seeds, tasks, np.array([[np.nan if v is None else v for v in row] for row in table],
                                np.float64).reshape(len(seeds), len(tasks))


def arm_interval(results, arm, metric, when="end", samples=2000, seed=0):
  """The arm's mean ``<metric>_<when>`` over seeds and tasks, with its interval."""
  return hierarchical.interval(values(results, arm, metric, when)[2], samples, seed)


def gap_values(results: Sequence[dict], arm: str, versus: str, metric: str) -> np.ndarray:
  """Paired differences [S, K]: ``arm``'s end minus ``versus``'s end on the seeds both ran
  (matched seed by seed) and the tasks both evaluated; ``versus="start"``: the arm's end minus
  its own start."""
  if versus == START:
    _, _, end = values(results, arm, metric, "end")
    _, _, start = values(results, arm, metric, "start")
    return end - start
  common = sorted(set(_runs(results, arm)) & set(_runs(results, versus)))
  if not common:
    raise ValueError(f"arms {arm!r} and {versus!r} share no seed: nothing to pair")
  _, tasks_a, a = values(results, arm, metric, "end", common)
  _, tasks_b, b = values(results, versus, metric, "end", common)
  shared = sorted(set(tasks_a) & set(tasks_b))
  return (a[:, [tasks_a.index(t) for t in shared]] - b[:, [tasks_b.index(t) for t in shared]])


def gap_interval(results, arm, versus, metric, samples=2000, seed=0):
  """The paired gap (``gap_values``) with its hierarchical interval."""
  return hierarchical.interval(gap_values(results, arm, versus, metric), samples, seed)
