"""Evaluation: the policy's win rates against opponents with 95% intervals, and its rollouts' shape.

    settings = EvalSettings.from_config(config.eval)
    tasks = eval_tasks(env, settings)                       # test tasks, per subtask
    refs = reference_trajectories(env, tasks)               # the references, as Trajectories
    ... a rollout of ``tasks`` at settings.group_size with settings.sampling(...) -> trajectories
    report = evaluate(trajectories, refs, judge, settings=settings, step=step,
                      second=sft_trajectories)              # the starting policy, when given
    report.scalars()                                        # flat metrics for TensorBoard / jsonl
    write_jsonl(report, workdir / "eval")                   # never overwrites an earlier file

**Win rate.** Each policy trajectory plays the opponent's trajectory for the same task once:
``Match(group=k, i=0, j=1, query, p=policy, q=opponent)``, all matches of one opponent in ONE
batched judge call; every judge result is already bidirectional (both orders summed, scores in
[0, 20]). A match is a win (1) when ``score_p - score_q > tally.TOLERANCE``, a loss (0) below
``-TOLERANCE``, else a tie (0.5); the win rate is the mean over judged matches. A FAILED match
(``MatchResult.ok`` False) carries no information about either side: it is left out of the win
rate and counted (``failed``), never scored as a tie, so a policy that breaks the judge when it is
losing gains nothing it can hide.

**95% interval** (``eval.interval``):
- ``bootstrap`` (default): a percentile bootstrap over TASKS. ``eval.bootstrap_samples``
  resamples of the tasks (with replacement, drawn from ``eval.seed``); each resample's rate is its
  summed match scores over its judged matches; the interval is the 2.5% and 97.5% quantiles
  (numpy's linear interpolation) of those rates. Resampling whole tasks keeps the G matches of a
  task together (they share a query, so they are not independent). Deterministic from the seed.
- ``t``: the normal-theory interval on the per-match scores x in {0, 0.5, 1}: mean +- t(0.975,
  n - 1) * s / sqrt(n), s the sample standard deviation (ddof 1), clipped to [0, 1]. A Wilson
  interval is exact only for 0/1 outcomes; with ties the scores are three-valued, so this uses
  the plain t interval.
With fewer than two tasks (bootstrap) or two judged matches (t) the interval is the whole [0, 1];
with none it is NaN. Either interval collapses to a point when every match has the same outcome
(10 wins of 10 gives [1, 1]): read the counts next to it.

**Imported references without tool results.** Imported data may list the reference's tool calls
but not what the tools returned. The judge would then see the policy's evidence and only the
reference's claims. ``eval.strip_tool_results``: ``auto`` (default) detects, per match, an
opponent that made tool calls but carries no non-blank tool result, and shows the judge the policy
side with its tool results removed too (both sides then render every call as "(no result)");
``always`` strips the policy side in every match; ``never`` does not. The policy trajectory in the
report and the jsonl log is the original; the match log says when its results were stripped.
A judge that reads tool results for ground truth (the rubric judge's checker) then sees failed
calls, so use stripping only with references that need it.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Sequence

import numpy as np
from scipy import stats as scipy_stats

from arenarl_jax.eval import bootstrap
from arenarl_jax.eval import report
from arenarl_jax.eval import success as success_lib
from arenarl_jax.text import messages as messages_lib
from arenarl_jax import types
from arenarl_jax.eval import tally
from arenarl_jax.eval.tally import WinRate
from arenarl_jax.data import records
from arenarl_jax.rollout import stats as rollout_stats
from arenarl_jax.envs import base
from arenarl_jax.eval.report import Comparison, EvalReport, write_jsonl  # noqa: F401 (re-exported)
from arenarl_jax.eval.settings import (  # noqa: F401 (re-exported)
    INTERVALS, REFERENCE, STRIP_MODES, EvalSettings)

# ------------------------------------------------------------------------------------ win rates
def interval(scores: Sequence[float | None], task_ids: Sequence[str], *, method: str = "bootstrap",
             samples: int = 2000, seed: int = 0) -> tuple[float, float]:
  """The 95% interval of the mean score (None = failed, left out); module docstring."""
  if method not in INTERVALS:
    raise ValueError(f"interval method must be one of {INTERVALS}, got {method!r}")
  if len(scores) != len(task_ids):
    raise ValueError(f"interval: {len(scores)} scores but {len(task_ids)} task ids")
  judged = np.array([s for s in scores if s is not None], np.float64)
  if judged.size == 0:
    return math.nan, math.nan
  if method == "t":
    n = judged.size
    if n < 2:
      return 0.0, 1.0
    half = scipy_stats.t.ppf(0.975, n - 1) * judged.std(ddof=1) / math.sqrt(n)
    mean = judged.mean()
    return float(max(mean - half, 0.0)), float(min(mean + half, 1.0))
  tasks = sorted(set(task_ids))
  if len(tasks) < 2:
    return 0.0, 1.0
  where = {t: k for k, t in enumerate(tasks)}
  sum_K = np.zeros(len(tasks))
  count_K = np.zeros(len(tasks))
  for s, t in zip(scores, task_ids):
    if s is not None:
      sum_K[where[t]] += s
      count_K[where[t]] += 1
  draw_RK = bootstrap.resamples(len(tasks), samples, seed)
  with np.errstate(invalid="ignore", divide="ignore"):
    rate_R = sum_K[draw_RK].sum(1) / count_K[draw_RK].sum(1)  # NaN: a resample with none judged
  return bootstrap.percentile_interval(rate_R)


def _rate(scores: Sequence[float | None], task_ids: Sequence[str], method: str, samples: int,
          seed: int) -> WinRate:
  low, high = interval(scores, task_ids, method=method, samples=samples, seed=seed)
  return dataclasses.replace(tally.count(scores), tasks=len(set(task_ids)), low=low,
                             high=high, method=method)


def lacks_tool_results(trajectory: types.Trajectory) -> bool:
  """Whether ``trajectory`` made tool calls but carries no non-blank tool result (imported)."""
  calls = sum(len(s.tool_calls) for s in trajectory.steps)
  return calls > 0 and not any(r.strip() for s in trajectory.steps for r in s.tool_results)


def strip_tool_results(trajectory: types.Trajectory) -> types.Trajectory:
  """``trajectory`` with every step's tool results removed (the calls stay)."""
  steps = tuple(dataclasses.replace(s, tool_results=()) for s in trajectory.steps)
  return dataclasses.replace(trajectory, steps=steps)


def task_id_of(trajectory: types.Trajectory, where: str) -> str:
  task_id = trajectory.metadata.get("task_id")
  if not isinstance(task_id, str) or not task_id:
    raise ValueError(f"{where}: trajectory has no metadata['task_id']")
  return task_id


def pair_opponents(policy: Sequence[types.Trajectory], opponent: Sequence[types.Trajectory],
                   name: str = "opponent") -> list[types.Trajectory]:
  """The opponent trajectory each policy trajectory plays, matched by ``task_id``.

  An opponent task holds one trajectory (played by every policy sample of that task) or as many
  as the policy has (paired in order: sample g plays the opponent's sample g).
  """
  by_task: dict[str, list[types.Trajectory]] = {}
  for k, t in enumerate(opponent):
    by_task.setdefault(task_id_of(t, f"{name}[{k}]"), []).append(t)
  counts: dict[str, int] = {}
  for k, t in enumerate(policy):
    tid = task_id_of(t, f"policy[{k}]")
    counts[tid] = counts.get(tid, 0) + 1
  out = []
  seen: dict[str, int] = {}
  for k, t in enumerate(policy):
    tid = task_id_of(t, f"policy[{k}]")
    theirs = by_task.get(tid)
    if not theirs:
      raise ValueError(f"{name}: no trajectory for task {tid!r} (policy[{k}])")
    if len(theirs) not in (1, counts[tid]):
      raise ValueError(f"{name}: task {tid!r} has {len(theirs)} trajectories; the policy has "
                       f"{counts[tid]} (need 1 or the same number)")
    g = seen.get(tid, 0)
    seen[tid] = g + 1
    out.append(theirs[g] if len(theirs) > 1 else theirs[0])
  return out


def win_rate(policy: Sequence[types.Trajectory], opponent: Sequence[types.Trajectory],
             judge: types.Judge, *, name: str = REFERENCE, interval_method: str = "bootstrap",
             samples: int = 2000, seed: int = 0, strip: str = "auto") -> Comparison:
  """The policy's win rate against ``opponent`` (same tasks, matched by ``task_id``), per subtask
  and overall, from one batched judge call; failed matches left out and counted."""
  if strip not in STRIP_MODES:
    raise ValueError(f"strip must be one of {STRIP_MODES}, got {strip!r}")
  policy = list(policy)
  paired = pair_opponents(policy, opponent, name)
  matches, stripped = [], []
  for k, (p, q) in enumerate(zip(policy, paired)):
    cut = strip == "always" or (strip == "auto" and lacks_tool_results(q))
    stripped.append(cut)
    matches.append(types.Match(group=k, i=0, j=1, query=p.query,
                               p=strip_tool_results(p) if cut else p, q=q))
  results = list(judge.judge(matches)) if matches else []
  if len(results) != len(matches):
    raise ValueError(f"judge {judge!r} returned {len(results)} results for {len(matches)} matches")
  scores = [tally.outcome(r) for r in results]
  task_ids = [task_id_of(p, f"policy[{k}]") for k, p in enumerate(policy)]
  subtasks = [types.subtask_of(p) for p in policy]
  by_subtask = {}
  for s in sorted(set(subtasks)):
    keep = [k for k, x in enumerate(subtasks) if x == s]
    by_subtask[s] = _rate([scores[k] for k in keep], [task_ids[k] for k in keep],
                          interval_method, samples, seed)
  return Comparison(opponent=name, matches=tuple(matches), results=tuple(results),
                    scores=tuple(scores), stripped=tuple(stripped),
                    overall=_rate(scores, task_ids, interval_method, samples, seed),
                    by_subtask=by_subtask)


# --------------------------------------------------------------------------------- references
def eval_tasks(env: base.Environment, settings: EvalSettings = EvalSettings()) -> list[base.Task]:
  """The first ``tasks_per_subtask`` tasks (0 = all) of each ``<eval.split>_<subtask>`` split
  (``test_<subtask>`` by default)."""
  out = []
  for subtask in env.subtasks:
    tasks = env.tasks(f"{settings.split}_{subtask}")
    out += tasks[:settings.tasks_per_subtask] if settings.tasks_per_subtask else tasks
  return out


def reference_trajectories(env: base.Environment | None,
                           tasks: Sequence[base.Task | records.Example], seed: int | None = None,
                           *, error_rate: float | None = None) -> list[types.Trajectory]:
  """One reference Trajectory per task, with metadata task_id, subtask, env and source.

  A ``records.Example`` with a ``reference`` (a test split's record, imported or built) gives that
  conversation. A ``Task`` (or an example without one, looked up with ``env.task(id)``) gets the
  environment's expert at ``error_rate`` (default ``env.reference_error_rate``) with the generator
  the dataset builder uses, ``records.task_rng(seed, id)`` (``seed`` default ``env.seed``): the
  same references as the test split built from the same environment.
  """
  out = []
  for k, item in enumerate(tasks):
    is_example = isinstance(item, records.Example)
    tid = item.task_id if is_example else item.id
    convo = item.reference if is_example else ()
    if not convo:
      if env is None:
        raise ValueError(f"reference_trajectories: tasks[{k}] ({tid!r}) has no reference and no "
                         "environment was given")
      task = env.task(tid) if is_example else item
      rate = env.reference_error_rate if error_rate is None else error_rate
      raw = env.expert(task, rate, records.task_rng(env.seed if seed is None else seed, tid))
      convo = records.with_prompt([{"role": "user", "content": task.query}],
                                  records.canonical_messages(raw))
    try:
      out.append(messages_lib.trajectory_from_messages(
          convo, metadata={"task_id": tid, "subtask": item.subtask, "env": item.env,
                           "source": REFERENCE}))
    except messages_lib.MessageError as e:
      raise ValueError(f"reference of task {tid!r} (tasks[{k}]): {e}") from e
  return out


# ---------------------------------------------------------------------------------- evaluation
def flatten(trajectories: Sequence[types.Trajectory] | Sequence[Sequence[types.Trajectory]]
            ) -> list[types.Trajectory]:
  """A flat list from a rollout's ``trajectories[b][g]`` (or an already flat list)."""
  out: list[types.Trajectory] = []
  for item in trajectories:
    out.extend([item] if isinstance(item, types.Trajectory) else item)
  return out


def is_valid(trajectory: types.Trajectory,
             valid: Callable[[str, Any], tuple[bool, str]] | None = None) -> bool:
  """A valid generation: the rollout's ``finish_reason == "answer"`` (it already applied the
  environment's ``valid``); a trajectory without a finish reason (built from messages) is checked
  with ``valid(answer, task_id)`` when given, else by a non-blank answer."""
  if trajectory.finish_reason:
    return trajectory.finish_reason == "answer"
  if valid is None:
    return bool(trajectory.final_answer.strip())
  return bool(valid(trajectory.final_answer, trajectory.metadata.get("task_id"))[0])


def evaluate(trajectories: Sequence[types.Trajectory] | Sequence[Sequence[types.Trajectory]],
             references: Sequence[types.Trajectory] | None, judge: types.Judge, *,
             settings: EvalSettings = EvalSettings(), step: int = 0,
             second: Sequence[types.Trajectory] | Sequence[Sequence[types.Trajectory]] | None
             = None, valid: Callable[[str, Any], tuple[bool, str]] | None = None,
             verify: success_lib.Verify | None = None,
             places: success_lib.Places | None = None) -> EvalReport:
  """The policy's evaluation report from its test-task rollouts (``trajectories[b][g]`` or flat).

  Win rates against ``references`` (named ``"reference"``) and, when given, against ``second``
  (another policy's rollouts of the same tasks, e.g. the starting SFT policy; named
  ``settings.opponent``), per subtask and overall, one batched judge call per opponent; the
  generation statistics of the policy's trajectories (``rollout/stats.generation_stats``); and,
  with the environment's strict verifier ``verify``, the solved and requirements-met rates and
  their paired change from ``second`` (``eval/success.py``), the content-met rate where the
  verifier names its content requirements, and with ``places`` (task id -> the places its query
  names) the first-call place rate.
  """
  policy = flatten(trajectories)
  if not policy:
    raise ValueError("evaluate: no trajectories")
  start = None if second is None else flatten(second)
  opponents = {}
  if references is not None:
    opponents[REFERENCE] = list(references)
  if start is not None:
    opponents[settings.opponent or "opponent"] = start
  comparisons = {
      name: win_rate(policy, opp, judge, name=name, interval_method=settings.interval,
                     samples=settings.bootstrap_samples, seed=settings.seed,
                     strip=settings.strip_tool_results)
      for name, opp in opponents.items()}
  flags = tuple(is_valid(t, valid) for t in policy)
  subtasks = [types.subtask_of(t) for t in policy]
  generation = {report.OVERALL: rollout_stats.generation_stats(policy, flags)}
  for s in sorted(set(subtasks)):
    keep = [k for k, x in enumerate(subtasks) if x == s]
    generation[s] = rollout_stats.generation_stats([policy[k] for k in keep],
                                                 [flags[k] for k in keep])
  verdicts, start_verdicts, by_where = None, None, {}
  if verify is not None:
    verdicts = success_lib.verdicts_of(policy, verify)
    start_verdicts = None if start is None else success_lib.verdicts_of(start, verify)
    start_subtasks = None if start is None else [types.subtask_of(t) for t in start]
    for where in [*sorted(set(subtasks)), report.OVERALL]:
      keep = [k for k, x in enumerate(subtasks) if where in (x, report.OVERALL)]
      keep0 = None if start is None else [k for k, x in enumerate(start_subtasks)
                                          if where in (x, report.OVERALL)]
      by_where[where] = success_lib.success(
          [policy[k] for k in keep], [verdicts[k] for k in keep],
          start=None if start is None else [start[k] for k in keep0],
          start_verdicts=None if start is None else [start_verdicts[k] for k in keep0],
          places=places, samples=settings.bootstrap_samples, seed=settings.seed)
  return EvalReport(step=int(step), trajectories=tuple(policy), valid=flags,
                    comparisons=comparisons, generation=generation,
                    verdicts=None if verdicts is None else tuple(verdicts), success=by_where,
                    start_verdicts=None if start_verdicts is None else tuple(start_verdicts))
