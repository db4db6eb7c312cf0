"""One command per study: run what is missing, then rebuild the tables, figures and README block.

  python -m arenarl_jax.experiments.run experiments/<study> [--preset=full|smoke] [--out=DIR]
      [--tables-only | --check | --refresh]

Reads ``<study>/study.py`` (``study.py``), runs the pipeline for every run whose result file is
missing or stale (``runner.py``; shared SFT stages first; ``staleness.py`` says when a result is
stale), then writes into the output folder, from the result files: ``results.csv``,
``steps.csv``, ``claims.csv`` (each claim's gap and verdict), ``arms.png``, ``curves.png`` and
the block between the results markers of its ``README.md``. ``--out`` defaults to the study
folder for the ``full`` preset (its results are the study's and are committed) and to
``<study>/work/<preset>`` for any other preset (a check, not a result). ``--tables-only``
rebuilds the outputs without running anything, and writes no verdict from a stale result: its
claims read ``stale`` and the command names the stale runs and what differs. ``--check`` writes
nothing and exits 1 when any run is missing or stale or any claim reads "not run yet", saying
why (seconds: no dataset is built, no bootstrap drawn). ``--refresh`` first re-reads the result
files' records from the runs' workdirs (when the record has grown a field since they were
written). A judge-agreement folder (``study.py`` with ``judges(preset)``) is checked with
``agreement.check``.
"""
from __future__ import annotations

import argparse
import pathlib
import sys

from arenarl_jax.experiments import figures, pooling, runner, tables
from arenarl_jax.experiments import study as study_lib


def default_out(directory: pathlib.Path, preset: str) -> pathlib.Path:
  return directory if preset == "full" else directory / "work" / preset


def build_outputs(study: study_lib.Study, out: pathlib.Path, results: list[dict],
                  stale: dict[str, list[str]] | None = None) -> None:
  """The CSVs, the figures and the README block, from ``results``; no claim that pools a run
  of ``stale`` ({run: why}) gets a verdict."""
  stale = stale or {}
  (out / "results.csv").write_text(tables.results_csv(results))
  (out / "steps.csv").write_text(tables.steps_csv(results))
  (out / "claims.csv").write_text(tables.claims_csv(study, results, stale))
  drawn = []
  if results:
    arms = [a for a in study.arms() if any(r["arm"] == a for r in results)]
    figures.arms(results, arms, out / "arms.png", study.bootstrap_samples, study.bootstrap_seed)
    figures.curves(results, arms, out / "curves.png")
    drawn = ["arms.png", "curves.png"]
  tables.write_block(out / "README.md", tables.markdown(study, results, drawn, stale),
                     f"{study.directory.name} ({study.preset})")


def not_run_claims(study: study_lib.Study, results: list[dict]) -> list[str]:
  """The claims that read "not run yet": an arm without results, or arms that share no seed
  (the pairing ``claims.check`` does, without its bootstrap)."""
  tables.check_claim_arms(study)
  out = []
  for claim in study.claims:
    try:
      pooling.gap_values(results, claim.arm, claim.versus, claim.metric)
    except (KeyError, ValueError) as e:
      out.append(f"{claim.text} ({claim.metric}): {e.args[0] if e.args else e}")
  return out


def check(study: study_lib.Study, out: pathlib.Path, say) -> int:
  """``--check``: 0 when every run has a current result file and every claim can be judged;
  otherwise 1, after saying which runs are missing or stale (and what differs) and which claims
  read "not run yet"."""
  name = f"{study.directory.name} ({study.preset})"
  missing = [r.name for r in study.runs if not runner.result_path(out, r).is_file()]
  stale = runner.stale(out, study.runs)
  not_run = not_run_claims(study, runner.load_results(out, study.runs))
  for run in missing:
    say(f"missing {run}: no result file")
  for run, why in stale.items():
    say(f"stale {run}: " + "; ".join(why))
  for claim in not_run:
    say(f"not run yet: {claim}")
  ok = not (missing or stale or not_run)
  say(f"{name}: {len(study.runs)} runs, {len(missing)} missing, {len(stale)} stale; "
      f"{len(study.claims)} claims, {len(not_run)} not run yet: "
      + ("current" if ok else "NOT current (run the study command)"))
  return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("study", help="the study folder (holds study.py)")
  parser.add_argument("--preset", default="full")
  parser.add_argument("--out", default="", help="output folder (see above)")
  mode = parser.add_mutually_exclusive_group()
  mode.add_argument("--tables-only", action="store_true",
                    help="rebuild the outputs without running anything (no verdict from a "
                         "stale result)")
  mode.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 when a run is missing or stale or a claim reads "
                         "'not run yet', saying why")
  parser.add_argument("--refresh", action="store_true",
                      help="re-read the result files' per-step and per-task records from the "
                           "runs' workdirs where they exist (runner.refresh), then rebuild")
  args = parser.parse_args(argv)
  say = lambda text: print(text, flush=True)  # noqa: E731
  if args.check and _is_agreement(args.study):
    from arenarl_jax.experiments import agreement  # pylint: disable=g-import-not-at-top
    return agreement.check(args.study, args.preset, args.out, say)
  study = study_lib.load(args.study, args.preset)
  out = pathlib.Path(args.out).resolve() if args.out else default_out(study.directory,
                                                                      args.preset)
  if args.check:
    return check(study, out, say)
  out.mkdir(parents=True, exist_ok=True)
  if args.refresh:
    say(f"refreshed {len(runner.refresh(out, study.runs))} result file(s) from their workdirs")
  if not args.tables_only:
    status = runner.run_missing(out, study.runs, say)
    skipped = [n for n, s in status.items() if s == "skipped"]
    again = [n for n, s in status.items() if s == "stale"]
    say(f"ran {len(status) - len(skipped)} run(s), skipped {len(skipped)} with a current "
        f"result file ({len(again)} ran again: stale)")
  results = runner.load_results(out, study.runs)
  stale = runner.stale(out, study.runs)
  for run, why in stale.items():
    say(f"stale {run}: " + "; ".join(why))
  if stale:
    say(f"{len(stale)} of {len(results)} result files are stale: no claim that pools them gets "
        f"a verdict (they read '{tables.STALE}'); run the study command without --tables-only")
  build_outputs(study, out, results, stale)
  say(f"wrote {out}/results.csv, steps.csv, figures and the README block "
      f"({len(results)} of {len(study.runs)} runs)")
  return 0


def _is_agreement(directory: str) -> bool:
  """Whether ``directory`` holds a judge-agreement study (``judges(preset)``, no ``runs``)."""
  _, _, module = study_lib.study_module(directory, "runs(preset)")
  return hasattr(module, "judges") and not hasattr(module, "runs")


if __name__ == "__main__":
  sys.exit(main())
