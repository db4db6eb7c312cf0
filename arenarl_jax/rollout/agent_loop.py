"""The multi-turn rollout: a batch of tasks x G -> one ``Trajectory`` per row, ready for training.

    rollout = Rollout(sampler, tokenizer, RolloutSettings(max_turns=2), sampling_settings)
    batch = rollout.run(tasks, env.tool_source(), group_size=4, key=key, valid=env.valid)
    batch.trajectories[b][g].tokens, .loss_mask, .logprobs, .messages, .finish_reason

Each task's prompt (its query, rendered with the tool source's tools) is prefilled once and shared by
its G rows; row 0 of each group is the greedy anchor. Per turn, every live row decodes; its raw
sampled ids are parsed into reasoning, content and tool calls; ALL rows' calls run concurrently on
one event loop (a per-source limit on calls in flight, a timeout per call: a hung call becomes a
timeout observation); each row is extended with its observation turn; up to ``max_turns`` tool
turns, then rows still calling get their results plus a note and one forced final-answer turn whose
tool calls are not run (``max_turns``).

What training can rely on, per trajectory:
- ``tokens`` = prompt ids + raw sampled ids + observation ids, in order (never re-tokenised text);
  ``loss_mask`` is 1 exactly on the sampled ids; ``logprobs`` holds the sampler's log-probs there
  (temperature-scaled; greedy rows at T = 1) and 0 elsewhere. One sequence per trajectory (the
  reference trains one sample per turn); per-turn spans are in ``metadata["turn_spans"]``.
- Observations are encoded with ``messages.observation_segments``: tool text is untrusted, so
  control-token text in it (``<|im_end|>``) encodes as plain text; each result is cut to
  ``max_observation_tokens``. The steps hold exactly the results the model read.
- Finish reasons: ``answer`` (a turn with no tool call; ``invalid`` when ``valid`` rejects its
  content), ``length`` (the per-turn limit cut a turn, or the total budget / cache ran out: a row
  that would overflow ends here instead of failing the batch), ``max_turns`` (the forced final turn
  still called tools), ``error`` (host bookkeeping for that row failed; the batch goes on while
  the share of such rows stays within ``max_error_share``, else ``RolloutErrorsExceeded`` stops the
  step with the first failure's traceback: many failing rows are a bug, not noise to train on).
"""
from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import time
import traceback
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from arenarl_jax.text import messages as msgs
from arenarl_jax.text import tool_calls as tc
from arenarl_jax import types
from arenarl_jax.envs import base
from arenarl_jax.sampling.sampler import SamplingSettings, finish_reasons, token_lists
from arenarl_jax.sampling.buckets import bucket_length
from arenarl_jax.sampling.shared_rows import same_history
from arenarl_jax.rollout.settings import RolloutSettings

TRUNCATED_NOTE = "\n...[truncated]"


class RolloutErrorsExceeded(RuntimeError):
  """More of a batch's rows ended as ``error`` than ``rollout.max_error_share`` allows.

  Carries the count, the share, the limit and the first caught exception's formatted traceback
  (``first_traceback``; also in the message), so the stopped step says what broke."""

  def __init__(self, errors: int, rows: int, limit: float, first_traceback: str):
    self.errors, self.rows, self.limit = errors, rows, limit
    self.share = errors / rows
    self.first_traceback = first_traceback
    super().__init__(
        f"rollout: {errors}/{rows} rows ended as error ({self.share:.1%}) > "
        f"rollout.max_error_share={limit:.1%}; the first failure:\n"
        f"{first_traceback or '(no traceback: a row was left unfinished)'}")


@dataclasses.dataclass
class RolloutBatch:
  """``trajectories[b][g]`` for task b, row g (g = 0 the greedy anchor), and batch stats."""

  trajectories: list[list[types.Trajectory]]
  stats: dict[str, Any]

  @property
  def valid_rate(self) -> float:
    return self.stats["valid_rate"]


@dataclasses.dataclass
class _Row:
  """One trajectory under construction (host side)."""

  prompt_len: int
  tokens: list[int]
  mask: list[int]
  logp: list[float]
  steps: list[types.Step] = dataclasses.field(default_factory=list)
  stops: list[str] = dataclasses.field(default_factory=list)
  spans: list[tuple[int, int]] = dataclasses.field(default_factory=list)
  tool_log: list[dict[str, Any]] = dataclasses.field(default_factory=list)
  finish: str = ""
  note: str = ""
  forced: bool = False
  parsed: tc.ParsedTurn | None = None
  ended_eos: bool = False


async def _one_call(source: base.ToolSource, call: types.ToolCall, timeout: float,
                    limit: asyncio.Semaphore) -> tuple[base.ToolResult, float]:
  """One call under the source's limit; (result, wall seconds). Never raises."""
  async with limit:
    start = time.perf_counter()
    try:
      result = await asyncio.wait_for(source.call(call.name, dict(call.arguments),
                                                  timeout=timeout), timeout)
      if not isinstance(result, base.ToolResult):
        result = base.ToolResult(f"Error: {call.name} returned no result", ok=False,
                                 error_kind=base.TOOL_ERROR)
    except asyncio.TimeoutError:
      result = base.ToolResult(f"Error: {call.name} timed out after {timeout:g} s", ok=False,
                               error_kind=base.TIMEOUT)
    except Exception as e:  # a tool source broke its contract: the model sees an error
      result = base.ToolResult(f"Error: {call.name} failed ({type(e).__name__})", ok=False,
                               error_kind=base.TOOL_ERROR)
    return result, time.perf_counter() - start


async def _run_calls(source: base.ToolSource, calls: Sequence[types.ToolCall], timeout: float,
                     max_concurrent: int) -> list[tuple[base.ToolResult, float]]:
  limit = asyncio.Semaphore(max_concurrent)
  return list(await asyncio.gather(*(_one_call(source, c, timeout, limit) for c in calls)))


class Rollout:
  """The rollout driver over a sampler (``arenarl_jax.sampling.sampler.Sampler`` or anything with its
  ``prefill``/``decode``/``extend`` and ``cache_len``) and a tokenizer."""

  def __init__(self, sampler, tokenizer, settings: RolloutSettings, sampling: SamplingSettings):
    self.sampler, self.tok, self.settings = sampler, tokenizer, settings
    eos = set(sampling.eos_ids)
    for name in ("<|im_end|>", "<|endoftext|>"):
      try:
        eos.add(tokenizer.token_to_id(name))
      except (KeyError, ValueError):
        pass
    self.sampling = dataclasses.replace(sampling, eos_ids=tuple(sorted(eos)))
    self.budget = min(settings.max_total_tokens or sampler.cache_len, sampler.cache_len)
    self._loop: asyncio.AbstractEventLoop | None = None
    self._note_ids = msgs.encode_plain(tokenizer, TRUNCATED_NOTE)
    self._first_traceback = ""  # of the current run's first row failure (``_guard``)

  def close(self) -> None:
    if self._loop is not None:
      self._loop.close()
      self._loop = None

  # ------------------------------------------------------------------------------ prompts
  def prompt_messages(self, task: base.Task) -> list[dict[str, Any]]:
    system = [{"role": "system", "content": self.settings.system}] if self.settings.system else []
    return system + [{"role": "user", "content": task.query}]

  def observation(self, results: Sequence[str], *, close_previous: bool,
                  forced: bool) -> tuple[list[str], list[int]]:
    """(the results as the model reads them, cut to the token budget; the observation's ids)."""
    seen = [self._cut(r) for r in results]
    ids, _ = msgs.encode_segments(self.tok, msgs.observation_segments(
        seen, close_previous=close_previous, notes=[self.settings.final_note] if forced else []))
    return seen, ids

  def _cut(self, text: str) -> str:
    """``text`` cut so that its plain encoding has at most max_observation_tokens ids."""
    budget = self.settings.max_observation_tokens
    ids = msgs.encode_plain(self.tok, text)
    if len(ids) <= budget:
      return text
    keep = budget - len(self._note_ids)
    while keep > 0:
      cut = self.tok.decode(ids[:keep]).rstrip("\ufffd") + TRUNCATED_NOTE
      over = len(msgs.encode_plain(self.tok, cut)) - budget
      if over <= 0:
        return cut
      keep -= over
    return TRUNCATED_NOTE.strip()

  # ------------------------------------------------------------------------------ the loop
  def run(self, tasks: Sequence[base.Task], source: base.ToolSource, *, group_size: int,
          key: jax.Array, policy_step: int = 0,
          valid: Callable[[str, base.Task], tuple[bool, str]] | None = None,
          first_group: int = 0) -> RolloutBatch:
    """Rolls out every task ``group_size`` times; never raises for model output or tool trouble.

    ``first_group``: the global index of ``tasks[0]`` when they are one host's share of a step's
    tasks; each row then samples as that row of the whole step's batch would (same ``key``)."""
    if not tasks:
      raise ValueError("rollout: no tasks")
    t_start = time.perf_counter()
    self._first_traceback = ""
    g, s = group_size, self.settings
    tools = source.tools()
    prompts = [msgs.encode_segments(self.tok, msgs.render_segments(
        self.prompt_messages(t), tools=tools, add_generation_prompt=True))[0] for t in tasks]
    for b, p in enumerate(prompts):
      if len(p) >= self.budget:
        raise ValueError(f"rollout: task {tasks[b].id!r} renders to {len(p)} prompt tokens, which "
                         f"leaves no room in a budget of {self.budget}")
    rows = [_Row(len(prompts[r // g]), list(prompts[r // g]), [0] * len(prompts[r // g]),
                 [0.0] * len(prompts[r // g])) for r in range(len(tasks) * g)]
    row_settings = self.sampling.rows(len(rows), g, first_row=first_group * g)
    stats: dict[str, Any] = {"tool_phase_s": [], "slowest_call_s": [], "decode_s": [],
                             "extend_s": [],
                             "tool_calls": 0, "tool_errors": {}, "obs_buckets": set(),
                             "cache_sizes": set()}
    loop = self._loop = self._loop or asyncio.new_event_loop()
    t0 = time.perf_counter()
    state = self.sampler.prefill(prompts, group_size=g)
    jax.block_until_ready(getattr(state, "lengths_N", None))
    live = list(range(len(rows)))
    stats["prefill_s"] = time.perf_counter() - t0
    for turn in range(s.max_turns + 1):
      t0 = time.perf_counter()
      out, state = self.sampler.decode(state, self.sampling, jax.random.fold_in(key, turn),
                                       row_settings)
      jax.block_until_ready(out)
      stats["decode_s"].append(time.perf_counter() - t0)
      sampled, logps, reasons = token_lists(out), jax.device_get(out.logp_NT), finish_reasons(out)
      _note_size(stats, state)
      calls: list[tuple[int, types.ToolCall]] = []
      for r in live:
        self._guard(rows[r], lambda row=rows[r], r=r: self._take_turn(
            row, sampled[r], logps[r], reasons[r], forced=turn == s.max_turns,
            valid=valid and functools.partial(valid, task=tasks[r // g])))
        if not rows[r].finish:
          calls += [(r, c) for c in rows[r].parsed.tool_calls]
      waiting = [r for r in live if not rows[r].finish]
      if not waiting:
        break
      t0 = time.perf_counter()
      results = loop.run_until_complete(_run_calls(
          source, [c for _, c in calls], s.tool_timeout_s, s.max_concurrent_calls)) if calls else []
      stats["tool_phase_s"].append(time.perf_counter() - t0)
      stats["slowest_call_s"].append(max((lat for _, lat in results), default=0.0))
      stats["tool_calls"] += len(calls)
      by_row: dict[int, list[tuple[types.ToolCall, base.ToolResult, float]]] = {}
      for (r, call), (res, lat) in zip(calls, results):
        by_row.setdefault(r, []).append((call, res, lat))
        if not res.ok:
          stats["tool_errors"][res.error_kind] = stats["tool_errors"].get(res.error_kind, 0) + 1
      new_ids: list[list[int]] = [[] for _ in rows]
      for r in waiting:
        new_ids[r] = self._guard(rows[r], lambda row=rows[r], r=r: self._observe(
            row, by_row.get(r, []), forced=turn + 1 == s.max_turns), default=[])
      live = [r for r in waiting if not rows[r].finish]
      if not live:
        break
      stats["obs_buckets"].add(bucket_length(max(len(new_ids[r]) for r in live),
                                             getattr(self.sampler, "buckets", (1 << 30,))))
      # Rows past ours are the sampler's padding (``Sampler.prefill``): done, nothing to add.
      done = np.ones((np.shape(state.done_N)[0],), bool)
      done[live] = False
      t0 = time.perf_counter()
      new = [new_ids[r] if not done[r] else [] for r in range(len(done))]
      state = self.sampler.extend(state.replace(done_N=jnp.asarray(done)), new, same_history(
          [rows[r].tokens if r < len(rows) else [] for r in range(len(done))], new, g))
      jax.block_until_ready(getattr(state, "lengths_N", None))
      stats["extend_s"].append(time.perf_counter() - t0)
      _note_size(stats, state)
    for row in rows:
      if not row.finish:  # pragma: no cover - every live row finishes in its last turn
        row.finish, row.note = "error", "the rollout ended with the row unfinished"
    trajectories = [[self._trajectory(rows[b * g + i], task, i, policy_step)
                     for i in range(g)] for b, task in enumerate(tasks)]
    stats["wall_s"] = time.perf_counter() - t_start
    summary = _summary(stats, rows, self.sampling.temperature)
    if summary["errors"] > s.max_error_share * len(rows):
      raise RolloutErrorsExceeded(summary["errors"], len(rows), s.max_error_share,
                                  self._first_traceback)
    return RolloutBatch(trajectories, summary)

  def _guard(self, row: _Row, fn: Callable[[], Any], default: Any = None) -> Any:
    """Runs one row's bookkeeping; a failure ends that row as ``error``, not the batch (``run``
    counts such rows against ``max_error_share``). The run's first failure keeps its traceback:
    when the share is exceeded it is what the error shows."""
    try:
      return fn()
    except Exception as e:  # pylint: disable=broad-except
      row.finish, row.note = "error", f"{type(e).__name__}: {e}"
      if not self._first_traceback:
        self._first_traceback = traceback.format_exc()
      return default

  def _take_turn(self, row: _Row, ids: list[int], logp: np.ndarray, reason: str, *,
                 forced: bool, valid) -> None:
    """Records one sampled turn (its raw ids) and decides whether the row goes on."""
    room = self.budget - len(row.tokens)
    over_budget = len(ids) > room
    ids = ids[:max(room, 0)]
    start = len(row.tokens)
    row.tokens += ids
    row.mask += [1] * len(ids)
    row.logp += [float(x) for x in logp[:len(ids)]]
    row.spans.append((start, len(row.tokens)))
    row.stops.append("budget" if over_budget else reason)
    row.ended_eos = bool(ids) and ids[-1] in self.sampling.eos_ids
    row.parsed = parsed = tc.parse_turn(self.tok.decode(ids))
    if over_budget or reason == "length" or reason == "none":
      row.finish = "length"
    elif parsed.is_final:
      row.finish = "answer"
      if valid is not None:
        ok, why = valid(parsed.content)
        if not ok:
          row.finish, row.note = "invalid", why
    elif forced:
      row.finish = "max_turns"  # the forced final turn still asked for tools: not run
    if row.finish:
      row.steps.append(tc.to_step(parsed))

  def _observe(self, row: _Row, answered, *, forced: bool) -> list[int]:
    """The observation ids for a row's calls (results, then parse errors) or [] when it ends."""
    parsed = row.parsed
    texts = [res.text for _, res, _ in answered] + [f"Error: {e}" for e in parsed.errors]
    seen, ids = self.observation(texts, close_previous=not row.ended_eos, forced=forced)
    fits = len(row.tokens) + len(ids) < self.budget
    for (call, res, lat), text in zip(answered, seen):
      row.tool_log.append({"turn": len(row.steps), "name": call.name,
                           "arguments": dict(call.arguments), "ok": res.ok,
                           "error_kind": res.error_kind, "latency_s": round(lat, 6),
                           "seen": fits, **({} if res.ok else {"error": text[:200]})})
    for e in parsed.errors:
      row.tool_log.append({"turn": len(row.steps), "name": None, "arguments": None, "ok": False,
                           "error_kind": base.BAD_ARGUMENTS, "latency_s": 0.0, "seen": fits,
                           "error": e[:200]})
    if not fits:  # the observation would overflow: the results are never seen, so not recorded
      row.steps.append(tc.to_step(parsed))
      row.finish, row.note = "length", "the observation did not fit in the token budget"
      return []
    row.steps.append(tc.to_step(parsed, seen))
    row.tokens += ids
    row.mask += [0] * len(ids)
    row.logp += [0.0] * len(ids)
    row.forced = row.forced or forced
    return ids

  def _trajectory(self, row: _Row, task: base.Task, i: int, policy_step: int) -> types.Trajectory:
    greedy = i == 0 and self.sampling.greedy_anchor
    messages = msgs.messages_from_steps(task.query, row.steps,
                                        system=self.settings.system or None)
    return types.Trajectory(
        query=task.query, steps=tuple(row.steps), tokens=np.asarray(row.tokens, np.int32),
        loss_mask=np.asarray(row.mask, np.int32), logprobs=np.asarray(row.logp, np.float32),
        messages=tuple(messages), finish_reason=row.finish,
        metadata={"task_id": task.id, "env": task.env, "subtask": task.subtask,
                  "policy_step": policy_step,
                  "temperature": 0.0 if greedy else self.sampling.temperature,
                  "logprob_temperature": 1.0 if greedy or self.sampling.temperature == 0
                  else self.sampling.temperature,
                  "greedy": greedy, "turn_stop_reasons": tuple(row.stops),
                  "turn_spans": tuple(row.spans), "prompt_len": row.prompt_len,
                  "forced_final": row.forced, "tool_log": tuple(row.tool_log),
                  **({"finish_note": row.note} if row.note else {})})


def _note_size(stats: dict[str, Any], state) -> None:
  cache = getattr(state, "cache", None)
  if cache is not None and hasattr(cache, "n_slots"):
    stats["cache_sizes"].add(int(cache.n_slots))


def _summary(stats: dict[str, Any], rows: Sequence[_Row], temperature: float) -> dict[str, Any]:
  """Batch stats: finish counts (``errors``: the rows that ended as ``error``), the
  valid-generation rate (share of rows that answered), token counts and phase times (device_s:
  prefill, decode and extend calls, compiles included; tool_s: the tool phases; host_s: the rest
  of the wall time, the driver's own bookkeeping)."""
  finish = {f: sum(r.finish == f for r in rows) for f in types.TRAJECTORY_FINISH_REASONS}
  sampled = sum(sum(r.mask) for r in rows)
  device_s = stats["prefill_s"] + sum(stats["decode_s"]) + sum(stats["extend_s"])
  tool_s = sum(stats["tool_phase_s"])
  return {**stats, "obs_buckets": sorted(stats["obs_buckets"]),
          "cache_sizes": sorted(stats["cache_sizes"]), "finish": finish,
          "errors": finish["error"],
          "valid_rate": finish["answer"] / len(rows), "sampled_tokens": sampled,
          "turns": len(stats["decode_s"]), "device_s": device_s, "tool_s": tool_s,
          "host_s": max(stats["wall_s"] - device_s - tool_s, 0.0),
          "temperature": temperature}


class CompileCounter:
  """Counts the programs XLA builds while active (``with CompileCounter() as c: ...; c.count``):
  each one compiled, or loaded from JAX's persistent compilation cache. JAX times both under one
  event, and a load must count: it is a program this process had to build again, and without it
  a count would depend on what other processes sharing the cache compiled before (the test
  suite's workers share one; its ``test_rollout_model.py`` checks this)."""

  EVENT = "/jax/core/compile/backend_compile_duration"  # a compile, or a load from the cache

  def __init__(self):
    self.count = 0

  def _on_event(self, event: str, duration: float, **_: Any) -> None:
    del duration
    if event == self.EVENT:
      self.count += 1

  def __enter__(self) -> "CompileCounter":
    jax.monitoring.register_event_duration_secs_listener(self._on_event)
    return self

  def __exit__(self, *exc) -> None:
    jax.monitoring.unregister_event_duration_listener(self._on_event)


def tool_log_json(trajectory: types.Trajectory) -> str:
  """The tool log as one JSON line (for logs and debugging)."""
  return json.dumps(list(trajectory.metadata.get("tool_log", ())), ensure_ascii=False)
