"""The evaluation report: verified success, win rates per opponent, generation statistics, jsonl.

``compare.evaluate`` builds an :class:`EvalReport`; this file holds what it reports: the strict
verifier's solved and requirements-met rates and their paired change from the starting policy
(``eval/success.py``), the win rate against each opponent with its wins, ties and losses, the
failed matches apart and the conservative rate beside it, and the policy's own rollouts
(valid-generation rate, the share stopped at a limit, lengths, turns, tool calls and tool errors
by kind, finish reasons); overall and per subtask. Also the flat scalars for metrics, a printable
table, and :func:`write_jsonl`, which writes every trajectory with its verdict and match logs to a
step-numbered file and never overwrites an earlier evaluation's file.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any, Mapping


from arenarl_jax import jsonl, types
from arenarl_jax.envs.base import Verification
from arenarl_jax.eval.success import LIMIT_STOPS, Success
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
  opponent (``"reference"`` first), the generation statistics and, with a verifier, the verdicts
  and success rates; overall and per subtask."""

  step: int
  trajectories: tuple[types.Trajectory, ...]
  valid: tuple[bool, ...]
  comparisons: Mapping[str, Comparison]
  generation: Mapping[str, Mapping[str, Any]]  # "overall" and each subtask -> generation_stats
  verdicts: tuple[Verification, ...] | None = None  # the policy's, in trajectory order
  success: Mapping[str, Success] = dataclasses.field(default_factory=dict)  # "overall", subtasks
  start_verdicts: tuple[Verification, ...] | None = None  # the second opponent's (the start)

  def win_rate(self, opponent: str = "reference") -> float:
    return self.comparisons[opponent].overall.rate

  def to_dict(self) -> dict[str, Any]:
    """The summary (no trajectories), JSON-able."""
    return jsonl.jsonable({"step": self.step,
                           "success": {k: v.to_dict() for k, v in self.success.items()},
                           "win_rates": {k: c.to_dict() for k, c in self.comparisons.items()},
                           "generation": self.generation})

  def scalars(self, prefix: str = "eval") -> dict[str, float]:
    """Flat numbers for TensorBoard and the metrics jsonl (``eval/solved_rate``,
    ``eval/solved_diff``, ``eval/win_rate_vs_reference``, ``eval/<subtask>/wins_vs_sft``,
    ``eval/valid_rate``, ``eval/limit_stop_rate``, ``eval/tool_errors/<kind>``, ...)."""
    out: dict[str, float] = {}
    for where, s in self.success.items():
      head = prefix if where == OVERALL else f"{prefix}/{where}"
      for name in ("solved", "met", "content_met", "first_call_place"):
        for suffix, e in (("", getattr(s, name)), ("_start", getattr(s, f"{name}_start"))):
          if e is not None:
            out.update({f"{head}/{name}_rate{suffix}": e.value,
                        f"{head}/{name}_rate{suffix}_ci_low": e.low,
                        f"{head}/{name}_rate{suffix}_ci_high": e.high})
        d = getattr(s, f"{name}_diff")
        if d is not None:
          out.update({f"{head}/{name}_diff": d.value, f"{head}/{name}_diff_ci_low": d.low,
                      f"{head}/{name}_diff_ci_high": d.high})
    for name, comp in self.comparisons.items():
      for where, w in ((OVERALL, comp.overall), *comp.by_subtask.items()):
        head = prefix if where == OVERALL else f"{prefix}/{where}"
        out.update({f"{head}/win_rate_vs_{name}": w.rate, f"{head}/ci_low_vs_{name}": w.low,
                    f"{head}/ci_high_vs_{name}": w.high, f"{head}/judged_vs_{name}": w.judged,
                    f"{head}/wins_vs_{name}": w.wins, f"{head}/ties_vs_{name}": w.ties,
                    f"{head}/losses_vs_{name}": w.losses, f"{head}/failed_vs_{name}": w.failed,
                    f"{head}/win_rate_vs_{name}_conservative": w.conservative})
    for where, g in self.generation.items():
      head = prefix if where == OVERALL else f"{prefix}/{where}"
      out[f"{head}/valid_rate"] = g["valid_rate"]
      out[f"{head}/limit_stop_rate"] = limit_stops(g)
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
    """The results tables, one row per subtask and overall: the strict verifier's rates and
    their change from the start (when it was evaluated too), then the judge's win rates with
    wins-ties-losses, the failed matches and the conservative rate."""
    wheres = [*sorted(k for k in self.generation if k != OVERALL), OVERALL]
    lines = []
    if self.success:
      content = any(s.content_met is not None for s in self.success.values())
      places = any(s.first_call_place is not None for s in self.success.values())
      lines.append("strict verifier: solved = every requirement met; met = requirements met; "
                   "content = content requirements met (format ones apart); change from the "
                   "start paired over tasks; [95% bootstrap interval]"
                   + ("; place = first turn calls a place the query names (tasks naming one: "
                      "start -> now)" if places else ""))
      lines.append(f"{'subtask':<12}{'n':>5}{'valid':>7}{'limit':>7}{'solved':>22}"
                   f"{'change':>24}{'met':>22}{'change':>24}"
                   + (f"{'content':>22}{'change':>24}" if content else "")
                   + (f"{'place':>18}" if places else ""))
      for where in wheres:
        g, s = self.generation[where], self.success.get(where)
        row = f"{where:<12}{g['trajectories']:>5}{g['valid_rate']:>7.2f}{limit_stops(g):>7.2f}"
        if s is not None:
          row += (f"{_cell(s.solved):>22}{_cell(s.solved_diff, True):>24}"
                  f"{_cell(s.met):>22}{_cell(s.met_diff, True):>24}")
          if content:
            row += f"{_cell(s.content_met):>22}{_cell(s.content_met_diff, True):>24}"
          if places:
            row += f"{_place_cell(s):>18}"
        lines.append(row)
      lines.append("")
    names = list(self.comparisons)
    lines.append("judge (noise-free checker): win rate [95% interval] wins-ties-losses, failed "
                 "matches apart, conservative rate (failed = lost)")
    lines.append(f"{'subtask':<12}{'n':>5}{'valid':>7}" + "".join(f"{'vs ' + n:>44}"
                                                               for n in names))
    for where in wheres:
      g = self.generation[where]
      row = f"{where:<12}{g['trajectories']:>5}{g['valid_rate']:>7.2f}"
      for n in names:
        comp = self.comparisons[n]
        w = comp.overall if where == OVERALL else comp.by_subtask.get(where)
        cell = ("-" if w is None else
                f"{w.rate:.3f} [{w.low:.3f},{w.high:.3f}] {w.wins}-{w.ties}-{w.losses} "
                f"f{w.failed} c{w.conservative:.3f}")
        row += f"{cell:>44}"
      lines.append(row)
    return "\n".join(lines)


def _cell(e, signed: bool = False) -> str:
  if e is None:
    return "-"
  f = "+.3f" if signed else ".3f"
  if math.isnan(e.low):  # fewer than two tasks: no interval
    return f"{e.value:{f}} [n/a]"
  return f"{e.value:{f}} [{e.low:{f}},{e.high:{f}}]"


def _place_cell(s: Success) -> str:
  if s.first_call_place is None:
    return "-"
  start = ("" if s.first_call_place_start is None
           else f"{s.first_call_place_start.value:.2f} -> ")
  return f"{start}{s.first_call_place.value:.2f} n{s.place_tasks}"


def limit_stops(generation: Mapping[str, Any]) -> float:
  """The share of a ``generation_stats`` summary's trajectories that stopped at a limit."""
  n = generation["trajectories"]
  stops = sum(generation["finish"].get(k, 0) for k in LIMIT_STOPS)
  return stops / n if n else float("nan")


def trajectory_record(report: EvalReport, k: int) -> dict[str, Any]:
  """Policy trajectory ``k`` of the report with every match it played (JSON-able)."""
  t = report.trajectories[k]
  matches = []
  for name, comp in report.comparisons.items():
    m, r = comp.matches[k], comp.results[k]
    # One match per opponent, all in round 0 (the viewer draws a training tournament's rounds
    # from the rollout logs the same way).
    matches.append({"opponent": name, "round": 0, "score_p": r.score_p, "score_q": r.score_q,
                    "ok": r.ok, "error": r.error, "outcome": comp.scores[k], "requests": r.requests,
                    "stripped_tool_results": comp.stripped[k], "detail": r.detail,
                    "opponent_task_id": m.q.metadata.get("task_id") if m.q else None,
                    "opponent_messages": list(m.q.messages) if m.q else None})
  return jsonl.jsonable({
      "kind": "trajectory", "step": report.step, "index": k,
      "task_id": t.metadata.get("task_id"), "subtask": types.subtask_of(t), "query": t.query,
      "finish_reason": t.finish_reason, "valid": report.valid[k],
      **({} if report.verdicts is None else report.verdicts[k].as_dict()),
      "sampled_tokens": rollout_stats.sampled_tokens(t),
      "tokens": None if t.tokens is None else int(len(t.tokens)),
      "messages": list(t.messages), "metadata": dict(t.metadata), "matches": matches})


def write_jsonl(report: EvalReport, directory: str | os.PathLike, prefix: str = "eval") -> str:
  """Writes ``<directory>/<prefix>_<step:08d>.jsonl`` (``create_jsonl``: never overwritten): a
  summary line, then one line per trajectory with its verdict (``solved``, ``unmet``, ``met``,
  ``total``), its matches (each with its round), their outcomes and the judge's ``detail``.
  Returns the path."""
  f, path = jsonl.create_jsonl(directory, f"{prefix}_{int(report.step):08d}")
  with f:
    f.write(json.dumps({"kind": "summary", **report.to_dict()}, ensure_ascii=False) + "\n")
    for k in range(len(report.trajectories)):
      f.write(json.dumps(trajectory_record(report, k), ensure_ascii=False) + "\n")
  return path
