"""Staleness of a study's result files (``arenarl_jax/experiments/staleness.py``) and the three
places that act on it: ``--check`` (exit 1, saying why), ``--tables-only`` (no verdict from a
stale run) and the study command (reruns a stale run). Small synthetic studies in temporary
folders with hand-written result files: nothing trains, no dataset is built.
"""
import csv
import json
import time

import pytest

from arenarl_jax import cache_dirs, config_tree
from arenarl_jax.data import builder
from arenarl_jax.experiments import run as run_cli
from arenarl_jax.experiments import runner, staleness, tables
from arenarl_jax.experiments import study as study_lib

CONFIG = "configs/quickstart.py:smoke"
STUDY = """from arenarl_jax.experiments import Claim, Run
CLAIMS = (Claim('a improves', 'met', 'a', 'start'), Claim('a above b', 'met', 'a', 'b')
          {extra_claim})
OVERRIDES = {overrides}
def runs(preset):  # arm b only in the full preset
  return [Run(f'{{arm}}_s{{seed}}', arm, {config!r}, seed, OVERRIDES.get(arm, {{}}))
          for arm in ('a', 'b')[:2 if preset == 'full' else 1] for seed in (0, 1)]
"""


def write_study(folder, overrides=None, extra_claim=""):
  folder.mkdir(parents=True, exist_ok=True)
  (folder / "study.py").write_text(STUDY.format(overrides=repr(overrides or {}), config=CONFIG,
                                                extra_claim=extra_claim))
  return study_lib.load(folder)


def write_result(folder, run, facts=None):
  """A result file for ``run`` whose outcomes give every claim an interval; ``facts``: its
  provenance's staleness records (``staleness.facts`` of the run's config now by default; {}:
  a file written before those records existed)."""
  if facts is None:
    facts = staleness.facts(study_lib.resolve(run.config, run.overrides, run.seed))
  tasks = {f"t{k}": {"subtask": "s", "met_start": 0.1 * k, "met_end": 0.1 * k + 0.05 * (
      run.arm == "a") + 0.01 * run.seed} for k in range(6)}
  rec = {"run": run.name, "arm": run.arm, "seed": run.seed, "config": run.config,
         "overrides": dict(run.overrides), "share_sft": True, "result": {}, "final_step": 1,
         "steps": [], "tasks": tasks, "finish": {},
         "provenance": {"commit": "0" * 40, "dirty": False, "config_hash": "x", **facts}}
  path = runner.result_path(folder, run)
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(json.dumps(rec))


@pytest.fixture
def no_build(tmp_path, monkeypatch):
  """Any dataset build fails the test, and the dataset cache is an empty temporary folder."""
  monkeypatch.setenv(cache_dirs.ROOT_ENV, str(tmp_path / "cache"))

  def refuse(*args, **kwargs):
    raise AssertionError("a staleness check built a dataset")

  monkeypatch.setattr(builder, "build", refuse)
  monkeypatch.setattr(builder, "make_builder", refuse)
  yield
  assert not (tmp_path / "cache").exists()


def check(folder, capsys, *args):
  code = run_cli.main([str(folder), "--check", *args])
  return code, capsys.readouterr().out


def test_check_passes_on_a_study_whose_runs_match(tmp_path, capsys, no_build):
  study = write_study(tmp_path / "s")
  for run in study.runs:
    write_result(study.directory, run)
  t0 = time.perf_counter()
  code, out = check(study.directory, capsys)
  assert time.perf_counter() - t0 < 30  # seconds: no dataset, no bootstrap
  assert code == 0, out
  assert out.strip().endswith("4 runs, 0 missing, 0 stale; 2 claims, 0 not run yet: current")
  assert runner.stale(study.directory, study.runs) == {}


def test_check_names_the_setting_that_changed(tmp_path, capsys, no_build):
  study = write_study(tmp_path / "s")
  for run in study.runs:
    write_result(study.directory, run)
  study = write_study(tmp_path / "s", overrides={"a": {"optim.lr": 0.5}})
  code, out = check(study.directory, capsys)
  assert code == 1
  lr = study_lib.resolve(CONFIG, {}).optim.lr
  for name in ("a_s0", "a_s1"):
    assert f"stale {name}: optim.lr: {lr} -> 0.5\n" in out
  assert "stale b_s0" not in out and "2 stale" in out
  # The pinned start and the dataset are compared too: another dataset makes a run stale.
  facts = staleness.facts(study_lib.resolve(CONFIG, {}, 0))
  write_result(study.directory, study.runs[2], {**facts, "dataset": "travel-old"})
  assert runner.stale(study.directory, study.runs)["b_s0"] == [
      f"dataset: \"travel-old\" -> \"{facts['dataset']}\""]


def test_check_fails_on_a_missing_run_and_a_claim_not_run_yet(tmp_path, capsys, no_build):
  study = write_study(tmp_path / "s")
  for run in study.runs[:-1]:
    write_result(study.directory, run)
  code, out = check(study.directory, capsys)
  assert code == 1 and "missing b_s1: no result file" in out and "1 missing, 0 stale" in out
  write_result(study.directory, study.runs[-1])
  assert check(study.directory, capsys)[0] == 0
  # The smoke preset runs arm a only: every one of its runs is current, but the claims that
  # name arm b read "not run yet", and that fails the check too.
  study = write_study(tmp_path / "s", extra_claim=", Claim('b improves', 'met', 'b', 'start')")
  code, out = check(study.directory, capsys, "--preset=smoke", f"--out={study.directory}")
  assert code == 1 and "2 runs, 0 missing, 0 stale; 3 claims, 2 not run yet" in out
  assert "not run yet: a above b (met): no results for arm 'b'" in out
  assert "not run yet: b improves (met)" in out and "missing b" not in out


def test_a_result_without_records_is_stale(tmp_path, capsys, no_build):
  study = write_study(tmp_path / "s")
  for run in study.runs:
    write_result(study.directory, run, facts={})
  code, out = check(study.directory, capsys)
  assert code == 1
  assert f"stale a_s0: {staleness.NO_RECORD}" in out and "4 stale" in out


def test_a_new_key_at_its_default_or_a_key_that_shapes_nothing_is_not_stale(
    tmp_path, capsys, monkeypatch, no_build):
  study = write_study(tmp_path / "s")
  for run in study.runs:
    write_result(study.directory, run)
  base = config_tree.make_base_config

  def with_new_key():  # a key added after the runs, at the value that keeps the old behaviour
    c = base()
    c.rl.new_knob = 0
    return c

  monkeypatch.setattr(config_tree, "make_base_config", with_new_key)
  assert "rl.new_knob" in staleness.settings(study_lib.resolve(CONFIG, {}))
  assert check(study.directory, capsys)[0] == 0
  # Where files go, logging and checkpoint cadence change no number.
  quiet = {"metrics.tensorboard": False, "checkpoint.every": 7, "data.dir": "/elsewhere",
           "sft.log_every": 3, "data.read_threads": 4}
  study = write_study(tmp_path / "s", overrides={"a": quiet, "b": quiet})
  assert not any(staleness.shapes(k) for k in quiet)
  assert check(study.directory, capsys)[0] == 0
  # The new key away from its default is a change.
  study = write_study(tmp_path / "s", overrides={"b": {"rl.new_knob": 3}})
  code, out = check(study.directory, capsys)
  assert code == 1 and "stale b_s0: rl.new_knob: <absent> -> 3" in out


def test_tables_only_withholds_the_verdict_of_a_claim_that_pools_a_stale_run(tmp_path, capsys):
  study = write_study(tmp_path / "s")
  for run in study.runs:
    write_result(study.directory, run)
  assert run_cli.main([str(study.directory), "--tables-only"]) == 0
  out = capsys.readouterr().out
  assert "stale" not in out
  rows = list(csv.DictReader((study.directory / "claims.csv").open(encoding="utf-8")))
  assert [r["verdict"] for r in rows] == ["reproduced", "reproduced"]
  # b_s1 ran with another learning rate than the study's now: "a above b" pools it.
  facts = staleness.facts(study_lib.resolve(CONFIG, {"optim.lr": 0.5}, 1))
  write_result(study.directory, study.runs[3], facts)
  assert run_cli.main([str(study.directory), "--tables-only"]) == 0
  out = capsys.readouterr().out
  assert "stale b_s1: optim.lr: 0.5 -> " in out and "1 of 4 result files are stale" in out
  rows = list(csv.DictReader((study.directory / "claims.csv").open(encoding="utf-8")))
  assert [(r["verdict"], r["stale_runs"]) for r in rows] == [
      ("reproduced", ""), (tables.STALE, "b_s1")]
  assert rows[1]["gap"] and rows[1]["low"]  # the old runs' numbers stay, without a verdict
  block = (study.directory / "README.md").read_text().split(tables.START)[1]
  assert "**1 of 4 result files are stale**" in block and "- b_s1: optim.lr: 0.5 -> " in block
  assert block.count(f"**{tables.STALE}**") == 2  # the note's word and the claim's verdict


def test_the_study_command_reruns_a_stale_run_in_a_fresh_workdir(tmp_path, monkeypatch):
  study = write_study(tmp_path / "s")
  current, stale_run, missing = study.runs[0], study.runs[1], study.runs[2]
  write_result(study.directory, current)
  write_result(study.directory, stale_run, facts={})
  old_work = study.directory / "work" / stale_run.name
  old_work.mkdir(parents=True)
  (old_work / "checkpoint").write_text("from the old settings")
  ran = []

  def fake_run_one(out, run, say):
    assert not (out / "work" / run.name / "checkpoint").exists()  # nothing resumes
    ran.append(run.name)

  monkeypatch.setattr(runner, "run_one", fake_run_one)
  said = []
  status = runner.run_missing(study.directory, study.runs[:3], said.append)
  assert status == {current.name: "skipped", stale_run.name: "stale", missing.name: "ran"}
  assert ran == [stale_run.name, missing.name]
  assert said == [f"run {stale_run.name}: its result file is stale ({staleness.NO_RECORD}); "
                  "running it again"]


def test_a_finished_run_records_what_staleness_compares(tmp_path, monkeypatch):
  # The pipeline faked: its workdir gets the config main would write, two evaluations, a RESULT.
  study = write_study(tmp_path / "s", overrides={"a": {"optim.lr": 0.25}})
  run = study.runs[0]

  def fake_execute(cmd, log, what):
    workdir = log.parent
    workdir.mkdir(parents=True, exist_ok=True)
    if "--mode=pipeline" in cmd:
      from arenarl_jax import run_config  # pylint: disable=import-outside-toplevel
      run_config.write(str(workdir), study_lib.resolve(run.config, run.overrides, run.seed))
      (workdir / "eval").mkdir()
      for step in (0, 1):
        (workdir / "eval" / f"eval_{step}.jsonl").write_text(json.dumps(
            {"kind": "trajectory", "task_id": "t0", "subtask": "s", "valid": True, "solved": 0,
             "met": 1, "total": 2, "finish_reason": "answer"}) + "\n")
    return "RESULT met_rate=0.5\n"

  monkeypatch.setattr(runner, "execute", fake_execute)
  monkeypatch.setattr(runner, "sft_data", lambda r: "travel-fake")
  rec = runner.run_one(study.directory, run, lambda _: None)
  p = rec["provenance"]
  assert p["settings"]["optim.lr"] == 0.25 and "metrics.progress" not in p["settings"]
  assert p["start"] is None and p["dataset"].startswith("travel-seed0-")
  assert runner.stale(study.directory, study.runs[:1]) == {}
  # A half-finished workdir of other settings is not resumed.
  workdir = study.directory / "work" / run.name
  assert runner.clear_other_settings(workdir, run) is False and workdir.is_dir()
  other = study_lib.Run(run.name, run.arm, run.config, run.seed, {"optim.lr": 0.5})
  assert runner.clear_other_settings(workdir, other) is True and not workdir.exists()


def test_a_pinned_start_is_recorded_by_its_record_and_weights(tmp_path):
  config = study_lib.resolve(CONFIG, {})
  assert staleness.start_digest(config) is None  # no start named
  with config.unlocked():
    config.start.name = "mine"
    config.start.dir = str(tmp_path / "mine")
  assert staleness.start_digest(config) is None  # named, but its folder is missing
  (tmp_path / "mine").mkdir()
  (tmp_path / "mine" / "START.json").write_text(json.dumps({"settings_hash": "abc"}))
  (tmp_path / "mine" / "model.safetensors").write_bytes(b"weights")
  digest = staleness.start_digest(config)
  assert digest["settings_hash"] == "abc" and len(digest["weights_sha256"]) == 64
  (tmp_path / "mine" / "model.safetensors").write_bytes(b"other weights")
  assert staleness.start_digest(config)["weights_sha256"] != digest["weights_sha256"]
  assert "start.dir" not in staleness.settings(config)  # where it lies is not what it is
  with config.unlocked():
    config.start.build = True
  assert staleness.start_digest(config) is None  # a run that builds it begins from none


def test_a_bare_study_name_names_the_repositorys_study_and_a_wrong_one_lists_them(
    tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)  # no folder of that name here
  directory, path, _ = study_lib.study_module("topologies", "runs(preset)")
  assert path == directory / "study.py" and directory.parent.name == "experiments"
  with pytest.raises(FileNotFoundError, match=r"topolgies/study.py.*studies: .*topologies"):
    study_lib.study_module("topolgies", "runs(preset)")
  # A folder that is not a study (experiments/multihost holds a launch script), named as a
  # user in the repository's root names it, lists them too.
  monkeypatch.chdir(directory.parent.parent)
  with pytest.raises(FileNotFoundError, match=r"multihost/study.py.*studies: .*topologies"):
    study_lib.study_module("experiments/multihost", "runs(preset)")
