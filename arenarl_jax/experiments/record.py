"""A finished run's result file: what the tables and intervals need, read from its workdir.

The pipeline leaves in its workdir ``metrics.jsonl`` (one row per RL step),
``eval/eval_<step>.jsonl`` (the start's evaluation at step 0 and the final one: per trajectory its
task, the strict verifier's ``solved``/``met``/``total`` and its matches) and prints a final
``RESULT`` line. The result file keeps the RESULT keys, the per-step rows of ``STEP_KEYS``, and
per test task the outcomes at the start and at the end, so paired intervals (arm vs arm on the
same tasks, end vs start) can be recomputed from committed files without the workdirs.
"""
from __future__ import annotations

import math
import os
import re
from typing import Any

from arenarl_jax import jsonl

# Per-step metrics kept (those a learning curve or a sanity check reads); absent ones are skipped.
STEP_KEYS = ("reward/mean", "reward/std", "reward/checker_mean", "reward/checker_tau",
             "reward/checker_tau_groups", "verifier/solved_rate", "verifier/met_rate",
             "valid_rate", "advantage/std", "advantage/zero_groups", "loss", "pg_loss", "kl",
             "entropy", "grad_norm", "clip_frac_low", "clip_frac_high",
             "rollout/sampled_tokens_mean", "rollout/finish/length", "judge/requests",
             "judge/requests_per_group", "judge/failures", "judge/pointwise_tied_groups",
             "reward/all_tied_groups", "reward/any_tied_groups", "time/step_s")
# Per-task outcomes, each at the start (step 0) and at the end: the task's mean over its
# trajectories; ``valid`` is the evaluation's valid-generation flag (a final answer within the
# limits that the environment accepts); ``win_vs_reference`` is the noise-free checker's match
# outcome (1, 0.5, 0; a failed match is left out, a task with only failed matches has None).
OUTCOMES = ("valid", "solved", "met", "win_vs_reference")
_DIGITS = re.compile(r"\d+")


def parse_result_line(text: str) -> dict[str, float | int | str]:
  """The keys of the last ``RESULT k=v ...`` line of ``text`` (counts as ints, other numbers
  as floats)."""
  lines = [ln for ln in text.splitlines() if ln.startswith("RESULT ")]
  if not lines:
    raise ValueError("no RESULT line in the run's output")
  out = {}
  for part in lines[-1].split()[1:]:
    key, _, value = part.partition("=")
    try:
      out[key] = int(value) if value.lstrip("-").isdigit() else float(value)
    except ValueError:
      out[key] = value
  return out


def step_rows(workdir: str) -> list[dict[str, float]]:
  """The RL metrics rows (``metrics.jsonl``) with ``step`` and the ``STEP_KEYS`` present."""
  path = os.path.join(workdir, "metrics.jsonl")
  if not os.path.isfile(path):
    return []
  rows = {}
  for row in jsonl.read_jsonl(path):
    if "step" in row:  # a resumed run rewrites its steps: the last row of a step wins
      rows[int(row["step"])] = {"step": int(row["step"]),
                                **{k: float(row[k]) for k in STEP_KEYS if k in row}}
  return [rows[s] for s in sorted(rows)]


def _mean(values: list[float]) -> float | None:
  return sum(values) / len(values) if values else None


def task_outcomes(eval_file: str) -> dict[str, dict[str, Any]]:
  """Per task id of one evaluation file: its subtask and the ``OUTCOMES`` (task means)."""
  per_task: dict[str, dict[str, list]] = {}
  subtask = {}
  for row in jsonl.read_jsonl(eval_file):
    if row.get("kind") != "trajectory":
      continue
    task = row["task_id"]
    subtask[task] = row.get("subtask")
    acc = per_task.setdefault(task, {k: [] for k in OUTCOMES})
    if row.get("valid") is not None:
      acc["valid"].append(float(bool(row["valid"])))
    if row.get("total") is not None:
      acc["solved"].append(float(bool(row["solved"])))
      acc["met"].append(row["met"] / row["total"] if row["total"] else 0.0)
    for m in row.get("matches", ()):
      if m.get("opponent") == "reference" and m.get("outcome") is not None:
        acc["win_vs_reference"].append(float(m["outcome"]))
  return {t: {"subtask": subtask[t], **{k: _mean(v) for k, v in acc.items()}}
          for t, acc in sorted(per_task.items())}


def finish_reasons(eval_file: str) -> dict[str, int]:
  """How the evaluation's trajectories ended: counts per finish reason (answer, length,
  max_turns, invalid, error), an invalid answer counted under ``invalid: <why>`` (the
  environment's reason, its numbers written N so that equal reasons add up)."""
  counts: dict[str, int] = {}
  for row in jsonl.read_jsonl(eval_file):
    if row.get("kind") != "trajectory":
      continue
    reason = row.get("finish_reason") or "unknown"
    note = (row.get("metadata") or {}).get("finish_note", "")
    if reason == "invalid" and note:
      reason = f"invalid: {_DIGITS.sub('N', note)}"
    counts[reason] = counts.get(reason, 0) + 1
  return dict(sorted(counts.items()))


def finishes(workdir: str) -> dict[str, dict[str, int]]:
  """``finish_reasons`` of the start's evaluation and of the newest one."""
  files = eval_files(workdir)
  if not files:
    return {}
  return {"start": finish_reasons(files[min(files)]), "end": finish_reasons(files[max(files)])}


def eval_files(workdir: str) -> dict[int, str]:
  """{RL step: path} of the workdir's evaluation files."""
  directory = os.path.join(workdir, "eval")
  out = {}
  for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else ():
    stem = name[:-len(".jsonl")] if name.endswith(".jsonl") else ""
    if stem.startswith("eval_") and stem[5:].isdigit():
      out[int(stem[5:])] = os.path.join(directory, name)
  return out


def tasks(workdir: str) -> dict[str, dict[str, Any]]:
  """Per task: subtask and ``<outcome>_start`` / ``<outcome>_end`` (step 0's and the newest
  evaluation's)."""
  files = eval_files(workdir)
  if 0 not in files:
    raise FileNotFoundError(f"{workdir}/eval: no evaluation at step 0 (the starting policy)")
  start, end = task_outcomes(files[0]), task_outcomes(files[max(files)])
  if sorted(start) != sorted(end):
    raise ValueError(f"{workdir}: the start and final evaluations cover different tasks")
  return {t: {"subtask": end[t]["subtask"],
              **{f"{k}_{when}": src[t][k] for k in OUTCOMES
                 for when, src in (("start", start), ("end", end))}} for t in sorted(end)}


def final_step(workdir: str) -> int:
  """The RL step of the workdir's newest evaluation."""
  files = eval_files(workdir)
  return max(files) if files else 0


def clean(value: Any) -> Any:
  """``value`` with NaN/inf floats as None (strict JSON), recursively."""
  if isinstance(value, float) and not math.isfinite(value):
    return None
  if isinstance(value, dict):
    return {k: clean(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [clean(v) for v in value]
  return value
