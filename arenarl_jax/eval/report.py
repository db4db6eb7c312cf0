"""The evaluation report: win rates per opponent, generation statistics, and its jsonl log.

``compare.evaluate`` builds an :class:`EvalReport`; this file holds what it reports about the
policy's own rollouts (valid-generation rate, lengths, turns, tool calls and tool errors by kind,
finish reasons; overall and per subtask), the flat scalars for metrics, a printable table, and
:func:`write_jsonl`, which writes every trajectory with its match logs to a step-numbered file and
never overwrites an earlier evaluation's file.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Mapping


from arenarl_jax import jsonl, types
from arenarl_jax.eval.tally import WinRate
from arenarl_jax.rollout import stats as rollout_stats

OVERALL = "overall"


@dataclasses.dataclass(frozen=True)
class Comparison:
  """The policy against one opponent: match k is policy trajectory k (as P) vs its opponent."""

  opponent: str
  matches: tuple[types.Match, ...]  # as the judge saw them (p stripped where ``stripped``)
  results: tuple[types.MatchResult, ...]
  scores: tuple[float | None, ...]  # tally.outcome() of each result: 1, 0.5, 0 or None (failed)
  stripped: tuple[bool, ...]
  overall: WinRate
  by_subtask: dict[str, WinRate]

  def to_dict(self) -> dict[str, Any]:
    return {"opponent": self.opponent, "overall": self.overall.to_dict(),
            "by_subtask": {s: w.to_dict() for s, w in self.by_subtask.items()},
            "stripped_matches": int(sum(self.stripped)),
            "requests": int(sum(r.requests for r in self.results))}


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
    return jsonl.jsonable({"step": self.step,
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
  return jsonl.jsonable({
      "kind": "trajectory", "step": report.step, "index": k,
      "task_id": t.metadata.get("task_id"), "subtask": types.subtask_of(t), "query": t.query,
      "finish_reason": t.finish_reason, "valid": report.valid[k],
      "sampled_tokens": rollout_stats.sampled_tokens(t),
      "tokens": None if t.tokens is None else int(len(t.tokens)),
      "messages": list(t.messages), "metadata": dict(t.metadata), "matches": matches})


def write_jsonl(report: EvalReport, directory: str | os.PathLike, prefix: str = "eval") -> str:
  """Writes ``<directory>/<prefix>_<step:08d>.jsonl`` (``create_jsonl``: never overwritten): a
  summary line, then one line per trajectory with its matches, their outcomes and the judge's
  ``detail``. Returns the path."""
  f, path = jsonl.create_jsonl(directory, f"{prefix}_{int(report.step):08d}")
  with f:
    f.write(json.dumps({"kind": "summary", **report.to_dict()}, ensure_ascii=False) + "\n")
    for k in range(len(report.trajectories)):
      f.write(json.dumps(trajectory_record(report, k), ensure_ascii=False) + "\n")
  return path
