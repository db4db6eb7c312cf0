"""The evaluation stage: greedy rollouts of held-out test tasks, judged by the noise-free checker.

    ev = Evaluator(env, policy, workdir, settings=eval_settings, sampling=sampling_settings,
                   rollout=rollout_settings, mesh=mesh)  # built by pipeline.py
    sft_rows = ev.rollouts(sft_params)                 # the starting policy, once
    report = ev.evaluate(params, step, second=sft_rows)  # vs references and vs the SFT policy

The tasks are the first ``eval.tasks_per_subtask`` of every ``test_<subtask>`` split (or, with
``eval.split=valid`` while choosing settings, of every ``valid_<subtask>`` split); the
references are the environment's expert at ``env.reference_error_rate`` (the test split's
references). The judge is the rubric judge WITHOUT noise (the environment's checker), whatever
judge trained the policy: the training judge's noise is part of the experiment, the measurement
must not share it. Rollouts use ``eval.sampling`` (greedy by default), so an evaluation is a
deterministic function of the parameters. The headline is the environment's strict verifier
(``env.verify``: the solved and requirements-met rates, and their change from the starting
policy paired over tasks); it never enters a reward. Each evaluation writes
``<workdir>/eval/eval_<step>.jsonl`` (trajectories with their verdicts, match logs and the
checker's per-dimension scores; never overwritten),
appends its summary to ``<workdir>/eval/summary.jsonl`` and its scalars to the run's metrics.
"""
from __future__ import annotations

import functools
import json
import os
import time
from typing import Any, Callable, Sequence

import jax
from jax.sharding import Mesh

from arenarl_jax.eval import compare
from arenarl_jax.eval import report as report_lib
from arenarl_jax import types
from arenarl_jax.envs import compact_schemas
from arenarl_jax.judges import rubric_judge
from arenarl_jax.models import backend
from arenarl_jax.sampling.policy_sampler import make_sampler, sampling_settings, set_policy
from arenarl_jax.rollout.agent_loop import Rollout
from arenarl_jax.rollout.settings import PolicySamplingSettings, RolloutSettings

EVAL_DIR = "eval"


def checker_judge(env: Any, seed: int = 0) -> rubric_judge.RubricJudge:
  """The noise-free rubric judge of ``env`` (its checker's scores, both orders)."""
  return rubric_judge.RubricJudge(env.checker, rubric=env.rubric,
                                  noise=rubric_judge.NoiseModel(), seed=seed)


def query_places(env: Any) -> Callable[[str], tuple[str, ...]] | None:
  """Task id -> the places its query names (cached), where ``env`` says (``query_places``)."""
  find = getattr(env, "query_places", None)
  return None if find is None else functools.lru_cache(maxsize=None)(find)


class Evaluator:
  """Holds the test tasks, their references, the checker judge and a greedy rollout.

  ``settings`` (``eval.*``) chooses the tasks and the rollout's greediness; ``sampling``
  (``sampling.*``) and ``rollout`` (``rollout.*``) shape the rollout as in training, on this
  host's devices of ``mesh``; ``schemas`` (``env.schemas``) is what the policy is shown of the
  tools."""

  def __init__(self, env: Any, policy: Any, workdir: str, *, settings: compare.EvalSettings,
               sampling: PolicySamplingSettings, rollout: RolloutSettings, mesh: Mesh,
               schemas: str = "full"):
    self.env, self.workdir, self.settings = env, workdir, settings
    self.tasks = compare.eval_tasks(env, self.settings)
    if not self.tasks:
      raise ValueError(f"eval: environment {env.name!r} has no {self.settings.split} tasks")
    self.references = compare.reference_trajectories(env, self.tasks)
    self.judge = checker_judge(env, self.settings.seed)
    self.sampler = make_sampler(sampling, policy.model, mesh)
    self.rollout = Rollout(self.sampler, policy.tokenizer, rollout,
                           settings.sampling(sampling_settings(sampling, policy.tokenizer)))
    self.source = compact_schemas.tool_source(env, schemas)
    self.dir = os.path.join(workdir, EVAL_DIR)
    self.places = query_places(env)

  def tasks_per_wave(self) -> int:
    """How many tasks' groups one wave of at most ``eval.max_rows`` rows holds (all: 0)."""
    g = self.settings.group_size
    return max(1, self.settings.max_rows // g) if self.settings.max_rows else len(self.tasks)

  def rollouts(self, params, *, first_task: int = 0,
               on_wave: Callable[[list[types.Trajectory]], None] | None = None
               ) -> list[types.Trajectory]:
    """The policy's trajectories of every test task from ``first_task`` on (``eval.group_size``
    each, flat), handed to ``on_wave`` as each wave of ``eval.max_rows`` rows finishes. A
    task's groups draw their keys by its index, so a roll-out resumed at a wave's first task
    (a multiple of ``tasks_per_wave``) batches its rows as an unbroken one does and continues
    it exactly."""
    set_policy(self.sampler, params)
    g, per = self.settings.group_size, self.tasks_per_wave()
    rows = []
    for first in range(first_task, len(self.tasks), per):  # waves of eval.max_rows rows
      batch = self.rollout.run(self.tasks[first:first + per], self.source, group_size=g,
                               key=jax.random.key(self.settings.seed), valid=self.env.valid,
                               first_group=first)
      wave = compare.flatten(batch.trajectories)
      rows.extend(wave)
      if on_wave is not None:
        on_wave(wave)
      backend.release_host_memory()  # the next wave's rows need other shapes
    return rows

  def evaluate(self, params, step: int, *, second: Sequence[types.Trajectory] | None = None,
               trajectories: Sequence[types.Trajectory] | None = None,
               write: bool = True) -> compare.EvalReport:
    """One evaluation at RL step ``step``: vs the references and, when given, vs ``second``."""
    t0 = time.perf_counter()
    policy_rows = list(trajectories) if trajectories is not None else self.rollouts(params)
    t1 = time.perf_counter()
    report = compare.evaluate(policy_rows, self.references, self.judge,
                              settings=self.settings, step=step, second=second,
                              verify=getattr(self.env, "verify", None),
                              places=self.places)
    if write and jax.process_index() == 0:
      os.makedirs(self.dir, exist_ok=True)
      compare.write_jsonl(report, self.dir)
      with open(os.path.join(self.dir, "summary.jsonl"), "a", encoding="utf-8") as f:
        f.write(json.dumps({**report.to_dict(), "rollout_s": t1 - t0,
                            "judge_s": time.perf_counter() - t1}) + "\n")
    return report


def opponent_valid_rate(report: compare.EvalReport, opponent: str = "sft") -> float | None:
  """The valid-generation rate of ``opponent``'s trajectories in the report's matches (the
  starting policy's, for ``"sft"``); None when the report has no such opponent."""
  comp = report.comparisons.get(opponent)
  if comp is None or not comp.matches:
    return None
  return float(sum(compare.is_valid(m.q) for m in comp.matches) / len(comp.matches))


def result_line(report: compare.EvalReport, opponent: str = "sft") -> str:
  """``RESULT win_rate_vs_sft=... ci_low=... ci_high=... win_rate_vs_reference=... valid_rate=...
  valid_rate_start=... test_tasks=...`` then the strict verifier's ``solved_rate
  solved_rate_start solved_diff solved_diff_ci_low solved_diff_ci_high`` and the same five for
  ``met``, ``limit_stop_rate``, and ``wins_vs_sft ties_vs_sft losses_vs_sft
  win_rate_vs_sft_conservative``, then the same five for ``content_met`` and
  ``first_call_place_rate first_call_place_rate_start``. Keys about the start appear when it is
  the second opponent; the verifier's when the environment has one; content and place keys
  where the environment names them."""
  ref = report.comparisons[compare.REFERENCE].overall
  second = report.comparisons.get(opponent)
  parts = []
  if second is not None:
    w = second.overall
    parts += [f"win_rate_vs_{opponent}={w.rate:.4f}", f"ci_low={w.low:.4f}",
              f"ci_high={w.high:.4f}"]
  parts += [f"win_rate_vs_reference={ref.rate:.4f}",
            f"valid_rate={report.generation['overall']['valid_rate']:.4f}"]
  start = opponent_valid_rate(report, opponent)
  if start is not None:
    parts.append(f"valid_rate_start={start:.4f}")
  parts.append(f"test_tasks={len(set(t.metadata['task_id'] for t in report.trajectories))}")
  s = report.success.get(report_lib.OVERALL)
  if s is not None:
    for name in ("solved", "met"):
      parts += _rate_keys(s, name)
  parts.append(f"limit_stop_rate={report_lib.limit_stops(report.generation['overall']):.4f}")
  if second is not None:
    w = second.overall
    parts += [f"wins_vs_{opponent}={w.wins}", f"ties_vs_{opponent}={w.ties}",
              f"losses_vs_{opponent}={w.losses}",
              f"win_rate_vs_{opponent}_conservative={w.conservative:.4f}"]
  if s is not None and s.content_met is not None:
    parts += _rate_keys(s, "content_met")
  if s is not None and s.first_call_place is not None:
    parts.append(f"first_call_place_rate={s.first_call_place.value:.4f}")
    if s.first_call_place_start is not None:
      parts.append(f"first_call_place_rate_start={s.first_call_place_start.value:.4f}")
  return "RESULT " + " ".join(parts)


def _rate_keys(s, name: str) -> list[str]:
  """``<name>_rate`` and, with a start, ``<name>_rate_start <name>_diff <name>_diff_ci_low
  <name>_diff_ci_high``."""
  out = [f"{name}_rate={getattr(s, name).value:.4f}"]
  if getattr(s, f"{name}_start") is not None:
    d = getattr(s, f"{name}_diff")
    out += [f"{name}_rate_start={getattr(s, f'{name}_start').value:.4f}",
            f"{name}_diff={d.value:.4f}", f"{name}_diff_ci_low={d.low:.4f}",
            f"{name}_diff_ci_high={d.high:.4f}"]
  return out
