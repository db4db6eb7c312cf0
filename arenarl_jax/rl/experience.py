"""Experience: one RL step's prompts -> trajectories judged, ranked and turned into advantages.

Per RL step, for this host's prompt ids (records of the dataset's ``train`` split; on several
hosts a contiguous share of the step's, whose sampler draws, tournament streams and judge noise
are indexed by the global group so that the hosts together produce what one process does):
  the sampler on the CURRENT parameters (``policy_sampler.set_policy``) -> the agent loop
  (``rollout/agent_loop.py``: multi-turn, tools run concurrently, row 0 of each group greedy) ->
  the advantage source ``advantage.source`` names (``rl/advantages.py`` SOURCES: ``arena``, a
  tournament of pairwise matches; ``pointwise``, GRPO/GSPO's per-trajectory scores) -> the
  control ``rl.advantage_control`` names (``none``; ``permute``/``flip`` for control runs).
``Experience`` returns ``(trajectories, advantages_N, stats)`` as ``rl/loop.run`` expects; a
trajectory without rank evidence (the source's mask 0: a failed match or pointwise score, or a
dropped group) carries ``metadata["ranked"] = False`` and advantage 0, so ``rl/batch.py`` gives
its row loss mask 0 (a failure teaches nothing). The stats (``rl/stats.py``,
``rollout/stats.py``) hold rewards and advantages (of the ranked trajectories), the judge's work
(failures, unranked trajectories and dropped groups included), the rollouts' shape, the
noise-free checker's mean score (the learning signal without the judge's noise, when a ``truth``
judge is given), the strict verifier's solved and met rates (``verifier/*``: a monitor beside the
reward, never part of it) and the time of each phase.
With a ``workdir`` and a ``log_due(step)`` predicate, the steps it names also write
``<workdir>/rollouts/step_<k>.jsonl`` (``rollout_log.py``): every group with its trajectories,
standing, advantages and match log; files are never overwritten.
Its ``state_dict`` holds the judge's (the rubric judge's noise depends on its call count), so a
resumed run draws the same judge noise.
"""
from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from jax.sharding import Mesh

from arenarl_jax.data import records
from arenarl_jax.envs import base, compact_schemas
from arenarl_jax.rl import advantages as adv_lib
from arenarl_jax.rl import rollout_log
from arenarl_jax.rl import stats as rl_stats
from arenarl_jax.rollout import stats as rollout_stats
from arenarl_jax.rl.settings import AdvantageSettings
from arenarl_jax.rollout.agent_loop import Rollout
from arenarl_jax.rollout.settings import PolicySamplingSettings, RolloutSettings
from arenarl_jax.sampling import policy_sampler


def tasks_from_records(source: Any) -> list[base.Task]:
  """The prompts of a dataset split (``records.Example``) as tasks."""
  out = []
  for k in range(len(source)):
    ex = records.Example.from_record(source[k])
    out.append(base.Task(id=ex.task_id, env=ex.env, subtask=ex.subtask, query=ex.query))
  return out


def chosen_subtasks(subtasks: str, known: Sequence[str]) -> list[str]:
  """The comma-separated ``subtasks`` (``rl.subtasks``), each checked against ``known``; empty
  when all are chosen. A name not in ``known`` is an error naming the key."""
  wanted = [s.strip() for s in subtasks.split(",") if s.strip()]
  unknown = [s for s in wanted if s not in known]
  if unknown:
    raise ValueError(f"rl.subtasks={subtasks!r}: {unknown} not among the subtasks "
                     f"{list(known)}")
  return wanted


def tasks_of_subtasks(tasks: Sequence[base.Task], subtasks: str) -> list[base.Task]:
  """The tasks of the comma-separated ``subtasks`` (``rl.subtasks``; "" = all), in order."""
  wanted = chosen_subtasks(subtasks, list(dict.fromkeys(t.subtask for t in tasks)))
  return [t for t in tasks if not wanted or t.subtask in wanted]


class Experience:
  """``experience(params, *, step, prompt_ids, all_prompt_ids, key)`` for ``rl/loop.run``.

  ``sampling`` (``sampling.*``) and ``rollout`` (``rollout.*``) shape the rollout on this
  host's devices of ``mesh``; ``advantage`` says how judged groups become advantages;
  ``schemas`` (``env.schemas``) is what the policy is shown of the tools."""

  def __init__(self, env: Any, policy: Any, tasks: Sequence[base.Task], judge: Any, *,
               sampling: PolicySamplingSettings, rollout: RolloutSettings,
               advantage: AdvantageSettings, mesh: Mesh, schemas: str = "full",
               truth: Any = None, workdir: str | None = None,
               log_due: Callable[[int], bool] | None = None):
    self.env, self.judge, self.truth, self.advantage = env, judge, truth, advantage
    self.workdir, self.log_due = workdir, log_due
    self.tasks = list(tasks)
    self.num_prompts = len(self.tasks)
    self.sampler = policy_sampler.make_sampler(sampling, policy.model, mesh)
    self.rollout = Rollout(self.sampler, policy.tokenizer, rollout,
                           policy_sampler.sampling_settings(sampling, policy.tokenizer))
    self.source = compact_schemas.tool_source(env, schemas)
    self.tool_names = [t["name"] for t in env.tool_source().tools()]  # listed or not
    self.group_size = int(sampling.group_size)
    if self.group_size < 2:
      raise ValueError(f"sampling.group_size must be >= 2 for RL, got {self.group_size}")
    self.advantage_source = adv_lib.get_source(advantage.source)
    adv_lib.check_control(advantage.control)  # a bad value fails here, not at step 1

  def state_dict(self) -> dict[str, Any]:
    return {"judge": self.judge.state_dict()}

  def load_state_dict(self, state: Mapping[str, Any]) -> None:
    self.judge.load_state_dict(state.get("judge", {}))

  def __call__(self, params, *, step: int, prompt_ids: Sequence[int],
               all_prompt_ids: Sequence[int], key=None):
    # Each host samples and judges only its own groups, a contiguous share of the step's: the
    # sampler's draws, the tournament's pairings and the judge's noise are indexed by the global
    # group, so the hosts together produce what one process running every group does.
    first = share_start(prompt_ids, all_prompt_ids)
    t0 = time.perf_counter()
    policy_sampler.set_policy(self.sampler, params)
    tasks = [self.tasks[i] for i in prompt_ids]
    batch = self.rollout.run(tasks, self.source, group_size=self.group_size, key=key,
                             policy_step=step, valid=self.env.valid, first_group=first)
    groups = batch.trajectories
    t1 = time.perf_counter()
    # Timed outside, so the seconds count the share's whole judge calls.
    timed = rl_stats.TimedJudge(ShareJudge(self.judge, first, len(groups)))
    before = rl_stats.judge_counters(self.judge)
    judged = self.advantage_source(groups, timed, self.advantage, step=step, first_group=first)
    t2 = time.perf_counter()
    mask_BG = judged_mask(judged)
    groups = mark_unranked(groups, mask_BG)
    flat = [t for g in groups for t in g]
    stats = dict(judged.stats)
    stats.update(rl_stats.judge_stats(before, rl_stats.judge_counters(self.judge), timed))
    # rl.advantage_control: an experiment's control (advantages.control_advantages); "none" trains
    # on the judge's advantages as they are.
    adv_BG = adv_lib.control_advantages(judged.advantages_BG, mask_BG, self.advantage.control,
                                        adv_lib.control_rng(self.advantage.seed, step, first))
    adv_N = np.where(mask_BG > 0, adv_BG, 0.0).reshape(-1).astype(np.float32)
    stats.update(rl_stats.step_stats(groups, adv_BG, judged.rewards_BG, mask_BG))
    stats["valid_rate"] = float(batch.valid_rate)
    # A count, not the rollout/finish/error share: rows lost to host bugs below
    # rollout.max_error_share (above it the rollout raised) stay visible per step.
    stats["rollout/errors"] = float(batch.stats.get("errors", 0))  # a source may count none
    stats.update(rollout_stats.trajectory_metrics(flat, "rollout", self.tool_names))
    if "judge/requests" in stats and groups:
      stats["judge/requests_per_group"] = stats["judge/requests"] / len(groups)
    if self.truth is not None:
      checker_N = np.asarray(self.truth.score(flat).scores, np.float64)
      stats["reward/checker_mean"] = float(np.mean(checker_N))
      stats.update(rl_stats.checker_agreement(judged.rewards_BG,
                                              checker_N.reshape(mask_BG.shape), mask_BG))
    stats.update(verifier_stats(self.env, flat))
    stats.update({"time/sample_s": float(batch.stats["device_s"]),
                  "time/tools_s": float(batch.stats["tool_s"]),
                  "time/rollout_host_s": float(batch.stats["host_s"]),
                  "time/judge_s": t2 - t1, "time/rollout_total_s": t2 - t0,
                  "tokens_per_s": float(batch.stats["sampled_tokens"]) / max(t1 - t0, 1e-9)})
    done = int(step) + 1  # the step number rl/loop.run logs this rollout under
    if self.workdir and self.log_due is not None and self.log_due(done):
      rollout_log.write_rollouts(os.path.join(self.workdir, rollout_log.ROLLOUTS_DIR), done,
                                 groups, adv_BG, judged.rewards_BG, judged.results,
                                 topology=self.advantage.tournament.topology,
                                 first_group=first, mask_BG=mask_BG)
    return flat, adv_N, stats


def verifier_stats(env: Any, trajectories: Sequence[Any]) -> dict[str, float]:
  """The strict verifier's solved and requirements-met rates of a step's rollouts, logged beside
  the judge's reward so that a reward drifting away from real success is visible. A monitor
  only: nothing here reaches the advantages. Empty for an environment without a verifier."""
  verify = getattr(env, "verify", None)
  if verify is None or not trajectories:
    return {}
  verdicts = [verify(t) for t in trajectories]
  out = {"verifier/solved_rate": float(np.mean([v.solved for v in verdicts])),
         "verifier/met_rate": float(np.mean([v.met_rate for v in verdicts]))}
  # The greedy anchors apart from the samples: RL can only move the greedy policy by what the
  # samples find beyond it, and the evaluation is greedy.
  greedy = np.array([bool(t.metadata.get("greedy")) for t in trajectories])
  content = all(v.content_total for v in verdicts)
  for name, keep in (("greedy", greedy), ("sampled", ~greedy)):
    if keep.any():
      chosen = [v for v, k in zip(verdicts, keep) if k]
      out[f"verifier/met_rate_{name}"] = float(np.mean([v.met_rate for v in chosen]))
      if content:
        out[f"verifier/content_met_rate_{name}"] = float(
            np.mean([v.content_met_rate for v in chosen]))
  return out


def judged_mask(judged: adv_lib.Judged) -> np.ndarray:
  """The source's loss mask [B, G] float32 (all ones when it gives none)."""
  shape = np.shape(judged.advantages_BG)
  if judged.mask_BG is None:
    return np.ones(shape, np.float32)
  mask_BG = np.asarray(judged.mask_BG, np.float32)
  if mask_BG.shape != shape:
    raise ValueError(f"advantage source: mask {mask_BG.shape} does not match advantages {shape}")
  return mask_BG


def mark_unranked(groups: Sequence[Sequence[Any]], mask_BG: np.ndarray) -> list[list[Any]]:
  """``groups`` with ``metadata["ranked"] = False`` on every trajectory whose mask is 0 (a copy
  of the trajectory: the rollout's own objects are left as they are)."""
  return [[t if mask_BG[b, g] > 0 else
           dataclasses.replace(t, metadata={**(t.metadata or {}), "ranked": False})
           for g, t in enumerate(group)] for b, group in enumerate(groups)]


def share_start(prompt_ids: Sequence[int], all_prompt_ids: Sequence[int]) -> int:
  """Where this host's ``prompt_ids`` (a contiguous slice) start in ``all_prompt_ids``."""
  ids, every = list(prompt_ids), list(all_prompt_ids)
  for start in range(len(every) - len(ids) + 1):
    if every[start:start + len(ids)] == ids:
      return start
  raise ValueError(f"rollout: prompt ids {ids} are not a contiguous slice of the step's "
                   f"{every}")


class ShareJudge:
  """The training judge seen from one host's groups ``first .. first + num_groups - 1``.

  Every call tells the judge where this share's matches sit in the whole step's batch (the judge
  protocol's ``offset``; a judge whose noise depends on a match's position uses it): every group
  of a step has the same size, so each round gives every group the same number of matches and
  group b's matches start at b times that number.
  """

  def __init__(self, judge: Any, first_group: int, num_groups: int):
    self.inner, self.first_group, self.num_groups = judge, int(first_group), int(num_groups)

  def judge(self, matches, *, offset: int = 0):
    if len(matches) % self.num_groups:
      raise ValueError(f"ShareJudge: {len(matches)} matches do not split evenly over "
                       f"{self.num_groups} groups of one size")
    return self.inner.judge(
        matches, offset=offset + self.first_group * len(matches) // self.num_groups)

  def score(self, trajectories, *, offset: int = 0):
    per_group = len(trajectories) // self.num_groups
    return self.inner.score(trajectories, offset=offset + self.first_group * per_group)

  def state_dict(self) -> dict[str, Any]:
    return self.inner.state_dict()

  def load_state_dict(self, state: Mapping[str, Any]) -> None:
    self.inner.load_state_dict(state)
