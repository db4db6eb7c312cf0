"""A study's tables from its result files: ``results.csv``, ``steps.csv`` and the README block.

Every table is a function of the result files and of which of them are stale (no timestamps,
fixed column order and formatting), so running the command again over the same results rewrites
identical files. A claim that pools a stale run (``staleness.py``) gets no verdict: it reads
``stale`` and names those runs in ``claims.csv``'s ``stale_runs``. The markdown block replaces
what lies between ``START`` and ``END`` in the study's README.
"""
from __future__ import annotations

import csv
import io
import json
import math
import pathlib
from typing import Collection, Mapping, Sequence

from arenarl_jax.experiments import claims, pooling
from arenarl_jax.experiments.record import OUTCOMES, STEP_KEYS
from arenarl_jax.experiments.study import Study

START, END = "<!-- results:start -->", "<!-- results:end -->"
# The main job's RESULT keys in the contract's order (others follow, sorted).
RESULT_KEYS = ("win_rate_vs_sft", "ci_low", "ci_high", "win_rate_vs_reference", "valid_rate",
               "valid_rate_start", "test_tasks", "solved_rate", "solved_rate_start",
               "solved_diff", "solved_diff_ci_low", "solved_diff_ci_high", "met_rate",
               "met_rate_start", "met_diff", "met_diff_ci_low", "met_diff_ci_high",
               "limit_stop_rate", "wins_vs_sft", "ties_vs_sft", "losses_vs_sft",
               "win_rate_vs_sft_conservative")
PROVENANCE_KEYS = ("commit", "dirty", "config_hash", "sft_hash", "jax", "flax", "optax", "numpy",
                   "python", "load_start", "load_end", "wall_s")
RUN_KEYS = ("run", "arm", "seed", "final_step", "config", "overrides")
LABELS = {"valid": "valid", "solved": "solved", "met": "requirements met",
          "win_vs_reference": "win vs reference"}
GAPS = ("valid", "solved", "met")  # outcomes whose change from the start the arm table shows


def _csv(header: Sequence[str], rows: Sequence[dict]) -> str:
  buf = io.StringIO()
  writer = csv.DictWriter(buf, fieldnames=list(header), lineterminator="\n", restval="")
  writer.writeheader()
  writer.writerows(rows)
  return buf.getvalue()


def results_csv(results: Sequence[dict]) -> str:
  """One row per run: who it is, its RESULT keys, its provenance."""
  extra = sorted({k for r in results for k in r["result"]} - set(RESULT_KEYS))
  header = [*RUN_KEYS, *RESULT_KEYS, *extra, *PROVENANCE_KEYS]
  rows = []
  for r in results:
    row = {k: r[k] for k in RUN_KEYS if k != "overrides"}
    row["overrides"] = json.dumps(r["overrides"], sort_keys=True)
    row.update(r["result"])
    row.update({k: r["provenance"].get(k) for k in PROVENANCE_KEYS})
    rows.append(row)
  return _csv(header, rows)


def steps_csv(results: Sequence[dict]) -> str:
  """One row per (run, RL step) with the kept per-step metrics."""
  header = ["run", "arm", "seed", "step", *STEP_KEYS]
  return _csv(header, [{"run": r["run"], "arm": r["arm"], "seed": r["seed"], **row}
                       for r in results for row in r["steps"]])


CLAIM_KEYS = ("study", "claim", "outcome", "arm", "versus", "direction", "paper", "gap", "low",
              "high", "seeds", "tasks", "verdict", "stale_runs", "command")


def command(study: Study) -> str:
  """The command that regenerates the study's outputs (and runs what is missing)."""
  return (f"python -m arenarl_jax.experiments.run experiments/{study.directory.name}"
          + ("" if study.preset == "full" else f" --preset={study.preset}"))


def check_claim_arms(study: Study) -> None:
  """ValueError for a claim whose ``arm`` or ``versus`` is no arm the study defines
  (``Study.defined_arms``; ``versus`` may also be the run's own start): a misspelled arm would
  otherwise read as an arm that has not run yet, and its claim would never get a verdict."""
  known = study.defined_arms()
  for claim in study.claims:
    named = [claim.arm] + ([] if claim.versus == pooling.START else [claim.versus])
    for name in named:
      if name not in known:
        raise ValueError(f"{study.directory.name}: claim {claim.text!r} ({claim.metric}) names "
                         f"arm {name!r}, which the study does not define; known arms: {known}")


def stale_in(claim, results: Sequence[dict], stale: Collection[str]) -> list[str]:
  """The stale runs (names in ``stale``) among the results of the arms ``claim`` compares."""
  arms = {claim.arm} | ({claim.versus} - {pooling.START})
  return [r["run"] for r in results if stale and r["arm"] in arms and r["run"] in stale]


def claims_csv(study: Study, results: Sequence[dict], stale: Collection[str] = ()) -> str:
  """One row per claim: the paper's statement and source, our gap with its interval, the
  verdict (``not run yet`` while a defined arm has no result file; ``stale`` when it would pool
  a run named in ``stale``, listed in ``stale_runs``: the numbers are the old runs', the verdict
  is withheld; an arm the study does not define is a ValueError, ``check_claim_arms``) and the
  command; the rows the README's top-level results table is generated from
  (``scripts/readme_claims.py``). ``stale`` empty tables every result as current."""
  check_claim_arms(study)
  rows = []
  for claim in study.claims:
    row = {"study": study.directory.name, "claim": claim.text, "outcome": claim.metric,
           "arm": claim.arm, "versus": claim.versus, "direction": claim.direction,
           "paper": claim.source, "command": command(study)}
    try:
      gap, word = claims.check(claim, results, study.bootstrap_samples, study.bootstrap_seed)
    except (KeyError, ValueError):
      row.update(verdict=NOT_RUN)
    else:
      old = stale_in(claim, results, stale)
      row.update(gap=f"{gap.value:.4f}", low=f"{gap.low:.4f}", high=f"{gap.high:.4f}",
                 seeds=gap.seeds, tasks=gap.tasks, verdict=STALE if old else word,
                 stale_runs=" ".join(old))
    rows.append(row)
  return _csv(CLAIM_KEYS, rows)


NOT_RUN = "not run yet"
STALE = "stale"


def stale_lines(stale: Mapping[str, Sequence[str]], total: int) -> list[str]:
  """The README block's note on stale result files: runs grouped by the same reasons."""
  if not stale:
    return []
  groups: dict[tuple[str, ...], list[str]] = {}
  for name, why in stale.items():
    groups.setdefault(tuple(why), []).append(name)
  lines = [f"**{len(stale)} of {total} result files are stale**: the values that shape a "
           f"result, as `study.py` resolves them now, differ from what they record, or they "
           f"record none (`arenarl_jax/experiments/staleness.py`). No claim that pools them gets "
           f"a verdict (it reads **{STALE}**; the numbers are the old runs'). The study command "
           f"runs them again; `--check` lists why.", ""]
  for why, names in groups.items():
    lines.append(f"- {', '.join(names)}: {'; '.join(why)}")
  return lines


def _num(x: float, signed: bool = False) -> str:
  if x is None or math.isnan(x):
    return "n/a"
  return f"{x:+.3f}" if signed else f"{x:.3f}"


def _cell(iv, signed: bool = False) -> str:
  if math.isnan(iv.low):
    return f"{_num(iv.value, signed)} [n/a]"
  return f"{_num(iv.value, signed)} [{_num(iv.low, signed)}, {_num(iv.high, signed)}]"


def markdown(study: Study, results: Sequence[dict], figures: Sequence[str],
             stale: Mapping[str, Sequence[str]] | None = None) -> str:
  """The README block: per arm the pooled outcomes at the end and the change from the start,
  then which result files are stale and why (``stale``: {run: reasons}), then each claim's gap
  and verdict (``check_claim_arms`` first; ``stale`` for a claim that pools a stale run), then
  the study's own ``report`` lines, then the figures."""
  stale = stale or {}
  check_claim_arms(study)
  samples, seed = study.bootstrap_samples, study.bootstrap_seed
  commits = sorted({(r["provenance"]["commit"][:10] + (" (dirty)" if r["provenance"]["dirty"]
                                                      else "")) for r in results})
  lines = [f"Generated by `{command(study)}` from {len(results)} of {len(study.runs)} result files "
           f"(`{pathlib.Path('results')}/`; code {', '.join(commits) or '-'}). "
           f"Means over seeds and test tasks; [95% hierarchical bootstrap interval: seeds, then "
           f"tasks, {samples} resamples].", ""]
  arms = [a for a in study.arms() if any(r["arm"] == a for r in results)]
  head = ["arm", "seeds", "tasks"] + [f"{LABELS[m]} (end)" for m in OUTCOMES] + [
      f"{LABELS[m]}: end - start" for m in GAPS]
  lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for arm in arms:
    ends = [pooling.arm_interval(results, arm, m, "end", samples, seed) for m in OUTCOMES]
    gaps = [pooling.gap_interval(results, arm, pooling.START, m, samples, seed)
            for m in GAPS]
    seeds = sorted(r["seed"] for r in results if r["arm"] == arm)
    lines.append(f"| {arm} | {', '.join(map(str, seeds))} | {ends[0].tasks} | "
                 + " | ".join(_cell(e) for e in ends) + " | "
                 + " | ".join(_cell(g, True) for g in gaps) + " |")
  if stale:
    lines += ["", *stale_lines(stale, len(results))]
  if study.claims:
    lines += ["", "| claim (the paper's direction) | where the paper says so | outcome "
              "| our gap [95%] | seeds x tasks | verdict |", "|---|---|---|---|---|---|"]
    for claim in study.claims:
      try:
        gap, word = claims.check(claim, results, samples, seed)
      except (KeyError, ValueError) as e:  # an arm without results yet
        cells = ("-", "-", f"{NOT_RUN} ({e})")
      else:
        word = STALE if stale_in(claim, results, stale) else word
        cells = (_cell(gap, True), f"{gap.seeds} x {gap.tasks}", f"**{word}**")
      lines.append(f"| {claim.text} | {claim.source or '-'} | {LABELS[claim.metric]} | "
                   + " | ".join(cells) + " |")
  if study.report is not None and results:
    lines += ["", *study.report(results)]
  if figures:
    lines += [""] + [f"![{pathlib.Path(f).stem}]({f})" for f in figures]
  return "\n".join(lines)


def write_block(readme: pathlib.Path, block: str, title: str) -> None:
  """Replaces the block between the markers of ``readme`` (created with them when missing)."""
  if not readme.exists():
    readme.write_text(f"# {title}\n\n{START}\n{END}\n")
  text = readme.read_text()
  if START not in text or END not in text:
    raise ValueError(f"{readme}: missing the {START} / {END} markers")
  head, rest = text.split(START, 1)
  _, tail = rest.split(END, 1)
  readme.write_text(head + START + "\n" + block + "\n" + END + tail)
