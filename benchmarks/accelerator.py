"""One-accelerator check: the model/sampler tests on the accelerator backend, then the forward,
the sampler, the decode step and the train step of SmolLM2 and of a randomly initialised
Qwen3-0.6B-shaped model against ceilings measured in the same run, then one RL step of the main
job.

  bash scripts/setup.sh --gpu                            # the CUDA build of jax, once
  .venv/bin/python benchmarks/accelerator.py             # one GPU: under 8 minutes
  .venv/bin/python benchmarks/accelerator.py --dry_run   # CPU backend, tiny sizes (a test runs it)

Steps: (1) pytest on the model/sampler subset in a subprocess with ``JAX_PLATFORMS`` unset (so JAX
picks the accelerator) and float32 matmuls at full precision (``JAX_DEFAULT_MATMUL_PRECISION``;
GPUs otherwise use TF32, which the float32 reference comparisons were not written for); the
8-device sharding tests are left out (one chip). (2) The ceilings: a bf16 [n, n] @ [n, n] matmul
and the read of a 2 GiB bf16 array, medians of repeats. (3) Per model, with
``compute_dtype="auto"`` (bf16 on accelerators, float32 on CPU) over float32 parameters:
  forward: ``model.hidden`` + the head's log-sum-exp over B x T tokens; model FLOPs = 2 x (weight
    matmul parameters) per token + the causal attention products;
  sampler: ``Sampler.sample`` (prefill + decode, EOS ignored) of R rows; FLOPs = 2 x weights per
    prompt and generated token (decode is memory-bound: this fraction is expected to be small);
  decode step: seconds per generated token (``Sampler.decode`` timed after an untimed prefill),
    and its fraction of the read bandwidth: the bytes a step must read (every weight and every
    layer's K and V cache in the compute dtype, ``accelerator_measure.decode_bytes``) per second;
  train: ``trainer.Trainer.step`` with the RL loss on B x T tokens, counted as 3 x the forward's
    FLOPs (the model FLOP utilisation against the measured matmul ceiling).
(4) The main job's RL step: ``configs/quickstart.py`` (``:smoke`` on a dry run) with a short SFT
and two RL steps in a subprocess; its second step's ``time/step_s`` with the sampling and update
parts. ``--dry_run`` runs the same code on the CPU backend with tiny sizes; there the Qwen3-0.6B
shape is replaced by a scaled-down Qwen3-family config (same family and features: qk-norm, GQA,
tied head; 2 layers, width 64), SmolLM2 keeps its first 2 of 30 layers (real weights, real
loader), and only one small test runs in the pytest step. Ends with one ``RESULT`` line.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import subprocess
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)

# The model/sampler test subset (single device; the sharding tests need 8 devices, and
# test_backend_options.py checks the CPU backend's compiler options).
TEST_SUBSET = ("tests/models", "--ignore=tests/models/test_sharded_loading.py",
               "--ignore=tests/models/test_backend_options.py", "tests/sampling/test_sampler.py",
               "tests/sampling/test_sampler_distribution.py",
               "tests/sampling/test_sampler_smollm2.py")
DRY_TESTS = ("tests/models/test_rope.py::test_positions_past_the_bound_are_clipped_to_the_last_row",
             )


@dataclasses.dataclass(frozen=True)
class Sizes:
  ceiling_n: int  # the bf16 matmul is [n, n] @ [n, n]
  repeats: int
  forward_rows: int
  forward_tokens: int
  sampler_prompts: int
  sampler_group: int
  prompt_tokens: int
  new_tokens: int
  test_timeout_s: int
  bandwidth_bytes: int  # the read-bandwidth probe's array
  rl_timeout_s: int  # the main-job RL step's subprocess


FULL = Sizes(ceiling_n=8192, repeats=5, forward_rows=8, forward_tokens=1024, sampler_prompts=8,
             sampler_group=4, prompt_tokens=128, new_tokens=128, test_timeout_s=120,
             bandwidth_bytes=2 * 2**30, rl_timeout_s=240)
DRY = Sizes(ceiling_n=256, repeats=1, forward_rows=1, forward_tokens=16, sampler_prompts=1,
            sampler_group=2, prompt_tokens=8, new_tokens=3, test_timeout_s=120,
            bandwidth_bytes=2**20, rl_timeout_s=240)


def run_tests(paths, timeout_s: int, dry_run: bool) -> dict[str, float]:
  """pytest in a subprocess on the default backend; {tests_passed, tests_failed, tests_s}."""
  env = dict(os.environ)
  if not dry_run:
    env.pop("JAX_PLATFORMS", None)  # let JAX pick the accelerator
  env["JAX_DEFAULT_MATMUL_PRECISION"] = "float32"
  env["PYTHONPATH"] = _ROOT + os.pathsep + env.get("PYTHONPATH", "")
  cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *paths]
  start = time.perf_counter()
  try:
    proc = subprocess.run(cmd, cwd=_ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout_s, check=False)
    out = proc.stdout + proc.stderr
  except subprocess.TimeoutExpired as e:
    out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
    out += f"\npytest stopped after {timeout_s} s"
  elapsed = time.perf_counter() - start
  print("\n".join(out.strip().splitlines()[-15:]))
  counts = {"passed": 0, "failed": 0, "error": 0}
  summary = [line for line in out.splitlines() if " in " in line and ("passed" in line or
                                                                     "failed" in line)]
  if summary:
    parts = summary[-1].replace("=", " ").replace(",", " ").split()
    for number, word in zip(parts, parts[1:]):
      key = word.rstrip("s")
      if key in counts and number.isdigit():
        counts[key] = int(number)
  return {"tests_passed": counts["passed"], "tests_failed": counts["failed"] + counts["error"],
          "tests_s": round(elapsed, 1)}


def rl_step(dry_run: bool, timeout_s: int) -> dict[str, float]:
  """The main job's RL step on this backend: ``arenarl_jax.main`` with ``configs/quickstart.py``
  (``:smoke`` on a dry run) for a short SFT and two RL steps in a subprocess, timed by the run's
  own ``time/step_s`` of its second step (the first compiles); {rl_step_s, rl_sample_s,
  rl_update_s}, or {rl_step_failed: 1}."""
  import tempfile  # pylint: disable=g-import-not-at-top
  config = "configs/quickstart.py" + (":smoke" if dry_run else "")
  env = dict(os.environ, PYTHONPATH=_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  if not dry_run:
    env.pop("JAX_PLATFORMS", None)
  with tempfile.TemporaryDirectory() as workdir:
    cmd = [sys.executable, "-m", "arenarl_jax.main", f"--config={config}", f"--workdir={workdir}",
           "--config.rl.steps=2", "--config.eval.tasks_per_subtask=1",
           "--config.metrics.progress=False"] + ([] if dry_run else ["--config.sft.steps=20"])
    try:
      proc = subprocess.run(cmd, cwd=_ROOT, env=env, capture_output=True, text=True,
                            timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
      print(f"rl step: stopped after {timeout_s} s")
      return {"rl_step_failed": 1}
    path = os.path.join(workdir, "metrics.jsonl")
    if proc.returncode or not os.path.isfile(path):
      print("rl step failed:\n" + "\n".join((proc.stdout + proc.stderr).splitlines()[-15:]))
      return {"rl_step_failed": 1}
    return step_times(path)


def step_times(path: str) -> dict[str, float]:
  """The last RL step's times in a run's ``metrics.jsonl``: {rl_step_s, rl_sample_s,
  rl_update_s}; a clear error when no row has ``time/step_s``."""
  import json  # pylint: disable=g-import-not-at-top
  with open(path, encoding="utf-8") as f:
    rows = [json.loads(line) for line in f if line.strip()]
  timed = [r for r in rows if "time/step_s" in r]
  if not timed:
    raise ValueError(f"{path}: no row with time/step_s (no RL step finished)")
  last = timed[-1]
  return {"rl_step_s": round(last["time/step_s"], 3),
          "rl_sample_s": round(last.get("time/sample_s", 0.0), 3),
          "rl_update_s": round(last.get("time/update_s", 0.0), 3)}


def main(argv=None) -> dict[str, float]:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--dry_run", action="store_true", help="CPU backend, tiny sizes")
  parser.add_argument("--skip_tests", action="store_true", help="no pytest step")
  parser.add_argument("--cache_dir", default=None, help="converted-parameter cache (SmolLM2)")
  parser.add_argument("--train", choices=("auto", "on", "off"), default="auto",
                      help="the train step: auto = when arenarl_jax/trainer.py exists")
  parser.add_argument("--rl_step", choices=("on", "off"), default="on",
                      help="one main-job RL step (configs/quickstart.py) in a subprocess")
  args = parser.parse_args(argv)
  if args.dry_run:
    os.environ["JAX_PLATFORMS"] = "cpu"
  sizes = DRY if args.dry_run else FULL

  result: dict[str, float] = {}
  if not args.skip_tests:
    result.update(run_tests(DRY_TESTS if args.dry_run else TEST_SUBSET, sizes.test_timeout_s,
                            args.dry_run))

  import jax  # pylint: disable=g-import-not-at-top
  # benchmarks/accelerator_measure.py: this script's folder is on sys.path (python puts it there).
  import accelerator_measure as measure  # pylint: disable=g-import-not-at-top

  backend = jax.default_backend()
  print(f"backend: {backend} ({jax.devices()[0].device_kind}), dry_run={args.dry_run}")
  ceiling = measure.matmul_ceiling(sizes.ceiling_n, sizes.repeats)
  print(f"bf16 matmul ceiling: {ceiling / 1e12:.3f} TFLOP/s at n={sizes.ceiling_n}")
  result["ceiling_tflops"] = round(ceiling / 1e12, 4)
  bandwidth = measure.bandwidth_ceiling(sizes.bandwidth_bytes, sizes.repeats)
  print(f"read bandwidth: {bandwidth / 1e9:.1f} GB/s over {sizes.bandwidth_bytes / 1e9:.2f} GB")
  result["bandwidth_gb_s"] = round(bandwidth / 1e9, 2)
  train = args.train == "on" or (
      args.train == "auto" and importlib.util.find_spec("arenarl_jax.trainer") is not None)

  loaders = (("smollm2", lambda: measure.smollm2(args.cache_dir, args.dry_run)),
             ("qwen3_06b", lambda: measure.qwen3_06b(args.dry_run)))
  for prefix, load in loaders:
    start = time.perf_counter()
    cfg, model = load()
    print(f"{prefix}: {cfg.num_params() / 1e6:.1f}M parameters, compute {cfg.act_dtype}, "
          f"ready in {time.perf_counter() - start:.1f} s")
    flops_s, tok_s = measure.forward(model, sizes)
    result[f"{prefix}_forward_frac"] = round(flops_s / ceiling, 4)
    result[f"{prefix}_forward_tok_s"] = round(tok_s, 1)
    flops_s, tok_s = measure.sampler(model, sizes)
    result[f"{prefix}_sampler_frac"] = round(flops_s / ceiling, 5)
    result[f"{prefix}_sampler_tok_s"] = round(tok_s, 1)
    step_s = measure.decode_step(model, sizes)
    rows = sizes.sampler_prompts * sizes.sampler_group
    moved = measure.decode_bytes(cfg, rows, sizes.prompt_tokens + 2 * sizes.new_tokens)
    result[f"{prefix}_decode_step_ms"] = round(step_s * 1e3, 3)
    result[f"{prefix}_decode_hbm_frac"] = round(moved / step_s / bandwidth, 4)
    if train:
      flops_s, tok_s = measure.train(model, sizes)
      result[f"{prefix}_train_frac"] = round(flops_s / ceiling, 4)
      result[f"{prefix}_train_tok_s"] = round(tok_s, 1)
    print({k: v for k, v in result.items() if k.startswith(prefix)},
          f"{time.perf_counter() - start:.1f} s in all")
  if args.rl_step == "on":
    start = time.perf_counter()
    result.update(rl_step(args.dry_run, sizes.rl_timeout_s))
    print(f"main-job RL step: {time.perf_counter() - start:.1f} s in all")
  result["dry_run"] = int(args.dry_run)
  print(f"RESULT backend={backend} " + " ".join(f"{k}={v}" for k, v in result.items()))
  return result


if __name__ == "__main__":
  main()
