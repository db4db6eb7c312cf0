"""The agent rollout ``train.py`` runs (``rl.rollout="agent"``): prompts -> trajectories + advantages.

Per RL step, for this host's prompt ids (records of the dataset's ``train`` split; on several
hosts a contiguous share of the step's, whose sampler draws, tournament streams and judge noise
are indexed by the global group so that the hosts together roll out what one process does):
  sampler on the CURRENT parameters (``Sampler.set_params`` with the train state's arrays, moved
  device to device, never through the host) -> ``rollout.Rollout`` (multi-turn, tools run
  concurrently, row 0 of each group greedy) -> advantages:
    ``advantage.source="arena"``: ``tournament.rank`` with ``tournament.topology`` and the
    configured judge (seeded by (seed, step), so a resumed step draws the same pairings);
    ``"pointwise"`` (GRPO/GSPO): ``judge.score`` per trajectory, standardised per group.
It returns ``(trajectories, advantages_N, stats)`` as ``train.run`` expects, with stats for the
step's metrics (``step_stats``): reward and advantage statistics, the share of groups whose
advantages are all zero, the correlation of winning (the advantage) with the sampled length and
with the final answer's length, sampled tokens, turns, tool calls by tool and errors by kind,
finish reasons, judge requests, failures, cache hits, order flips (this step's share of matches
whose two orders disagree on the winner), the seconds inside judge calls and the mean tool-call
latency (under ``time/``, like every timing), the anchor seeding's
agreement with the final order (``tournament/seeding_tau``: mean Kendall tau per group, for
anchor-seeded topologies; tournament/diagnostics.py), the noise-free checker's mean score (rubric
judges: the learning signal without the judge's noise), and the time of each phase (sample =
prefill/decode/extend, tools, judge).
With a ``workdir``, the steps after which the pipeline evaluates (``eval.*``: every
``eval.every_steps`` and the last) also write ``<workdir>/rollouts/step_<k>.jsonl``: every group
of that RL step with its trajectories, standing, advantages and tournament match log (the judge's
per-dimension scores in each match's ``detail``); files are never overwritten.
Its ``state_dict`` holds the judge's call counter (the rubric judge's noise depends on it), so a
resumed run draws the same judge noise.
"""
from __future__ import annotations

import functools
import inspect
import os
import time
from typing import Any, Mapping, Sequence

import jax
import ml_collections
from jax.sharding import NamedSharding, PartitionSpec
import numpy as np
from flax import nnx

from arenarl_jax.rl import advantages as adv_lib
from arenarl_jax.rollout import log as rollout_log
from arenarl_jax.eval import compare as evaluate_lib
from arenarl_jax import tournament
from arenarl_jax.data import records
from arenarl_jax.envs import base, compact_schemas
from arenarl_jax.rollout.agent_loop import Rollout, RolloutSettings
from arenarl_jax.sampling.sampler import Sampler, SamplingSettings
from arenarl_jax.tournament import diagnostics

# Judge counters whose per-step change is reported (judges/stats.py COUNTERS).
JUDGE_DELTAS = ("cache_hits", "retries", "parse_failures", "both_orders", "order_flips")


def make_sampler(config: ml_collections.ConfigDict, model) -> Sampler:
  """The policy's sampler (unsharded: it reads parameters placed on one local device)."""
  return Sampler(model, cache_len=config.sampling.cache_len)


def sampling_settings(config: ml_collections.ConfigDict, tokenizer) -> SamplingSettings:
  s = config.sampling
  return SamplingSettings(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k,
                          eos_ids=(tokenizer.eos_id,), max_new_tokens=s.max_new_tokens)


def on_one_device(params):
  """``params`` (any placement) on this process's first device: a device-to-device copy.

  Arrays spread over several processes (a multi-host train state) are first replicated over
  their mesh (one jitted all-gather that every process joins), then this process's copy is
  taken; nothing goes through the host."""
  device = jax.local_devices()[0]
  leaves, treedef = jax.tree.flatten(params)
  spread = [i for i, x in enumerate(leaves) if isinstance(x, jax.Array)
            and not x.is_fully_addressable]
  if spread:
    meshes = {leaves[i].sharding.mesh for i in spread}
    if len(meshes) != 1 or not isinstance(leaves[spread[0]].sharding, NamedSharding):
      raise ValueError("on_one_device: multi-process parameters must share one NamedSharding "
                       "mesh")
    whole = NamedSharding(meshes.pop(), PartitionSpec())
    gathered = _replicate_over(whole)([leaves[i] for i in spread])
    for i, x in zip(spread, gathered):
      leaves[i] = next(s.data for s in x.addressable_shards if s.device == device)
  return jax.tree.unflatten(treedef, [jax.device_put(x, device) for x in leaves])


@functools.lru_cache(maxsize=None)
def _replicate_over(whole: NamedSharding):
  """One jitted all-gather per mesh, compiled once for the run (not once per RL step)."""
  return jax.jit(lambda xs: xs, out_shardings=whole)


def set_policy(sampler: Sampler, params) -> None:
  """Points the sampler at ``params`` (a pure dict from the train state)."""
  sampler.set_params(nnx.State(on_one_device(params)))


def tasks_from_records(source: Any) -> list[base.Task]:
  """The prompts of a dataset split (``records.Example``) as tasks."""
  out = []
  for k in range(len(source)):
    ex = records.Example.from_record(source[k])
    out.append(base.Task(id=ex.task_id, env=ex.env, subtask=ex.subtask, query=ex.query))
  return out


def trajectory_stats(trajectories: Sequence[Any], prefix: str,
                     tool_names: Sequence[str] | None = None) -> dict[str, float]:
  """Lengths, turns, tool calls and errors by kind, finish reasons (means per trajectory).

  With ``tool_names`` (the source's tools), also the calls per trajectory of each tool
  (``<prefix>/tool_calls/<name>``); a name the policy made up counts as ``other`` and a call that
  did not parse as ``malformed`` (policy text never becomes a metric name).
  """
  n = max(len(trajectories), 1)
  out: dict[str, float] = {}
  tool_log = [e for t in trajectories for e in t.metadata.get("tool_log", ())]
  out[f"{prefix}/sampled_tokens_mean"] = float(np.mean([t.loss_mask.sum() for t in trajectories]))
  out[f"{prefix}/length_mean"] = float(np.mean([len(t.tokens) for t in trajectories]))
  out[f"{prefix}/turns_mean"] = float(np.mean([len(t.steps) for t in trajectories]))
  out[f"{prefix}/answer_chars_mean"] = float(np.mean([len(t.final_answer) for t in trajectories]))
  out[f"{prefix}/tool_calls_per_trajectory"] = len(tool_log) / n
  latencies = [float(e.get("latency_s", 0.0)) for e in tool_log if e.get("name") is not None]
  if latencies:  # a timing: under time/ (metrics.without_timings drops it)
    out[f"time/{prefix}/tool_call_mean_s"] = float(np.mean(latencies))
  if tool_names is not None:
    known = set(tool_names)
    calls = dict.fromkeys(sorted(known), 0)
    for e in tool_log:
      name = e.get("name")
      key = "malformed" if name is None else name if name in known else "other"
      calls[key] = calls.get(key, 0) + 1
    out.update({f"{prefix}/tool_calls/{k}": v / n for k, v in calls.items()})
  errors: dict[str, int] = {}
  for e in tool_log:
    if not e["ok"]:
      errors[e["error_kind"]] = errors.get(e["error_kind"], 0) + 1
  out[f"{prefix}/tool_error_rate"] = sum(errors.values()) / max(len(tool_log), 1)
  out.update({f"{prefix}/tool_errors/{k}": float(v) for k, v in errors.items()})
  for reason in ("answer", "length", "max_turns", "invalid", "error"):
    out[f"{prefix}/finish/{reason}"] = sum(t.finish_reason == reason for t in trajectories) / n
  return out


class TimedJudge:
  """Passes ``judge`` / ``score`` calls through to a judge and adds up the seconds spent in them."""

  def __init__(self, judge: Any):
    self.inner, self.seconds, self.calls = judge, 0.0, 0

  def judge(self, matches):
    t0 = time.perf_counter()
    try:
      return self.inner.judge(matches)
    finally:
      self.seconds += time.perf_counter() - t0
      self.calls += 1

  def score(self, trajectories):
    t0 = time.perf_counter()
    try:
      return self.inner.score(trajectories)
    finally:
      self.seconds += time.perf_counter() - t0
      self.calls += 1


def judge_counters(judge: Any) -> dict[str, float]:
  """The judge's running counters (``judge.metrics.snapshot()``; {} for a judge without them)."""
  metrics = getattr(judge, "metrics", None)
  return dict(metrics.snapshot()) if metrics is not None else {}


def judge_stats(before: Mapping[str, float], after: Mapping[str, float], timed: TimedJudge
                ) -> dict[str, float]:
  """This step's judge metrics: counter changes, the order-flip rate among this step's matches
  judged in both orders (left out when there were none), batched calls and the seconds spent
  inside them (``time/judge_calls_s``: a timing, so under ``time/``)."""
  out = {"time/judge_calls_s": timed.seconds, "judge/calls": float(timed.calls)}
  delta = {k: float(after[k] - before.get(k, 0)) for k in JUDGE_DELTAS if k in after}
  out.update({f"judge/{k}": v for k, v in delta.items()})
  if delta.get("both_orders", 0) > 0:
    out["judge/order_flip_rate"] = delta["order_flips"] / delta["both_orders"]
  return out


def step_stats(groups: Sequence[Sequence[Any]], adv_BG: np.ndarray, reward_BG: np.ndarray
               ) -> dict[str, float]:
  """Reward and advantage statistics of one step, the share of groups whose advantages are all
  zero, and the (pooled Pearson) correlation of the advantage with the sampled tokens and with
  the final answer's characters (0 when either side is constant)."""
  flat = [t for g in groups for t in g]
  adv_N = np.asarray(adv_BG, np.float64).reshape(-1)
  sampled = np.asarray([np.sum(t.loss_mask) for t in flat], np.float64)
  answer = np.asarray([len(t.final_answer) for t in flat], np.float64)
  return {
      "reward/mean": float(reward_BG.mean()), "reward/std": float(reward_BG.std()),
      "advantage/mean": float(adv_N.mean()), "advantage/std": float(adv_N.std()),
      "advantage/abs_max": float(np.abs(adv_N).max()),
      "advantage/zero_groups": float(np.mean(np.all(np.abs(adv_BG) < 1e-6, axis=1))),
      "length_win_corr": _corr(sampled, adv_N),
      "answer_chars_win_corr": _corr(answer, adv_N),
  }


class AgentRollout:
  """``rollout(params, *, step, prompt_ids, all_prompt_ids, key)`` for ``train.run``."""

  def __init__(self, config: ml_collections.ConfigDict, env: Any, policy: Any,
               tasks: Sequence[base.Task], judge: Any, *, truth: Any = None,
               workdir: str | None = None):
    self.config, self.env, self.judge, self.truth = config, env, judge, truth
    self.workdir = workdir
    self.tasks = list(tasks)
    self.num_prompts = len(self.tasks)
    self.sampler = make_sampler(config, policy.model)
    self.rollout = Rollout(self.sampler, policy.tokenizer, RolloutSettings.from_config(config),
                           sampling_settings(config, policy.tokenizer))
    self.source = compact_schemas.tool_source(env, config.env.schemas)
    self.tool_names = [t["name"] for t in self.source.tools()]
    self.group_size = int(config.sampling.group_size)
    if self.group_size < 2:
      raise ValueError(f"sampling.group_size must be >= 2 for RL, got {self.group_size}")
    self.advantage_source = config.advantage.source
    if self.advantage_source not in ("arena", "pointwise"):
      raise ValueError(f"advantage.source: {self.advantage_source!r} is not arena or pointwise")
    self.eval_settings = evaluate_lib.EvalSettings.from_config(config.eval)

  def state_dict(self) -> dict[str, Any]:
    return {"judge_calls": int(getattr(self.judge, "_calls", 0))}

  def load_state_dict(self, state: dict[str, Any]) -> None:
    if hasattr(self.judge, "_calls"):
      self.judge._calls = int(state.get("judge_calls", 0))  # pylint: disable=protected-access

  def __call__(self, params, *, step: int, prompt_ids: Sequence[int],
               all_prompt_ids: Sequence[int], key=None):
    # Each host samples and judges only its own groups, a contiguous share of the step's: the
    # sampler's draws, the tournament's pairings and the judge's noise are indexed by the global
    # group, so the hosts together produce what one process running every group does.
    first = share_start(prompt_ids, all_prompt_ids)
    t0 = time.perf_counter()
    set_policy(self.sampler, params)
    tasks = [self.tasks[i] for i in prompt_ids]
    batch = self.rollout.run(tasks, self.source, group_size=self.group_size, key=key,
                             policy_step=step, valid=self.env.valid, first_group=first)
    groups = batch.trajectories
    flat = [t for g in groups for t in g]
    t1 = time.perf_counter()
    stats: dict[str, float] = {}
    # Timed outside, so the seconds count the share's whole judge calls.
    timed = TimedJudge(ShareJudge(self.judge, first, len(groups)))
    before = judge_counters(self.judge)
    results = None
    if self.advantage_source == "arena":
      cfg = self.config
      topology = cfg.tournament.topology
      results = tournament.rank(groups, timed, topology, tournament_rng(cfg.seed, step, first),
                                failure_threshold=cfg.tournament.failure_threshold)
      adv_BG = np.stack([r.advantages for r in results])
      reward_BG = np.stack([r.base_rewards for r in results])
      stats["judge/requests"] = float(sum(r.requests for r in results))
      stats["judge/failures"] = float(sum(r.failures for r in results))
      stats["judge/matches"] = float(sum(len(r.matches) for r in results))
      # Does the greedy anchor's seeding agree with the final order? (anchor's final rank, and
      # Kendall's tau between the anchor-pass scores and the final ranks where there is one)
      stats["tournament/anchor_rank_mean"] = float(np.mean([r.ranks[0] for r in results]))
      tau = diagnostics.mean_seeding_tau(results, topology)
      if tau is not None:
        stats["tournament/seeding_tau"] = tau
    else:
      scored = timed.score(flat)
      reward_BG = np.nan_to_num(np.asarray(scored.scores, np.float64)).reshape(len(groups), -1)
      adv_BG = adv_lib.pointwise_advantages(reward_BG)
      stats["judge/requests"] = float(len(flat))
      stats["judge/failures"] = float(np.sum(~np.asarray(scored.ok)))
    t2 = time.perf_counter()
    stats.update(judge_stats(before, judge_counters(self.judge), timed))
    adv_N = adv_BG.reshape(-1).astype(np.float32)
    stats.update(step_stats(groups, adv_BG, reward_BG))
    stats["valid_rate"] = float(batch.valid_rate)
    stats.update(trajectory_stats(flat, "rollout", self.tool_names))
    if self.truth is not None:
      stats["reward/checker_mean"] = float(np.mean(self.truth.score(flat).scores))
    stats.update({"time/sample_s": float(batch.stats["device_s"]),
                  "time/tools_s": float(batch.stats["tool_s"]),
                  "time/rollout_host_s": float(batch.stats["host_s"]),
                  "time/judge_s": t2 - t1, "time/rollout_total_s": t2 - t0,
                  "tokens_per_s": float(batch.stats["sampled_tokens"]) / max(t1 - t0, 1e-9)})
    done = int(step) + 1  # the step number train.run logs this rollout under
    if self.workdir and self.eval_settings.is_due(done, int(self.config.rl.steps)):
      rollout_log.write_rollouts(os.path.join(self.workdir, rollout_log.ROLLOUTS_DIR), done,
                                 groups, adv_BG, reward_BG, results,
                                 topology=self.config.tournament.topology, first_group=first)
    return flat, adv_N, stats


def share_start(prompt_ids: Sequence[int], all_prompt_ids: Sequence[int]) -> int:
  """Where this host's ``prompt_ids`` (a contiguous slice) start in ``all_prompt_ids``."""
  ids, every = list(prompt_ids), list(all_prompt_ids)
  for start in range(len(every) - len(ids) + 1):
    if every[start:start + len(ids)] == ids:
      return start
  raise ValueError(f"rollout: prompt ids {ids} are not a contiguous slice of the step's "
                   f"{every}")


def tournament_rng(seed: int, step: int, first_group: int = 0) -> np.random.Generator:
  """The step's tournament generator, seeded by (seed, step). ``tournament.rank`` spawns one
  stream per group from it; a host whose groups start at ``first_group`` skips the streams of
  the groups before its own, so each group gets the stream it gets in one process."""
  rng = np.random.default_rng([int(seed), int(step)])
  rng.bit_generator.seed_seq.spawn(int(first_group))
  return rng


class ShareJudge:
  """The training judge seen from one host's groups ``first .. first + num_groups - 1``.

  A judge whose noise depends on a match's position in its batch (``RubricJudge``: its
  ``judge``/``score`` take ``first=``) is told where this share's matches sit in the whole
  step's batch: every group of a step has the same size, so each round gives every group the same
  number of matches and group b's matches start at b times that number.
  """

  def __init__(self, judge: Any, first_group: int, num_groups: int):
    self.inner, self.first_group, self.num_groups = judge, int(first_group), int(num_groups)

  def _takes_first(self, fn) -> bool:
    return self.first_group > 0 and "first" in inspect.signature(fn).parameters

  def judge(self, matches):
    if not self._takes_first(self.inner.judge):
      return self.inner.judge(matches)
    if len(matches) % self.num_groups:
      raise ValueError(f"ShareJudge: {len(matches)} matches do not split evenly over "
                       f"{self.num_groups} groups of one size")
    return self.inner.judge(matches, first=self.first_group * len(matches) // self.num_groups)

  def score(self, trajectories):
    if not self._takes_first(self.inner.score):
      return self.inner.score(trajectories)
    per_group = len(trajectories) // self.num_groups
    return self.inner.score(trajectories, first=self.first_group * per_group)


def _corr(x: np.ndarray, y: np.ndarray) -> float:
  """Pearson correlation (0 when either side is constant)."""
  if len(x) < 2 or np.std(x) == 0 or np.std(y) == 0:
    return 0.0
  return float(np.corrcoef(x, y)[0, 1])
