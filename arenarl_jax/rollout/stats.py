"""What a set of rollouts looks like: one definition for the RL step's metrics and the evaluation.

``generation_stats`` is the nested, JSON-able summary (counts, rates and spreads) that the
evaluation reports per subtask; ``trajectory_metrics`` flattens the same numbers into the RL
step's scalars under a prefix. Both read the same fields the same way:
- ``sampled_tokens``: the loss-mask tokens of each trajectory (rows without a mask are left out);
  ``length``: the whole sequence's tokens; ``answer_chars``: the final answer's length;
  ``turns``: the assistant steps;
- tool calls and errors come from ``metadata["tool_log"]`` (one entry per call, malformed calls
  included); a trajectory without a log counts its steps' calls and no errors
  (``without_tool_log`` says how many); an error without a kind counts as ``unknown``;
- with the source's ``tool_names``, the calls of each tool: a name the policy made up counts as
  ``other`` and a call that did not parse as ``malformed``, so policy text never becomes a key.
"""
from __future__ import annotations

import collections
import math
from typing import Any, Sequence

import numpy as np

from arenarl_jax import types


def _spread(values: Sequence[float]) -> dict[str, float] | None:
  if not values:
    return None
  x = np.asarray(values, np.float64)
  return {"mean": float(x.mean()), "median": float(np.median(x)), "max": float(x.max())}


def sampled_tokens(t: types.Trajectory) -> int | None:
  """The policy's own tokens of ``t`` (its loss mask's sum); None without a mask."""
  return None if t.loss_mask is None else int(np.asarray(t.loss_mask).sum())


def generation_stats(trajectories: Sequence[types.Trajectory],
                     valid: Sequence[bool] | None = None,
                     tool_names: Sequence[str] | None = None) -> dict[str, Any]:
  """Counts, rates and spreads of ``trajectories`` (module docstring); ``valid_rate`` is the
  share of ``valid`` (NaN without it)."""
  n = len(trajectories)
  finish = collections.Counter({f: 0 for f in types.TRAJECTORY_FINISH_REASONS})
  stops: collections.Counter = collections.Counter()
  errors: collections.Counter = collections.Counter()
  known = set(tool_names or ())
  by_name = collections.Counter({name: 0 for name in sorted(known)})
  latencies = []
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
    for e in log:
      name = e.get("name")
      if name is not None:
        latencies.append(float(e.get("latency_s", 0.0)))
      by_name["malformed" if name is None else name if name in known else "other"] += 1
  sampled = [x for x in map(sampled_tokens, trajectories) if x is not None]
  n_errors = sum(errors.values())
  out = {
      "trajectories": n,
      "valid_rate": float(np.mean(valid)) if n and valid is not None else math.nan,
      "finish": dict(finish),
      "sampled_tokens": _spread(sampled),
      "length": _spread([len(t.tokens) for t in trajectories if t.tokens is not None]),
      "answer_chars": _spread([len(t.final_answer) for t in trajectories]),
      "turns": _spread([len(t.steps) for t in trajectories]),
      "tool_calls": calls,
      "tool_calls_per_trajectory": calls / n if n else math.nan,
      "tool_call_mean_s": float(np.mean(latencies)) if latencies else None,
      "tool_errors": n_errors,
      "tool_error_rate": n_errors / calls if calls else 0.0,
      "tool_errors_by_kind": dict(sorted(errors.items())),
      "tool_error_rate_by_kind": {k: v / calls for k, v in sorted(errors.items())},
      "turn_stop_reasons": dict(sorted(stops.items())),
      "without_tool_log": no_log,
  }
  if tool_names is not None:
    out["tool_calls_by_name"] = dict(by_name)
  return out


def trajectory_metrics(trajectories: Sequence[types.Trajectory], prefix: str,
                       tool_names: Sequence[str] | None = None) -> dict[str, float]:
  """``generation_stats`` as flat scalars under ``prefix`` (means per trajectory; finish reasons
  as shares; the mean tool-call latency is a timing, so it goes under ``time/``)."""
  g = generation_stats(trajectories, tool_names=tool_names)
  n = max(g["trajectories"], 1)
  out: dict[str, float] = {}
  for key in ("sampled_tokens", "length", "turns", "answer_chars"):
    if g[key] is not None:
      out[f"{prefix}/{key}_mean"] = g[key]["mean"]
  out[f"{prefix}/tool_calls_per_trajectory"] = g["tool_calls"] / n
  if g["tool_call_mean_s"] is not None:
    out[f"time/{prefix}/tool_call_mean_s"] = g["tool_call_mean_s"]
  for name, count in g.get("tool_calls_by_name", {}).items():
    out[f"{prefix}/tool_calls/{name}"] = count / n
  out[f"{prefix}/tool_error_rate"] = g["tool_error_rate"]
  out.update({f"{prefix}/tool_errors/{k}": float(v) for k, v in g["tool_errors_by_kind"].items()})
  for reason in types.TRAJECTORY_FINISH_REASONS:
    out[f"{prefix}/finish/{reason}"] = g["finish"][reason] / n
  return out
