"""Every training study's committed tables are what its committed result files say: each
``claims.csv`` (and ``results.csv``, ``steps.csv``) is rebuilt from ``results/*.json`` and
compared byte for byte, so a hand-edited verdict or number fails.

Tabling only: whether a result is stale against today's configs is ``--check``'s question (a
later config change must not turn this test red). The rebuild withholds the verdicts the
committed ``claims.csv`` withholds (its ``stale_runs``), and those must include every result file
that records no settings: such a file can never have a verdict in a committed table.
"""
import csv
import pathlib

import pytest

from arenarl_jax.experiments import runner, tables
from arenarl_jax.experiments import study as study_lib

ROOT = pathlib.Path(__file__).resolve().parents[2]
STUDIES = sorted(p.parent.name for p in (ROOT / "experiments").glob("*/claims.csv"))


def test_the_training_studies_have_committed_tables():
  assert {"arena_vs_pointwise", "topologies", "group_size", "valid_generation",
          "quickstart_control"} <= set(STUDIES)


@pytest.mark.parametrize("name", STUDIES)
def test_committed_tables_rebuild_byte_for_byte(name):
  study = study_lib.load(ROOT / "experiments" / name)
  results = runner.load_results(study.directory, study.runs)
  committed = (study.directory / "claims.csv").read_text(encoding="utf-8")
  withheld = {run for row in csv.DictReader(committed.splitlines())
              for run in row["stale_runs"].split()}
  unrecorded = {r["run"] for r in results if r["provenance"].get("settings") is None}
  involved = {r["run"] for c in study.claims for r in results
              if r["arm"] in (c.arm, c.versus)}
  assert unrecorded & involved <= withheld, "a result without recorded settings has a verdict"
  assert tables.claims_csv(study, results, withheld) == committed
  assert tables.results_csv(results) == (study.directory / "results.csv").read_text()
  assert tables.steps_csv(results) == (study.directory / "steps.csv").read_text()

