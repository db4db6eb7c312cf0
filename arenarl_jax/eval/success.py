"""Task success by the strict verifier: solved and requirements-met rates, and their change.

The evaluation's headline metric. Every trajectory gets ``env.verify(trajectory)``
(``envs.base.Verification``: met of total requirements); a task's value is the mean over its
trajectories of ``solved`` (0/1) or of ``met / total``, and a rate is the mean over tasks, with a
95% percentile bootstrap interval over tasks (``eval/bootstrap.py``). Against the starting (SFT)
policy's trajectories of the same tasks, the change is the mean over tasks of the per-task
difference, with a PAIRED bootstrap interval (the same task resamples for both policies), so what
the tasks' difficulty shares cancels out. ``limit_stop_rate`` is the share of trajectories that
stopped at a limit (finish reason ``length`` or ``max_turns``). None of this enters a reward.

Two measures say whether what is met is more than format. ``content_met`` is the share of a
task's content requirements that are met (``Verification.content_met_rate``: all but the format
ones, which a well-formed answer that states nothing meets), with its paired change like
``met``. ``first_call_place`` reads the query: of the tasks whose query names a place
(``Environment.query_places``), the share whose first assistant turn calls a tool with one of
those places as an argument; every such task counts in the denominator, so calling fewer places
cannot raise it.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Sequence

import numpy as np

from arenarl_jax import types
from arenarl_jax.envs import base
from arenarl_jax.envs.base import Verification
from arenarl_jax.eval import bootstrap

LIMIT_STOPS = ("length", "max_turns")

Verify = Callable[[types.Trajectory], Verification]
Places = Callable[[str], Sequence[str]]  # task id -> the places its query names


@dataclasses.dataclass(frozen=True)
class Estimate:
  """A mean over tasks with its 95% interval (NaN bounds with fewer than two tasks)."""

  value: float
  low: float
  high: float

  def to_dict(self) -> dict[str, float]:
    return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Success:
  """One policy's verified success on a set of tasks and, with a start, its change from it."""

  tasks: int
  trajectories: int
  solved: Estimate
  met: Estimate
  limit_stop_rate: float
  solved_start: Estimate | None = None  # the starting policy's rates on the same tasks
  met_start: Estimate | None = None
  solved_diff: Estimate | None = None  # policy - start, paired over tasks
  met_diff: Estimate | None = None
  content_met: Estimate | None = None  # where the verifier names its content requirements
  content_met_start: Estimate | None = None
  content_met_diff: Estimate | None = None
  first_call_place: Estimate | None = None  # over the tasks whose query names a place
  first_call_place_start: Estimate | None = None
  first_call_place_diff: Estimate | None = None
  place_tasks: int = 0

  def to_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)  # nested Estimates become dicts, absent ones None


def limit_stop_rate(trajectories: Sequence[types.Trajectory]) -> float:
  """The share of ``trajectories`` that stopped at the token or turn limit (NaN if none)."""
  if not trajectories:
    return math.nan
  return sum(t.finish_reason in LIMIT_STOPS for t in trajectories) / len(trajectories)


def _task_id(trajectory: types.Trajectory, where: str) -> str:
  task_id = trajectory.metadata.get("task_id")
  if not isinstance(task_id, str) or not task_id:
    raise ValueError(f"{where}: trajectory has no metadata['task_id']")
  return task_id


def _estimate(means_K: np.ndarray, samples: int, seed: int) -> Estimate:
  low, high = bootstrap.mean_interval(means_K, samples, seed)
  return Estimate(float(np.mean(means_K)) if means_K.size else math.nan, low, high)


def _has_content(verdicts: Sequence[Verification]) -> bool:
  return bool(verdicts) and all(v.content_total for v in verdicts)


def _place_means(trajectories: Sequence[types.Trajectory], ids: Sequence[str],
                 places: Places) -> tuple[list[str], np.ndarray]:
  """Per task whose query names a place (sorted ids): the share of its trajectories whose first
  turn calls one of them."""
  keep = [k for k, i in enumerate(ids) if places(i)]
  return bootstrap.task_means(
      [float(base.first_call_names(trajectories[k], places(ids[k]))) for k in keep],
      [ids[k] for k in keep])


def success(trajectories: Sequence[types.Trajectory], verdicts: Sequence[Verification], *,
            start: Sequence[types.Trajectory] | None = None,
            start_verdicts: Sequence[Verification] | None = None,
            places: Places | None = None, samples: int = 2000, seed: int = 0) -> Success:
  """The rates of ``trajectories`` (with their ``verdicts``, in order) and, when the starting
  policy's trajectories and verdicts are given, their paired change over the shared tasks.
  ``content_met`` where every verdict counts content requirements; ``first_call_place`` with
  ``places`` (task id -> the places its query names) and a task that names one.

  The starting policy must have trajectories for every task of ``trajectories`` (an error names
  the first missing one); its tasks beyond those are not counted.
  """
  if len(verdicts) != len(trajectories):
    raise ValueError(f"success: {len(trajectories)} trajectories but {len(verdicts)} verdicts")
  ids = [_task_id(t, f"policy[{k}]") for k, t in enumerate(trajectories)]
  tasks, solved_K = bootstrap.task_means([float(v.solved) for v in verdicts], ids)
  _, met_K = bootstrap.task_means([v.met_rate for v in verdicts], ids)
  out = Success(tasks=len(tasks), trajectories=len(trajectories),
                solved=_estimate(solved_K, samples, seed), met=_estimate(met_K, samples, seed),
                limit_stop_rate=limit_stop_rate(trajectories))
  content_K = place_K = None
  if _has_content(verdicts):
    _, content_K = bootstrap.task_means([v.content_met_rate for v in verdicts], ids)
    out = dataclasses.replace(out, content_met=_estimate(content_K, samples, seed))
  if places is not None:
    place_tasks, place_K = _place_means(trajectories, ids, places)
    if place_tasks:
      out = dataclasses.replace(out, first_call_place=_estimate(place_K, samples, seed),
                                place_tasks=len(place_tasks))
    else:
      place_K = None
  if start is None:
    return out
  if start_verdicts is None or len(start_verdicts) != len(start):
    raise ValueError(f"success: {len(start)} starting trajectories need as many verdicts")
  start_ids = [_task_id(t, f"start[{k}]") for k, t in enumerate(start)]
  missing = sorted(set(tasks) - set(start_ids))
  if missing:
    raise ValueError(f"success: the starting policy has no trajectory for task {missing[0]!r} "
                     f"({len(missing)} tasks missing)")
  keep = [k for k, t in enumerate(start_ids) if t in set(tasks)]
  start_tasks, solved0_K = bootstrap.task_means([float(start_verdicts[k].solved) for k in keep],
                                                [start_ids[k] for k in keep])
  _, met0_K = bootstrap.task_means([start_verdicts[k].met_rate for k in keep],
                                   [start_ids[k] for k in keep])
  assert start_tasks == tasks  # both sorted, same set
  out = dataclasses.replace(
      out, solved_start=_estimate(solved0_K, samples, seed),
      met_start=_estimate(met0_K, samples, seed),
      solved_diff=_estimate(solved_K - solved0_K, samples, seed),
      met_diff=_estimate(met_K - met0_K, samples, seed))
  kept = [start_verdicts[k] for k in keep]
  if content_K is not None and _has_content(kept):
    _, content0_K = bootstrap.task_means([v.content_met_rate for v in kept],
                                         [start_ids[k] for k in keep])
    out = dataclasses.replace(out, content_met_start=_estimate(content0_K, samples, seed),
                              content_met_diff=_estimate(content_K - content0_K, samples, seed))
  if place_K is not None:
    _, place0_K = _place_means([start[k] for k in keep], [start_ids[k] for k in keep], places)
    out = dataclasses.replace(out, first_call_place_start=_estimate(place0_K, samples, seed),
                              first_call_place_diff=_estimate(place_K - place0_K, samples, seed))
  return out


def verdicts_of(trajectories: Sequence[types.Trajectory], verify: Verify) -> list[Verification]:
  """``verify`` on each trajectory; a verifier that raises names the trajectory's task."""
  out = []
  for k, t in enumerate(trajectories):
    try:
      out.append(verify(t))
    except Exception as e:  # the verifier's own bug or bad input: say which trajectory
      raise ValueError(f"verify: trajectory {k} (task {t.metadata.get('task_id')!r}): {e}") from e
  return out
