"""The quickstart ``:smoke`` pipeline end to end, as subprocesses: on one process (then
``main --mode=eval`` reproduces its final evaluation and ``main --mode=export`` exports it), and on
two processes joined by ``jax.distributed``, which must end like the one process.

The three processes run at once (``runs``); the shard-level pieces are checked in process first.
Each of the two processes (one CPU device each) samples, runs the tools of, and judges its own half
of every RL step's groups, and the update is one global SPMD step; the one-process reference runs
the same global mesh (two devices in one process). They must sample the same groups (disjoint
halves whose union is the reference's, token for token, with the same advantages), end with the
same parameters and print the same final evaluation.

Why a tolerance and not bit equality for the parameters: the rollouts are identical (tokens and
advantages are compared exactly), but the update's floating-point sums are not computed in the
same order by one XLA process with two devices and two processes with one device each, so the
gradients differ in their last bits; AdamW divides by sqrt(v), which turns those bits into
parameter differences of a few 1e-6 after the smoke run's SFT (lr 3e-3) and RL steps (measured:
max 3.4e-6 over all parameters in this test's setting, 5.1e-6 with the smoke config's SFT batch
of 8; forcing single-threaded Eigen does not remove it). 1e-5 bounds that, while a real mismatch
moves parameters by far more (SFT fed only half of each global batch: 9e-3), and the rollouts,
which a mismatched key or judge draw would change, are compared exactly.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from arenarl_jax import tournament
from arenarl_jax.rl import advantages as adv_lib
from arenarl_jax.rl import experience
from arenarl_jax import hosts
from arenarl_jax.judges import rubric as rubric_lib
from arenarl_jax.judges import rubric_judge
from arenarl_jax.sampling.choose import choose_tokens, row_uniforms
from arenarl_jax.sampling.settings import SamplingSettings
from arenarl_jax.testing import xla_flags
from arenarl_jax.types import Trajectory
import pipeline_run  # tests/pipeline_run.py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ------------------------------------------------------------------ the pieces, in process (fast)
def test_a_share_of_rows_samples_what_those_rows_sample_in_the_whole_batch():
  logits = jax.random.normal(jax.random.key(0), (8, 50))
  settings = SamplingSettings(temperature=0.9)
  key = jax.random.key(5)
  choose = jax.jit(choose_tokens)
  whole, whole_logp = choose(logits, settings.rows(8, 2), key)
  for first in (2, 4):
    share, share_logp = choose(logits[first:first + 4], settings.rows(4, 2, first_row=first), key)
    np.testing.assert_array_equal(share, whole[first:first + 4])
    np.testing.assert_allclose(share_logp, whole_logp[first:first + 4], rtol=1e-6)
  # Without the offset the share would draw the batch's first numbers (the bug this guards).
  shifted, _ = choose(logits[4:], settings.rows(4, 2), key)
  assert not np.array_equal(shifted, whole[4:])
  # The offset is traced: the three offsets of 4-row shares share one program (a static offset
  # compiled every decode program anew for each wave of an evaluation).
  assert choose._cache_size() == 2  # the 8-row batch and the 4-row shares
  with pytest.raises(ValueError, match="first_row"):
    settings.rows(4, 2, first_row=3)


@pytest.mark.parametrize("first_row", [0, 1, 7, 1000, 123457])
@pytest.mark.parametrize("make_key", [jax.random.key, jax.random.PRNGKey])
def test_row_uniforms_are_the_matching_elements_of_one_long_draw(first_row, make_key):
  key = jax.random.fold_in(make_key(11), 3)
  long_draw = jax.random.uniform(key, (first_row + 9,), jnp.float32)
  got = jax.jit(row_uniforms, static_argnums=2)(key, np.int32(first_row), 9)
  np.testing.assert_array_equal(got, long_draw[first_row:])


MINI = rubric_lib.Rubric("mini", "", (rubric_lib.Dimension("p"),), (rubric_lib.Dimension("a"),),
                         0.5, 0.5)


def _checker(t):
  return {"path": {"p": t.metadata["q"]}, "answer": {"a": t.metadata["q"]}}


@pytest.mark.parametrize("topology", ["single_elimination", "swiss"])
def test_a_share_of_groups_ranks_and_is_judged_as_in_the_whole_step(topology):
  rng = np.random.default_rng(0)
  groups = [[Trajectory(f"q{b}", metadata={"q": float(rng.integers(0, 11))}) for _ in range(4)]
            for b in range(4)]
  noise = rubric_judge.NoiseModel(pointwise_std=2.0, pairwise_std=2.0, position_bias=0.5)

  def judge():
    return rubric_judge.RubricJudge(_checker, MINI, noise, seed=3)

  whole = tournament.rank(groups, experience.ShareJudge(judge(), 0, 4), topology,
                          adv_lib.tournament_rng(7, 2, 0))
  halves = [tournament.rank(groups[f:f + 2], experience.ShareJudge(judge(), f, 2), topology,
                            adv_lib.tournament_rng(7, 2, f)) for f in (0, 2)]
  for got, want in zip(halves[0] + halves[1], whole):
    assert got.order == want.order
    np.testing.assert_array_equal(got.advantages, want.advantages)
    assert [r.score_p for _, r in got.matches] == [r.score_p for _, r in want.matches]
  # Pointwise (GRPO/GSPO) scores too.
  flat = [t for g in groups for t in g]
  all_scores = experience.ShareJudge(judge(), 0, 4).score(flat).scores
  part = experience.ShareJudge(judge(), 2, 2).score(flat[8:]).scores
  np.testing.assert_array_equal(part, all_scores[8:])
  # Without the offsets the second half would be judged with the first half's noise.
  plain = tournament.rank(groups[2:], judge(), topology, adv_lib.tournament_rng(7, 2, 0))
  assert any(not np.array_equal(a.advantages, b.advantages) or
             [r.score_p for _, r in a.matches] != [r.score_p for _, r in b.matches]
             for a, b in zip(plain, whole[2:]))


def test_share_start_finds_the_contiguous_slice():
  assert experience.share_start([7, 1], [4, 7, 1, 9]) == 1
  with pytest.raises(ValueError, match="contiguous"):
    experience.share_start([4, 1], [4, 7, 1, 9])


def test_host_stats_add_counts_take_extremes_and_average_means():
  got = hosts.combine_host_stats([
      {"judge/requests": 6.0, "reward/mean": 1.0, "time/judge_s": 0.5, "advantage/abs_max": 1.2,
       "rollout/tool_errors/timeout": 2.0, "rollout/errors": 1.0},
      {"judge/requests": 4.0, "reward/mean": 3.0, "time/judge_s": 0.25,
       "advantage/abs_max": 0.7, "rollout/errors": 2.0}])
  assert got == {"judge/requests": 10.0, "reward/mean": 2.0, "time/judge_s": 0.5,
                 "advantage/abs_max": 1.2, "rollout/tool_errors/timeout": 2.0,
                 "rollout/errors": 3.0}
  # Judge counters add up; the order-flip rate is the pooled one (3 / 8), not the hosts' mean.
  got = hosts.combine_host_stats([
      {"judge/cache_hits": 2.0, "judge/order_flips": 1.0, "judge/both_orders": 2.0,
       "judge/order_flip_rate": 0.5, "judge/calls": 3.0},
      {"judge/cache_hits": 1.0, "judge/order_flips": 2.0, "judge/both_orders": 6.0,
       "judge/order_flip_rate": 2 / 6, "judge/calls": 3.0}])
  assert got == {"judge/cache_hits": 3.0, "judge/order_flips": 3.0, "judge/both_orders": 8.0,
                 "judge/order_flip_rate": 3 / 8, "judge/calls": 6.0}


# ------------------------------------------------------------------ the pipeline, 1 vs 2 processes
# Smaller SFT batches than the smoke config's (the run compiles three times on two cores).
OVERRIDES = ["data.sft_batch_size=4", "data.sft_seq_len=1024"]


def _start(log, workdir, data_dir, *args, devices):
  env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false",
             XLA_FLAGS=xla_flags.with_devices(devices))
  sets = [a for o in OVERRIDES for a in ("--set", o)]
  with open(log, "w", encoding="utf-8") as out:
    return subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "tests", "pipeline_run.py"), str(workdir),
         str(data_dir), *map(str, args), *sets], env=env, stdout=out, stderr=subprocess.STDOUT,
        start_new_session=True)


def _wait_all(procs, logs, timeout_s=600.0):
  """Waits for every process; the first failure (or the timeout) kills the others' groups, so a
  crashed peer never leaves the other process waiting in a collective."""
  deadline = time.monotonic() + timeout_s
  try:
    while any(p.poll() is None for p in procs):
      failed = [p for p in procs if p.poll() not in (None, 0)]
      if failed or time.monotonic() > deadline:
        break
      time.sleep(0.5)
  finally:
    for p in procs:
      if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
  # The process that failed by itself first; the ones killed here (-9) after it.
  for p, log in sorted(zip(procs, logs), key=lambda pl: pl[0].returncode == -signal.SIGKILL):
    assert p.returncode == 0, f"{log} (exit {p.returncode}):\n" + open(log).read()[-3000:]


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _groups(path):
  return json.load(open(path, encoding="utf-8"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory, dataset_dir):
  """Work directories of the one-process (two devices) and the two-process run."""
  from arenarl_jax import pipeline  # pylint: disable=import-outside-toplevel
  tmp = tmp_path_factory.mktemp("pipelines")
  data = dataset_dir  # the run's shared datasets: built here only if no earlier test built it
  config = pipeline_run.make_config(str(data), overrides=OVERRIDES)
  pipeline.dataset_path(config)  # once, before the runs read it (data.dir is the shared folder)
  port = _free_port()
  logs = [tmp / "one.log", tmp / "two_0.log", tmp / "two_1.log"]
  procs = [_start(logs[0], tmp / "one", data, devices=2)]
  procs += [_start(logs[1 + i], tmp / "two", data, "--procs", 2, "--proc", i, "--port", port,
                   devices=1) for i in range(2)]
  _wait_all(procs, logs)
  return tmp / "one", tmp / "two"


def _main(workdir, data_dir, mode, *extra):
  """``python -m arenarl_jax.main`` on a workdir of ``runs`` (its config and overrides)."""
  sets = [f"--config.{o}" for o in OVERRIDES]
  env = dict(os.environ, XLA_FLAGS=xla_flags.with_devices(2))
  return subprocess.run(
      [sys.executable, "-m", "arenarl_jax.main", "--config=configs/quickstart.py:smoke",
       f"--workdir={workdir}", f"--mode={mode}", f"--config.data.dir={data_dir}", *sets,
       *extra],
      cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False)


def _eval_rows(path):
  rows = [json.loads(line) for line in open(path)]
  return rows[0], [(r["task_id"], r["tokens"], r["solved"], r["unmet"],
                    [m["outcome"] for m in r["matches"]]) for r in rows[1:]]


def test_one_process_run_then_eval_reproduces_it_then_export(runs, dataset_dir, tmp_path):
  work = tmp_path / "one"
  shutil.copytree(runs[0], work)  # the CLI's evaluation and export write into it: a copy
  result = open(work / "result.txt", encoding="utf-8").read().strip().splitlines()[-1]
  assert result.startswith("RESULT win_rate_vs_sft=") and "ci_low=" in result
  assert "win_rate_vs_reference=" in result
  for key in ("solved_rate", "solved_rate_start", "solved_diff_ci_low", "met_diff_ci_high",
              "limit_stop_rate", "wins_vs_sft", "win_rate_vs_sft_conservative"):
    assert f" {key}=" in result, key
  # The stages' outputs: SFT curve and checkpoint, RL metrics, evaluations at 0 and the end.
  sft_rows = [json.loads(line) for line in open(work / "sft" / "metrics.jsonl")]
  assert [r["step"] for r in sft_rows] == [1, 2] and all(np.isfinite(r["loss"]) for r in sft_rows)
  rl_rows = [json.loads(line) for line in open(work / "metrics.jsonl")]
  assert [r["step"] for r in rl_rows] == [1, 2]
  for key in ("reward/mean", "advantage/zero_groups", "judge/requests", "time/judge_s",
              "judge/requests_per_group", "reward/checker_tau_groups",
              "judge/unranked_trajectories", "verifier/solved_rate",
              "rollout/tool_calls_per_trajectory", "rollout/turns_mean", "loss"):
    assert key in rl_rows[-1], key
  assert sorted(os.listdir(work / "eval")) == ["eval_00000000.jsonl", "eval_00000002.jsonl",
                                               "summary.jsonl"]
  assert os.path.getsize(work / "curves.png") > 0
  # --mode=eval on the workdir reproduces the final evaluation exactly.
  again = _main(work, dataset_dir, "eval")
  assert again.returncode == 0, again.stderr[-3000:]
  assert again.stdout.strip().splitlines()[-1] == result
  # The CLI writes the resolved config first, for reproducibility.
  assert json.load(open(work / "config.json"))["tournament"]["topology"] == "single_elimination"
  first, rows = _eval_rows(work / "eval" / "eval_00000002.jsonl")
  second, rows_again = _eval_rows(work / "eval" / "eval_00000002_1.jsonl")
  assert first == second and rows == rows_again
  # --mode=export: the final policy as an HF directory with the run's tokenizer, loadable again.
  exported = _main(work, dataset_dir, "export")
  assert exported.returncode == 0, exported.stderr[-3000:]
  assert exported.stdout.strip().splitlines()[-1].startswith("RESULT stage=export rl_step=2 ")
  from arenarl_jax.models.loading import load_model, load_tokenizer  # pylint: disable=g-import-not-at-top
  cfg, _ = load_model(str(work / "export"))
  tok = load_tokenizer(str(work / "export"))
  assert cfg.vocab_size == tok.vocab_size
  assert tok.encode("Nortor <|im_end|>") == load_tokenizer(str(work / "tokenizer")).encode(
      "Nortor <|im_end|>")


def test_query_reading_reads_a_runs_workdir(runs, dataset_dir, tmp_path, capsys):
  from arenarl_jax.tools import query_reading  # pylint: disable=g-import-not-at-top
  work = tmp_path / "one"
  shutil.copytree(runs[0], work)
  # The CLI (main.py) writes the resolved config first; this run was started by pipeline_run.py.
  config = pipeline_run.make_config(str(dataset_dir), overrides=OVERRIDES)
  (work / "config.json").write_text(config.to_json_best_effort(indent=2))
  for checkpoint in ("sft", "rl"):
    out = query_reading.main([f"--workdir={work}", "--per_subtask=2",
                              f"--checkpoint={checkpoint}"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("RESULT nll_own=") and f" tasks={out['tasks']}" in last
    assert out["tasks"] == 10 and np.isfinite(out["gap"]) and out["nll_own"] > 0
  with pytest.raises(FileNotFoundError, match="config.json"):
    query_reading.main([f"--workdir={runs[0]}"])


def test_headroom_rolls_out_a_runs_policy_and_a_killed_roll_out_resumes_exactly(
    runs, dataset_dir, tmp_path, capsys):
  from arenarl_jax.tools import headroom  # pylint: disable=g-import-not-at-top
  work = tmp_path / "one"
  shutil.copytree(runs[0], work)
  config = pipeline_run.make_config(str(dataset_dir), overrides=OVERRIDES)
  (work / "config.json").write_text(config.to_json_best_effort(indent=2))
  args = [f"--workdir={work}", "--k=1", "--tasks_per_subtask=1", "--set=eval.max_rows=2"]
  out = headroom.main(args)  # 5 tasks, one per wave of 2 rows
  assert out["tasks"] == 5 and out["k"] == 1
  whole = (work / "headroom" / "eval_valid_k1.jsonl").read_text()
  lines = whole.splitlines(keepends=True)
  assert len(lines) == 1 + 5 * 2 and '"policy": "RL step' in lines[0]
  # Killed in the third wave, halfway through a line: the resumed file is the unbroken one.
  killed = work / "headroom" / "killed.jsonl"
  killed.write_text("".join(lines[:6]) + lines[6][:40])
  capsys.readouterr()
  assert headroom.main([*args, f"--resume={killed}"]) == out
  assert "(2 tasks resumed)" in capsys.readouterr().out
  assert killed.read_text() == whole
  with pytest.raises(SystemExit):
    headroom.main([f"--file={killed}", f"--resume={killed}"])


def test_two_processes_sample_their_own_groups_and_end_like_one_process(runs):
  one, two = runs
  # Groups: each process rolled out its own half; together, the one-process groups exactly.
  ref = _groups(one / "groups_0.json")
  halves = [_groups(two / f"groups_{i}.json") for i in range(2)]
  assert [r["step"] for r in ref] == [0, 1] == [r["step"] for r in halves[0]]
  for s, want in enumerate(ref):
    mine = [h[s] for h in halves]
    assert mine[0]["all_prompt_ids"] == mine[1]["all_prompt_ids"] == want["prompt_ids"]
    assert not set(mine[0]["prompt_ids"]) & set(mine[1]["prompt_ids"])
    assert mine[0]["prompt_ids"] + mine[1]["prompt_ids"] == want["prompt_ids"]
    got_groups = mine[0]["groups"] + mine[1]["groups"]
    assert [g["prompt"] for g in got_groups] == want["prompt_ids"]
    for got, exp in zip(got_groups, want["groups"]):
      assert got["tokens"] == exp["tokens"]
      assert got["advantages"] == exp["advantages"]
  # Parameters: see the module docstring for the tolerance.
  want_params, got_params = np.load(one / "params.npz"), np.load(two / "params.npz")
  assert sorted(want_params) == sorted(got_params)
  for key in want_params:
    np.testing.assert_allclose(got_params[key], want_params[key], rtol=0, atol=1e-5, err_msg=key)
  # Process 0 wrote the metrics, with every host's rollout counts combined.
  rows = [json.loads(line) for line in open(two / "metrics.jsonl", encoding="utf-8")]
  ref_rows = [json.loads(line) for line in open(one / "metrics.jsonl", encoding="utf-8")]
  assert [r["step"] for r in rows] == [1, 2]
  for got, exp in zip(rows, ref_rows):
    for key in ("judge/requests", "judge/matches", "rollout/tool_calls_per_trajectory",
                "rollout/finish/answer", "advantage/zero_groups"):
      assert got[key] == pytest.approx(exp[key], abs=1e-6), key
    assert got["reward/mean"] == pytest.approx(exp["reward/mean"], abs=1e-5)
  # The final evaluation (every process evaluates; process 0 prints and writes) agrees.
  result = open(two / "result.txt", encoding="utf-8").read().strip().splitlines()[-1]
  assert result.startswith("RESULT win_rate_vs_sft=")
  assert result == open(one / "result.txt", encoding="utf-8").read().strip().splitlines()[-1]
  assert sorted(os.listdir(two / "eval")) == sorted(os.listdir(one / "eval"))
  # --mode=export's function on two processes: the same weights, written once.
  from safetensors.numpy import load_file  # pylint: disable=import-outside-toplevel
  want_hf, got_hf = load_file(one / "export" / "model.safetensors"), load_file(
      two / "export" / "model.safetensors")
  assert sorted(want_hf) == sorted(got_hf)
  for key in want_hf:
    np.testing.assert_allclose(got_hf[key], want_hf[key], rtol=0, atol=1e-5, err_msg=key)


def test_start_build_then_a_run_loads_it_and_reproduces_its_validation(runs, dataset_dir,
                                                                       tmp_path):
  """``start.build`` on a finished SFT run writes the start (weights, tokenizer, START.json);
  a fresh run that names it skips SFT, and its greedy evaluation of the same validation tasks
  (a new process, default XLA flags but the run's devices) gives the recorded per-task met."""
  from arenarl_jax.sft import start as start_lib  # pylint: disable=import-outside-toplevel
  work, out = tmp_path / "build", tmp_path / "start"
  shutil.copytree(runs[0], work)  # SFT is done: the build reads it back
  sets = ["--config.start.name=t", f"--config.start.dir={out}", "--config.eval.split=valid"]
  built = _main(work, dataset_dir, "pipeline", "--config.start.build=True", *sets)
  assert built.returncode == 0, built.stderr[-3000:]
  assert "RESULT stage=start " in built.stdout
  record = start_lib.read_record(str(out))
  assert sorted(os.listdir(out)) == ["START.json", "config.json", "model.safetensors",
                                     "tokenizer.json", "tokenizer_config.json"]
  assert record["settings_hash"] == start_lib.settings_hash(record["settings"])
  assert record["settings"]["data.sft_batch_size"] == 4  # the run's overrides are recorded
  assert record["dataset"]["name"] and len(record["dataset"]["sha256"]) == 64
  assert record["sft"]["steps"] == 2 and record["cpu"] in ("avx512", "avx2", "x86_64",
                                                           "aarch64")
  tasks = record["validation"]["tasks"]
  assert len(tasks) == record["validation"]["overall"]["tasks"] == 5
  # A new run from the start: no SFT stage, the same greedy validation rollouts.
  fresh = tmp_path / "fresh"
  loaded = _main(fresh, dataset_dir, "eval", *sets)
  assert loaded.returncode == 0, loaded.stderr[-3000:]
  assert not (fresh / "sft").exists()
  rows = [json.loads(line) for line in open(fresh / "eval" / "eval_00000000.jsonl")][1:]
  assert {r["task_id"]: (r["met"], r["total"]) for r in rows} == {
      t: (v["met"], v["total"]) for t, v in tasks.items()}
