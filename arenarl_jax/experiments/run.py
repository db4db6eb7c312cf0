"""One command per study: run what is missing, then rebuild the tables, figures and README block.

  python -m arenarl_jax.experiments.run experiments/<study> [--preset=full|smoke] [--out=DIR]

Reads ``<study>/study.py`` (``study.py``), runs the pipeline for every run whose result file is
missing (``runner.py``; shared SFT stages first), then writes into the output folder, from the
result files alone: ``results.csv``, ``steps.csv``, ``claims.csv`` (each claim's gap and
verdict), ``arms.png``, ``curves.png`` and the block
between the results markers of its ``README.md``. ``--out`` defaults to the study folder for the
``full`` preset (its results are the study's and are committed) and to
``<study>/work/<preset>`` for any other preset (a check, not a result). ``--tables-only``
rebuilds the outputs without running anything; ``--refresh`` first re-reads the result files'
records from the runs' workdirs (when the record has grown a field since they were written).
"""
from __future__ import annotations

import argparse
import pathlib
import sys

from arenarl_jax.experiments import figures, runner, tables
from arenarl_jax.experiments import study as study_lib


def default_out(directory: pathlib.Path, preset: str) -> pathlib.Path:
  return directory if preset == "full" else directory / "work" / preset


def build_outputs(study: study_lib.Study, out: pathlib.Path, results: list[dict]) -> None:
  """The CSVs, the figures and the README block, from ``results``."""
  (out / "results.csv").write_text(tables.results_csv(results))
  (out / "steps.csv").write_text(tables.steps_csv(results))
  (out / "claims.csv").write_text(tables.claims_csv(study, results))
  drawn = []
  if results:
    arms = [a for a in study.arms() if any(r["arm"] == a for r in results)]
    figures.arms(results, arms, out / "arms.png", study.bootstrap_samples, study.bootstrap_seed)
    figures.curves(results, arms, out / "curves.png")
    drawn = ["arms.png", "curves.png"]
  tables.write_block(out / "README.md", tables.markdown(study, results, drawn),
                     f"{study.directory.name} ({study.preset})")


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("study", help="the study folder (holds study.py)")
  parser.add_argument("--preset", default="full")
  parser.add_argument("--out", default="", help="output folder (see above)")
  parser.add_argument("--tables-only", action="store_true")
  parser.add_argument("--refresh", action="store_true",
                      help="re-read the result files' per-step and per-task records from the "
                           "runs' workdirs where they exist (runner.refresh), then rebuild")
  args = parser.parse_args(argv)
  study = study_lib.load(args.study, args.preset)
  out = pathlib.Path(args.out).resolve() if args.out else default_out(study.directory,
                                                                      args.preset)
  out.mkdir(parents=True, exist_ok=True)
  say = lambda text: print(text, flush=True)  # noqa: E731
  if args.refresh:
    say(f"refreshed {len(runner.refresh(out, study.runs))} result file(s) from their workdirs")
  if not args.tables_only:
    status = runner.run_missing(out, study.runs, say)
    skipped = [n for n, s in status.items() if s == "skipped"]
    say(f"ran {len(status) - len(skipped)} run(s), skipped {len(skipped)} with a result file")
  results = runner.load_results(out, study.runs)
  build_outputs(study, out, results)
  say(f"wrote {out}/results.csv, steps.csv, figures and the README block "
      f"({len(results)} of {len(study.runs)} runs)")
  return 0


if __name__ == "__main__":
  sys.exit(main())
