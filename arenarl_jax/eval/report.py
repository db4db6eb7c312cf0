"""The evaluation report: win rates per opponent, generation statistics, and its jsonl log.

``evaluate.evaluate`` builds an :class:`EvalReport`; this file holds what it reports about the
policy's own rollouts (valid-generation rate, lengths, turns, tool calls and tool errors by kind,
finish reasons; overall and per subtask), the flat scalars for metrics, a printable table, and
:func:`write_jsonl`, which writes every trajectory with its match logs to a step-numbered file and
never overwrites an earlier evaluation's file.
"""
from __future__ import annotations

import collections
import dataclasses
import json
import math
import os
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from arenarl_jax import types

if TYPE_CHECKING:
  from arenarl_jax.eval.compare import Comparison

OVERALL = "overall"


def subtask_of(trajectory: types.Trajectory) -> str:
  """``metadata["subtask"]``, else the middle part of an ``env/subtask/number`` task id."""
  subtask = trajectory.metadata.get("subtask")
  if isinstance(subtask, str) and subtask:
    return subtask
  parts = str(trajectory.metadata.get("task_id", "")).split("/")
  return parts[1] if len(parts) == 3 and parts[1] else "unknown"


def _spread(values: Sequence[float]) -> dict[str, float] | None:
  if not values:
    return None
  x = np.asarray(values, np.float64)
  return {"mean": float(x.mean()), "median": float(np.median(x)), "max": float(x.max())}


def _sampled_tokens(t: types.Trajectory) -> int | None:
  return None if t.loss_mask is None else int(np.asarray(t.loss_mask).sum())


def generation_stats(trajectories: Sequence[types.Trajectory],
                     valid: Sequence[bool]) -> dict[str, Any]:
  """What a set of rollouts looks like: counts, rates and spreads (JSON-able).

  ``valid_rate`` is the share of ``valid``; ``sampled_tokens`` are the loss-mask tokens (rows
  without tokens are left out); ``answer_chars`` the final answer's length; ``turns`` the
  assistant steps. Tool calls and errors come from ``metadata["tool_log"]`` (one entry per call,
  malformed calls included); a trajectory without a log counts its steps' calls and no errors
  (``without_tool_log`` says how many).
  """
  n = len(trajectories)
  finish = collections.Counter({f: 0 for f in types.TRAJECTORY_FINISH_REASONS})
  stops: collections.Counter = collections.Counter()
  errors: collections.Counter = collections.Counter()
  calls = no_log = 0
  for t in trajectories:
    finish[t.finish_reason or "none"] += 1
    stops.update(str(s) for s in t.metadata.get("turn_stop_reasons", ()))
    log = t.metadata.get("tool_log")
    if log is None:
      no_log += 1
      calls += sum(len(s.tool_calls) for s in t.steps)
      continue
    calls += len(log)
    errors.update(str(e.get("error_kind") or "unknown") for e in log if not e.get("ok", True))
  sampled = [x for x in map(_sampled_tokens, trajectories) if x is not None]
  n_errors = sum(errors.values())
  return {
      "trajectories": n,
      "valid_rate": float(np.mean(valid)) if n else math.nan,
      "finish": dict(finish),
      "sampled_tokens": _spread(sampled),
      "answer_chars": _spread([len(t.final_answer) for t in trajectories]),
      "turns": _spread([len(t.steps) for t in trajectories]),
      "tool_calls": calls,
      "tool_calls_per_trajectory": calls / n if n else math.nan,
      "tool_errors": n_errors,
      "tool_error_rate": n_errors / calls if calls else 0.0,
      "tool_errors_by_kind": dict(sorted(errors.items())),
      "tool_error_rate_by_kind": {k: v / calls for k, v in sorted(errors.items())},
      "turn_stop_reasons": dict(sorted(stops.items())),
      "without_tool_log": no_log,
  }


@dataclasses.dataclass(frozen=True)
class EvalReport:
  """One evaluation: the policy's trajectories (flat), their validity, the comparison with each
  opponent (``"reference"`` first) and the generation statistics overall and per subtask."""

  step: int
  trajectories: tuple[types.Trajectory, ...]
  valid: tuple[bool, ...]
  comparisons: Mapping[str, Comparison]
  generation: Mapping[str, Mapping[str, Any]]  # "overall" and each subtask -> generation_stats

  def win_rate(self, opponent: str = "reference") -> float:
    return self.comparisons[opponent].overall.rate

  def to_dict(self) -> dict[str, Any]:
    """The summary (no trajectories), JSON-able."""
    return jsonable({"step": self.step,
                     "win_rates": {k: c.to_dict() for k, c in self.comparisons.items()},
                     "generation": self.generation})

  def scalars(self, prefix: str = "eval") -> dict[str, float]:
    """Flat numbers for TensorBoard and the metrics jsonl (``eval/win_rate_vs_reference``,
    ``eval/<subtask>/win_rate_vs_sft``, ``eval/valid_rate``, ``eval/tool_errors/<kind>``, ...)."""
    out: dict[str, float] = {}
    for name, comp in self.comparisons.items():
      for where, w in ((OVERALL, comp.overall), *comp.by_subtask.items()):
        head = prefix if where == OVERALL else f"{prefix}/{where}"
        out.update({f"{head}/win_rate_vs_{name}": w.rate, f"{head}/ci_low_vs_{name}": w.low,
                    f"{head}/ci_high_vs_{name}": w.high, f"{head}/judged_vs_{name}": w.judged,
                    f"{head}/failed_vs_{name}": w.failed})
    for where, g in self.generation.items():
      head = prefix if where == OVERALL else f"{prefix}/{where}"
      out[f"{head}/valid_rate"] = g["valid_rate"]
      for key in ("sampled_tokens", "answer_chars", "turns"):
        if g[key] is not None:
          out[f"{head}/{key}_mean"] = g[key]["mean"]
      out[f"{head}/tool_calls_per_trajectory"] = g["tool_calls_per_trajectory"]
      out[f"{head}/tool_error_rate"] = g["tool_error_rate"]
      if where == OVERALL:
        out.update({f"{head}/tool_errors/{k}": v for k, v in g["tool_errors_by_kind"].items()})
        out.update({f"{head}/finish/{k}": v for k, v in g["finish"].items()})
    return {k: float(v) for k, v in out.items()}

  def table(self) -> str:
    """A results table: one row per subtask and overall, win rates with intervals and counts."""
    names = list(self.comparisons)
    head = f"{'subtask':<14}{'n':>5}{'valid':>7}" + "".join(
        f"{'vs ' + n:>32}" for n in names)
    lines = [head]
    for where in [*sorted(k for k in self.generation if k != OVERALL), OVERALL]:
      g = self.generation[where]
      row = f"{where:<14}{g['trajectories']:>5}{g['valid_rate']:>7.2f}"
      for n in names:
        comp = self.comparisons[n]
        w = comp.overall if where == OVERALL else comp.by_subtask.get(where)
        cell = ("-" if w is None else
                f"{w.rate:.3f} [{w.low:.3f}, {w.high:.3f}] {w.judged}+{w.failed}f")
        row += f"{cell:>32}"
      lines.append(row)
    return "\n".join(lines)


def jsonable(x: Any) -> Any:
  """``x`` as JSON-safe values: arrays and tuples to lists, NaN/inf to None, keys to str, other
  objects to their ``str``."""
  if isinstance(x, Mapping):
    return {str(k): jsonable(v) for k, v in x.items()}
  if isinstance(x, (list, tuple)):
    return [jsonable(v) for v in x]
  if isinstance(x, np.ndarray):
    return jsonable(x.tolist())
  if isinstance(x, np.generic):
    return jsonable(x.item())
  if isinstance(x, float):
    return x if math.isfinite(x) else None
  if x is None or isinstance(x, (str, int, bool)):
    return x
  return str(x)


def trajectory_record(report: EvalReport, k: int) -> dict[str, Any]:
  """Policy trajectory ``k`` of the report with every match it played (JSON-able)."""
  t = report.trajectories[k]
  matches = []
  for name, comp in report.comparisons.items():
    m, r = comp.matches[k], comp.results[k]
    matches.append({"opponent": name, "score_p": r.score_p, "score_q": r.score_q, "ok": r.ok,
                    "error": r.error, "outcome": comp.scores[k], "requests": r.requests,
                    "stripped_tool_results": comp.stripped[k], "detail": r.detail,
                    "opponent_task_id": m.q.metadata.get("task_id") if m.q else None,
                    "opponent_messages": list(m.q.messages) if m.q else None})
  return jsonable({
      "kind": "trajectory", "step": report.step, "index": k,
      "task_id": t.metadata.get("task_id"), "subtask": subtask_of(t), "query": t.query,
      "finish_reason": t.finish_reason, "valid": report.valid[k],
      "sampled_tokens": _sampled_tokens(t),
      "tokens": None if t.tokens is None else int(len(t.tokens)),
      "messages": list(t.messages), "metadata": dict(t.metadata), "matches": matches})


def create_jsonl(directory: str | os.PathLike, base_name: str):
  """A new file ``<directory>/<base_name>.jsonl`` opened for writing (``_1``, ``_2``, ... when
  that exists: a file is only ever created, never overwritten); returns (file, path)."""
  os.makedirs(directory, exist_ok=True)
  for n in range(10_000):
    path = os.path.join(directory, base_name + (f"_{n}" if n else "") + ".jsonl")
    try:
      return open(path, "x", encoding="utf-8"), path  # pylint: disable=consider-using-with
    except FileExistsError:
      continue
  raise FileExistsError(f"{directory}: too many files named {base_name}_*.jsonl")


def write_jsonl(report: EvalReport, directory: str | os.PathLike, prefix: str = "eval") -> str:
  """Writes ``<directory>/<prefix>_<step:08d>.jsonl`` (``create_jsonl``: never overwritten): a
  summary line, then one line per trajectory with its matches, their outcomes and the judge's
  ``detail``. Returns the path."""
  f, path = create_jsonl(directory, f"{prefix}_{int(report.step):08d}")
  with f:
    f.write(json.dumps({"kind": "summary", **report.to_dict()}, ensure_ascii=False) + "\n")
    for k in range(len(report.trajectories)):
      f.write(json.dumps(trajectory_record(report, k), ensure_ascii=False) + "\n")
  return path
