"""The experiment harness (``arenarl_jax/experiments``): the smoke study end to end, then its
statistics on hand-built numbers.

The smoke study (``experiments/quickstart_control``, ``--preset=smoke``: arena seeds 0 and 1,
permute seed 0 of the quickstart smoke, one shared SFT stage) runs once, as the command a user
types, into a copy of the study folder; a second run of the command must skip every run and
rewrite identical outputs.
"""
import csv
import dataclasses
import json
import os
import pathlib
import re
import subprocess
import sys
import time

import numpy as np
import pytest

from arenarl_jax.eval import bootstrap
from arenarl_jax.experiments import claims, hierarchical, pooling, record, runner, staleness
from arenarl_jax.experiments import tables
from arenarl_jax.experiments import study as study_lib
from arenarl_jax.testing import xla_flags
import study_folder  # tests/experiments/study_folder.py

ROOT = pathlib.Path(__file__).resolve().parents[2]
STUDY = ROOT / "experiments" / "quickstart_control"

OUTPUTS = ("results.csv", "steps.csv", "claims.csv", "README.md", "arms.png", "curves.png")


def _command(folder):
  env = {**os.environ, "XLA_FLAGS": xla_flags.with_devices(1)}
  t0 = time.perf_counter()
  proc = subprocess.run([sys.executable, "-m", "arenarl_jax.experiments.run", str(folder),
                         "--preset=smoke", f"--out={folder}"], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=900, check=False)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  return proc.stdout, time.perf_counter() - t0


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
  folder = study_folder.copy_study(tmp_path_factory, STUDY)
  stdout, _ = _command(folder)
  return folder, stdout, study_lib.load(folder, "smoke")


def test_every_run_has_a_result_file_with_its_outcomes_and_provenance(smoke):
  folder, stdout, study = smoke
  assert "ran 3 run(s), skipped 0" in stdout
  results = runner.load_results(folder, study.runs)
  assert [r["run"] for r in results] == ["arena_s0", "arena_s1", "permute_s0"]
  for run, r in zip(study.runs, results):
    assert r["result"]["test_tasks"] == 5 and "met_diff_ci_low" in r["result"]
    assert r["final_step"] == 1 and [row["step"] for row in r["steps"]] == [1]
    assert len(r["tasks"]) == 5
    for task in r["tasks"].values():
      assert set(task) == {"subtask"} | {f"{k}_{w}" for k in record.OUTCOMES
                                         for w in ("start", "end")}
    p = r["provenance"]
    assert p["config_hash"] == study_lib.config_hash(run)  # what ran is what the study says
    assert len(p["commit"]) == 40 and isinstance(p["dirty"], bool)
    assert {"jax", "flax", "optax", "numpy", "load_start", "load_end", "wall_s"} <= set(p)
    # What staleness compares, recorded from what ran: it matches what the study resolves to.
    assert p["settings"] == staleness.settings(study_lib.resolve(run.config, run.overrides,
                                                                 run.seed))
    assert p["start"] is None and p["dataset"] == runner.sft_data(run)
  assert runner.stale(folder, study.runs) == {}
  assert results[0]["overrides"] == {"rl.advantage_control": "none", "rl.steps": 1}
  # One SFT stage served all three runs, and no run trained SFT again.
  assert stdout.count("sft stage") == 1
  (sft_dir,) = [p for p in (folder / "work").iterdir() if p.name.startswith("sft_")]
  assert sft_dir.name == f"sft_{results[0]['provenance']['sft_hash']}"
  assert runner.ran_config_hash(sft_dir, study_lib.RL_ONLY) == results[0]["provenance"]["sft_hash"]
  assert {r["provenance"]["sft_hash"] for r in results} == {sft_dir.name[4:]}
  assert json.loads((sft_dir / runner.DONE).read_text())["data"] == runner.sft_data(study.runs[0])
  for r in results:
    log = (folder / "work" / r["run"] / "stdout.log").read_text()
    assert "\nsft: " not in log and "sft_s=" in log


def test_the_tables_figures_and_readme_block(smoke):
  folder, _, _ = smoke
  with open(folder / "results.csv", encoding="utf-8") as f:
    rows = list(csv.DictReader(f))
  assert [r["run"] for r in rows] == ["arena_s0", "arena_s1", "permute_s0"]
  assert {"arm", "seed", "win_rate_vs_reference", "met_diff", "commit", "dirty", "config_hash",
          "jax", "flax", "optax", "numpy", "load_start", "load_end", "wall_s"} <= set(rows[0])
  with open(folder / "steps.csv", encoding="utf-8") as f:
    steps = list(csv.DictReader(f))
  assert len(steps) == 3 and {"run", "step", "reward/mean", "verifier/met_rate"} <= set(steps[0])
  with open(folder / "claims.csv", encoding="utf-8") as f:
    claim_rows = list(csv.DictReader(f))
  assert [r["verdict"] for r in claim_rows] == ["cannot tell"] * 3 + ["not run yet"]
  assert claim_rows[0]["command"] == ("python -m arenarl_jax.experiments.run "
                                      "experiments/quickstart_control --preset=smoke")
  assert claim_rows[0]["seeds"] == "2" and claim_rows[0]["tasks"] == "5"
  for name in ("arms.png", "curves.png"):
    assert (folder / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  text = (folder / "README.md").read_text()
  assert text.startswith("# Quickstart control")  # the study's own README, block replaced
  block = text.split(tables.START)[1].split(tables.END)[0]
  assert "| arena | 0, 1 | 5 |" in block and "| permute | 0 | 5 |" in block
  assert block.count("**cannot tell**") == 3 and "not run yet" in block  # no flip arm in smoke
  assert "![arms](arms.png)" in block


def test_a_second_command_skips_every_run_and_rewrites_identical_outputs(smoke):
  folder, _, _ = smoke
  before = {name: (folder / name).read_bytes() for name in OUTPUTS}
  results_before = sorted(p.stat().st_mtime_ns for p in (folder / "results").iterdir())
  stdout, seconds = _command(folder)
  assert "ran 0 run(s), skipped 3" in stdout and "pipeline" not in stdout
  assert seconds < 60  # no pipeline started: the interpreter, the configs and the figures
  assert results_before == sorted(p.stat().st_mtime_ns for p in (folder / "results").iterdir())
  assert {name: (folder / name).read_bytes() for name in OUTPUTS} == before


def test_refresh_rereads_a_result_files_records_from_its_workdir(smoke):
  folder, _, study = smoke
  path = runner.result_path(folder, study.runs[0])
  original = path.read_text()
  rec = json.loads(original)
  assert rec["finish"]["start"] and sum(rec["finish"]["end"].values()) == 5  # 5 test tasks
  # A file written before "valid" and the finish reasons were recorded:
  for task in rec["tasks"].values():
    del task["valid_start"], task["valid_end"]
  del rec["finish"]
  path.write_text(json.dumps(rec))
  old = runner.load_results(folder, study.runs)
  iv = pooling.arm_interval(old[:1], "arena", "valid", "end", samples=50)
  assert np.isnan(iv.value)  # the missing outcome is NaN in the tables, not an error
  assert runner.refresh(folder, study.runs) == ["arena_s0", "arena_s1", "permute_s0"]
  assert path.read_text() == original


# ------------------------------------------------------------ statistics on hand-built numbers
def test_one_seed_is_exactly_the_task_bootstrap():
  tasks_K = np.array([0.0, 1.0, 0.5, 1.0, 0.0, 0.25])
  iv = hierarchical.interval(tasks_K[None], samples=500, seed=3)
  assert (iv.low, iv.high) == bootstrap.mean_interval(tasks_K, 500, 3)
  assert iv.value == pytest.approx(tasks_K.mean()) and (iv.seeds, iv.tasks) == (1, 6)


def test_identical_seeds_collapse_to_the_task_bootstrap():
  tasks_K = np.array([0.0, 1.0, 0.5, 1.0, 0.0, 0.25])
  iv = hierarchical.interval(np.tile(tasks_K, (4, 1)), samples=500, seed=3)
  low, high = bootstrap.mean_interval(tasks_K, 500, 3)
  assert (iv.low, iv.high) == pytest.approx((low, high), abs=1e-12)


def test_a_constant_difference_is_a_point():
  iv = hierarchical.interval(np.full((3, 7), 0.25), samples=300, seed=0)
  assert (iv.value, iv.low, iv.high) == pytest.approx((0.25, 0.25, 0.25))
  assert iv.excludes_zero() == 1


def test_seeds_that_disagree_widen_the_interval_by_hand():
  # Seed 0 scores 0 on every task, seed 1 scores 1: a resample's mean is 0 (both draws seed 0,
  # probability 1/4), 1/2 or 1 (1/4), whatever tasks it draws; so the 95% interval is [0, 1].
  iv = hierarchical.interval(np.array([[0.0] * 5, [1.0] * 5]), samples=2000, seed=0)
  assert (iv.value, iv.low, iv.high) == (0.5, 0.0, 1.0) and iv.excludes_zero() == 0


def test_missing_values_are_left_out_and_one_task_has_no_interval():
  iv = hierarchical.interval(np.array([[1.0, np.nan, 1.0]]), samples=200, seed=0)
  assert (iv.value, iv.low, iv.high) == (1.0, 1.0, 1.0)
  one = hierarchical.interval(np.array([[0.3], [0.5]]))
  assert one.value == pytest.approx(0.4) and np.isnan(one.low) and one.excludes_zero() == 0


def _result(arm, seed, end, start):
  return {"arm": arm, "seed": seed, "tasks": {
      f"t{k}": {"met_end": e, "met_start": s} for k, (e, s) in enumerate(zip(end, start))}}


def test_gaps_pair_seeds_and_tasks():
  results = [_result("a", 0, [0.5, 1.0], [0.0, 0.5]), _result("a", 1, [1.0, 1.0], [0.5, 0.5]),
             _result("b", 1, [0.0, 0.5], [0.5, 0.5]), _result("b", 2, [0.0, 0.0], [0.0, 0.0])]
  np.testing.assert_array_equal(pooling.gap_values(results, "a", "start", "met"),
                                [[0.5, 0.5], [0.5, 0.5]])
  np.testing.assert_array_equal(pooling.gap_values(results, "a", "b", "met"), [[1.0, 0.5]])
  gap = pooling.gap_interval(results, "a", "start", "met", samples=200)
  assert (gap.value, gap.low, gap.high, gap.seeds) == (0.5, 0.5, 0.5, 2)
  with pytest.raises(ValueError, match="share no seed"):
    pooling.gap_values(results[:1] + results[3:], "a", "b", "met")


@pytest.mark.parametrize("low, high, direction, expected", [
    (0.1, 0.3, 1, claims.REPRODUCED), (0.1, 0.3, -1, claims.CONTRADICTED),
    (-0.3, -0.1, 1, claims.CONTRADICTED), (-0.3, -0.1, -1, claims.REPRODUCED),
    (-0.1, 0.3, 1, claims.CANNOT_TELL), (0.0, 0.3, 1, claims.CANNOT_TELL),
    (float("nan"), float("nan"), 1, claims.CANNOT_TELL)])
def test_the_verdict_rule(low, high, direction, expected):
  gap = hierarchical.Interval(0.2, low, high, seeds=3, tasks=10)
  assert claims.verdict(gap, direction) == expected


def test_a_study_checks_its_runs_before_running_anything(tmp_path):
  bad_runs = (("[Run('a', 'x', 'configs/quickstart.py:smoke', 0, {'rl.stepz': 1})]",
               KeyError, "rl.stepz"),
              ("[Run('a', 'x', 'configs/quickstart.py:smoke', s) for s in (0, 1)]",
               ValueError, "repeats run names"))
  for runs, error, match in bad_runs:
    (tmp_path / "study.py").write_text(
        "from arenarl_jax.experiments import Run\n"
        f"def runs(preset):\n  return {runs}\n")
    with pytest.raises(error, match=match):
      study_lib.load(tmp_path, "smoke")


def test_a_claim_naming_an_undefined_arm_is_an_error_and_an_unrun_one_is_not_run_yet(tmp_path):
  # Arm "c" is in the full preset only: defined, so its claim waits for results. "arena" is in
  # no preset: a misspelled arm, which must not pass for one that has not run yet.
  (tmp_path / "study.py").write_text(
      "from arenarl_jax.experiments import Claim, Run\n"
      "CLAIMS = (Claim('a improves', 'met', 'a', 'start'), Claim('c above a', 'met', 'c', 'a'))\n"
      "def runs(preset):\n"
      "  arms = ('a', 'b', 'c') if preset == 'full' else ('a', 'b')\n"
      "  return [Run(arm, arm, 'configs/quickstart.py:smoke', 0) for arm in arms]\n")
  study = study_lib.load(tmp_path, "smoke")
  assert study.arms() == ["a", "b"] and study.defined_arms() == ["a", "b", "c"]
  results = [_result("a", 0, [0.5, 1.0], [0.0, 0.5])]
  rows = list(csv.DictReader(tables.claims_csv(study, results).splitlines()))
  assert [r["verdict"] for r in rows] == [claims.REPRODUCED, tables.NOT_RUN]
  for typo in (claims.Claim("arena improves", "met", "arena", "start"),
               claims.Claim("a above arena", "met", "a", "arena")):
    bad = dataclasses.replace(study, claims=study.claims + (typo,))
    message = (f"claim '{typo.text}' (met) names arm 'arena', which the study does not "
               f"define; known arms: ['a', 'b', 'c']")
    with pytest.raises(ValueError, match=re.escape(message)):
      tables.claims_csv(bad, results)
    with pytest.raises(ValueError, match=re.escape(message)):
      tables.markdown(bad, results, [])


def test_result_lines_parse_counts_as_ints():
  parsed = record.parse_result_line("noise\nRESULT a=0.5000 wins_vs_sft=3 path=x\n")
  assert parsed == {"a": 0.5, "wins_vs_sft": 3, "path": "x"}
  assert json.dumps(record.clean({"x": float("nan")})) == '{"x": null}'


def test_a_studys_own_outputs_do_not_make_the_checkout_dirty(tmp_path, monkeypatch):
  # Re-running a study rewrites its tables, README block and result files; only code (and the
  # study's own study.py) changed since the commit may mark a result dirty.
  from arenarl_jax.experiments import provenance
  def git(*args):
    subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

  files = {"pkg.py": "x = 1\n", "exp/study.py": "RUNS = 1\n", "exp/results.csv": "a\n1\n"}
  for name, text in files.items():
    (tmp_path / name).parent.mkdir(exist_ok=True)
    (tmp_path / name).write_text(text)
  git("init", "-q")
  git("add", ".")
  git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
  monkeypatch.setattr(provenance, "ROOT", tmp_path)
  out = tmp_path / "exp"
  assert provenance.git_state(out)["dirty"] is False
  (out / "results.csv").write_text("a\n2\n")
  assert provenance.git_state(out)["dirty"] is False
  assert provenance.git_state()["dirty"] is True
  (out / "study.py").write_text("RUNS = 2\n")
  assert provenance.git_state(out)["dirty"] is True
  git("checkout", "--", "exp/study.py")
  (tmp_path / "pkg.py").write_text("x = 2\n")
  state = provenance.git_state(out)
  assert state["dirty"] is True and len(state["commit"]) == 40


def test_a_shared_sft_stage_trained_on_other_data_is_trained_again(tmp_path, monkeypatch):
  # The stage's folder is named by the config; its DONE names the dataset (which digests the
  # environment's code), so an edited expert cannot hand runs a checkpoint of the old data.
  run = study_lib.Run("a", "x", "configs/quickstart.py:smoke", 0)
  trained, data = [], ["travel-seed0-err0.3-aaa"]
  monkeypatch.setattr(runner, "sft_data", lambda r: data[0])
  monkeypatch.setattr(runner, "execute", lambda cmd, log, what: (
      log.parent.mkdir(parents=True, exist_ok=True), trained.append(data[0])))
  said = []
  first = runner.sft_stage(tmp_path, run, said.append)
  assert runner.sft_stage(tmp_path, run, said.append) == first and trained == [data[0]]
  # A run seeded from it, stopped half way, resumes with what it has.
  workdir = tmp_path / "work" / "a"
  assert runner.seed_workdir(first, workdir) is False
  (workdir / "partial").write_text("step 3")
  assert runner.seed_workdir(first, workdir) is False and (workdir / "partial").is_file()
  data[0] = "travel-seed0-err0.3-bbb"
  assert runner.sft_stage(tmp_path, run, said.append) == first
  assert trained == ["travel-seed0-err0.3-aaa", "travel-seed0-err0.3-bbb"]
  assert json.loads((first / runner.DONE).read_text())["data"] == data[0]
  assert "trained on dataset travel-seed0-err0.3-aaa" in said[-2]
  # The half-finished run was seeded from the old stage: it starts again from the new one.
  assert runner.seed_workdir(first, workdir) is True and not (workdir / "partial").exists()
  assert json.loads((workdir / runner.SEEDED).read_text())["data"] == data[0]


def test_the_sft_stage_names_the_dataset_its_config_reads():
  from arenarl_jax.data import builder
  run = study_lib.Run("a", "x", "configs/research_quickstart.py:smoke", 0)
  assert runner.sft_data(run) == (
      f"research-seed0-err0.3-{builder.env_code_version('research')[:12]}")
