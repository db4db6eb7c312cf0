"""The trained studies (``experiments/topologies``, ``experiments/group_size``,
``experiments/arena_vs_pointwise``, ``experiments/valid_generation``): each smoke preset end to end as the command a user types,
into a copy of its folder, then the studies' own report (judge cost, rank recovery, ties) on
hand-built result files.

The three travel smoke studies read the quickstart smoke's SFT stage: their runs differ from it only in
RL keys and ``sampling.group_size``, so they share it; the later studies start from a copy of the
first's stage and train none.
"""
import csv
import math
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from arenarl_jax.experiments import run_stats, runner, tables
from arenarl_jax.experiments import study as study_lib
from arenarl_jax.testing import xla_flags
import study_folder  # tests/experiments/study_folder.py

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _log(folder, stream):
  return folder.with_name(f"{folder.name}.{stream}.txt")


def _start(folder):
  """The study's smoke command, started; its output goes to files beside ``folder`` (a pipe that
  is not read while another process is waited on would stall it once full)."""
  env = {**os.environ, "XLA_FLAGS": xla_flags.with_devices(1)}
  with open(_log(folder, "stdout"), "w") as out, open(_log(folder, "stderr"), "w") as err:
    return folder, subprocess.Popen(
        [sys.executable, "-m", "arenarl_jax.experiments.run", str(folder), "--preset=smoke",
         f"--out={folder}"], cwd=ROOT, env=env, stdout=out, stderr=err)


def _finish(*started):
  """Each started command's stdout once all have ended; a failure or timeout stops the rest."""
  try:
    for _, proc in started:
      proc.wait(timeout=900)
  finally:
    for _, proc in started:
      if proc.poll() is None:
        proc.kill()
        proc.wait()
  outs = []
  for folder, proc in started:
    stdout = _log(folder, "stdout").read_text()
    assert proc.returncode == 0, stdout[-3000:] + _log(folder, "stderr").read_text()[-3000:]
    outs.append(stdout)
  return outs


@pytest.fixture(scope="module")
def studies(tmp_path_factory):
  # Processes run two at a time, one per core (each is mostly a single-threaded compile and a
  # small model's steps): the research study needs nothing of the travel ones, and the two later
  # travel studies only read the topology study's copied SFT stage.
  topo = study_folder.copy_study(tmp_path_factory, ROOT / "experiments" / "topologies")
  research = study_folder.copy_study(tmp_path_factory, ROOT / "experiments" / "valid_generation")
  topo_out, research_out = _finish(_start(topo), _start(research))
  (sft_dir,) = [p for p in (topo / "work").iterdir() if p.name.startswith("sft_")]
  later = {}
  for name in ("group_size", "arena_vs_pointwise"):
    later[name] = study_folder.copy_study(tmp_path_factory, ROOT / "experiments" / name)
    shutil.copytree(sft_dir, later[name] / "work" / sft_dir.name)
  outs = dict(zip(later, _finish(*[_start(folder) for folder in later.values()])))
  return {"topologies": (topo, topo_out), "valid_generation": (research, research_out),
          **{name: (later[name], outs[name]) for name in later}}


def _block(folder):
  return (folder / "README.md").read_text().split(tables.START)[1].split(tables.END)[0]


def test_topologies_smoke_reports_cost_and_rank_recovery(studies):
  folder, stdout = studies["topologies"]
  assert "ran 2 run(s), skipped 0" in stdout and stdout.count("sft stage") == 1
  study = study_lib.load(folder, "smoke")
  results = runner.load_results(folder, study.runs)
  assert [r["run"] for r in results] == ["anchor_s0", "round_robin_s0"]
  # One group of 4 per step: the anchor pass plays 3 matches, round robin 6; 2 requests each.
  assert [r["steps"][0]["judge/requests_per_group"] for r in results] == [6.0, 12.0]
  for r in results:
    assert 0.0 <= r["steps"][0]["reward/checker_tau_groups"] <= 1.0
  text = (folder / "README.md").read_text()
  assert "<!-- simulation:start -->" in text  # the simulation's block is left alone
  block = _block(folder)
  assert "| anchor | 27.8 | 6.0 |" in block and "| round_robin | 32.9 | 12.0 |" in block
  assert ("| round_robin above anchor | arXiv 2601.06487, topology ablation: 32.9 vs 27.8 |"
          in block)
  assert "not run yet" in block  # swiss and the eliminations have no smoke run
  assert "Correlation over runs of rank recovery" in block and "n = " in block


def test_group_size_smoke_keeps_trajectories_per_step_and_shares_sft(studies):
  folder, stdout = studies["group_size"]
  assert "ran 2 run(s), skipped 0" in stdout
  assert "sft stage" not in stdout  # the copied stage is the one its sft_hash names
  study = study_lib.load(folder, "smoke")
  results = runner.load_results(folder, study.runs)
  assert [(r["run"], r["overrides"]["rl.prompts_per_step"]) for r in results] == [
      ("n2_s0", 2), ("n4_s0", 1)]
  # Seeded single elimination plays 2(N - 1) matches per group, 2 requests each.
  assert [r["steps"][0]["judge/requests_per_group"] for r in results] == [4.0, 12.0]
  assert [r["steps"][0]["judge/requests"] for r in results] == [8.0, 12.0]
  assert len({r["provenance"]["sft_hash"] for r in results}) == 1
  block = _block(folder)
  assert "| n2 | 8.0 | 4.0 |" in block and "| n4 | 12.0 | 12.0 |" in block


def test_arena_vs_pointwise_smoke_spends_equal_judge_budgets(studies):
  folder, stdout = studies["arena_vs_pointwise"]
  assert "ran 2 run(s), skipped 0" in stdout and "sft stage" not in stdout
  study = study_lib.load(folder, "smoke")
  results = runner.load_results(folder, study.runs)
  assert [r["run"] for r in results] == ["arena_pwsat_s0", "grpo_pwsat_s0"]
  arena, grpo = (r["steps"][0] for r in results)
  # 12 requests per group of 4 both ways: 2(N - 1) matches in two orders; 3 scores each of 4.
  assert arena["judge/requests_per_group"] == grpo["judge/requests_per_group"] == 12.0
  assert 0.0 <= grpo["judge/pointwise_tied_groups"] <= 1.0
  assert "judge/pointwise_tied_groups" not in arena
  for row in (arena, grpo):
    assert 0.0 <= row["reward/all_tied_groups"] <= row["reward/any_tied_groups"] <= 1.0
  with open(folder / "claims.csv", encoding="utf-8") as f:
    claim_rows = list(csv.DictReader(f))
  assert len(claim_rows) == 18  # 3 regimes x 2 baselines x 3 outcomes
  assert [r["verdict"] for r in claim_rows[:3]] == ["cannot tell"] * 3  # pwsat vs grpo: 1 seed
  assert all(r["verdict"] == "not run yet" for r in claim_rows[3:])
  block = _block(folder)
  assert "| arena_pwsat | 41.8 | 12.0 | n/a |" in block and "| grpo_pwsat | 16.4 | 12.0 |" in block


def test_valid_generation_smoke_reports_finish_reasons(studies):
  folder, stdout = studies["valid_generation"]
  assert "ran 1 run(s), skipped 0" in stdout
  (result,) = runner.load_results(folder, study_lib.load(folder, "smoke").runs)
  assert result["result"]["test_tasks"] == len(result["tasks"])
  for when in ("start", "end"):  # every evaluated trajectory ended one way or another
    assert sum(result["finish"][when].values()) == len(result["tasks"])
    assert all(k.split(":")[0] in ("answer", "length", "max_turns", "invalid", "error")
               for k in result["finish"][when])
  for task in result["tasks"].values():
    assert task["valid_start"] in (0.0, 1.0) and task["valid_end"] in (0.0, 1.0)
  block = _block(folder)
  assert "| how a trajectory ended | SFT start | after RL, seed 0 |" in block
  with open(folder / "claims.csv", encoding="utf-8") as f:
    assert [r["outcome"] for r in csv.DictReader(f)] == ["valid", "win_vs_reference", "solved"]


# ------------------------------------------------------------ run statistics on hand-built files
def _run(arm, seed, steps, met):
  return {"arm": arm, "seed": seed, "steps": steps,
          "tasks": {f"t{k}": {"met_start": s, "met_end": e} for k, (s, e) in enumerate(met)}}


def test_step_means_gains_and_their_correlation_by_hand():
  a = _run("x", 0, [{"reward/checker_tau": 0.2}, {"reward/checker_tau": 0.4}, {}],
           [(0.0, 0.5), (0.5, 0.5)])
  assert run_stats.step_mean(a, "reward/checker_tau") == pytest.approx(0.3)
  assert math.isnan(run_stats.step_mean(a, "judge/requests"))
  assert run_stats.gain(a, "met") == pytest.approx(0.25)
  b = _run("x", 1, [{"reward/checker_tau": 0.5}], [(0.0, 0.0)])
  assert run_stats.arm_step_mean([b, a], "x", "reward/checker_tau") == pytest.approx(0.4)
  assert [r["seed"] for r in run_stats.arm_runs([b, a], "x")] == [0, 1]
  # Points on a line: r = 1 and every resample that varies gives 1.
  r, low, high, n = run_stats.correlation([0, 1, 2, 3], [1, 3, 5, 7], samples=200)
  assert (r, low, high, n) == pytest.approx((1.0, 1.0, 1.0, 4))
  # r by hand: x = (0, 1, 2), y = (0, 2, 1): cov 0.5, var 1 and 1 -> r = 0.5.
  assert run_stats.correlation([0, 1, 2], [0, 2, 1], samples=200)[0] == pytest.approx(0.5)
  assert all(math.isnan(v) for v in run_stats.correlation([1, 1, 1], [0, 1, 2])[:3])
  assert run_stats.correlation([0, float("nan"), 1], [0, 1, 1])[3] == 2


def test_rl_only_keys_leave_the_sft_hash_alone():
  tree = {"rl": {"steps": 1}, "sampling": {"group_size": 4, "max_new_tokens": 8}, "model": 1}
  assert study_lib.without(tree, study_lib.RL_ONLY) == {
      "sampling": {"max_new_tokens": 8}, "model": 1}
  assert study_lib.rl_only("sampling.group_size") and study_lib.rl_only("rl.steps")
  assert not study_lib.rl_only("sampling.max_new_tokens")
  base = study_lib.Run("a", "a", "configs/quickstart.py:smoke", 0)
  sized = study_lib.Run("b", "b", "configs/quickstart.py:smoke", 0, {"sampling.group_size": 4})
  longer = study_lib.Run("c", "c", "configs/quickstart.py:smoke", 0,
                         {"sampling.max_new_tokens": 16})
  assert study_lib.sft_hash(base) == study_lib.sft_hash(sized) != study_lib.sft_hash(longer)
  assert study_lib.sft_overrides(sized) == {}
