"""One-accelerator check: the model/sampler tests on the accelerator backend, then the forward and
the sampler (and the train step, once ``arenarl_jax/trainer.py`` exists) of SmolLM2 and of a
randomly initialised Qwen3-0.6B-shaped model, each as a fraction of a bf16 matmul ceiling measured
in the same run.

  .venv/bin/python benchmarks/accelerator.py             # one GPU: under 5 minutes
  .venv/bin/python benchmarks/accelerator.py --dry_run   # CPU backend, tiny sizes (a test runs it)

Steps: (1) pytest on the model/sampler subset in a subprocess with ``JAX_PLATFORMS`` unset (so JAX
picks the accelerator) and float32 matmuls at full precision (``JAX_DEFAULT_MATMUL_PRECISION``;
GPUs otherwise use TF32, which the float32 reference comparisons were not written for); the
8-device sharding tests are left out (one chip). (2) The ceiling: a bf16 [n, n] @ [n, n] matmul,
median of repeats. (3) Per model, with ``compute_dtype="auto"`` (bf16 on accelerators, float32 on
CPU) over float32 parameters:
  forward: ``model.hidden`` + the head's log-sum-exp over B x T tokens; model FLOPs = 2 x (weight
    matmul parameters) per token + the causal attention products;
  sampler: ``Sampler.sample`` (prefill + decode, EOS ignored) of R rows; FLOPs = 2 x weights per
    prompt and generated token (decode is memory-bound: this fraction is expected to be small);
  train (when ``arenarl_jax/trainer.py`` exists, or with ``--train=on``): its
    ``Trainer.step`` on B x T tokens (without that module: a generic value-and-grad of the mean
    token log-prob plus AdamW), counted as 3 x the forward's FLOPs.
Each fraction = achieved FLOP/s / ceiling FLOP/s. ``--dry_run`` runs the same code on the CPU
backend with tiny sizes; there the Qwen3-0.6B shape is replaced by a scaled-down Qwen3-family
config (same family and features: qk-norm, GQA, tied head; 2 layers, width 64), SmolLM2 keeps
its first 2 of 30 layers (real weights, real loader), and only one small test runs in the pytest
step. Ends with one ``RESULT`` line.
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


FULL = Sizes(ceiling_n=8192, repeats=5, forward_rows=8, forward_tokens=1024, sampler_prompts=8,
             sampler_group=4, prompt_tokens=128, new_tokens=128, test_timeout_s=120)
DRY = Sizes(ceiling_n=256, repeats=1, forward_rows=1, forward_tokens=16, sampler_prompts=1,
            sampler_group=2, prompt_tokens=8, new_tokens=3, test_timeout_s=120)


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


def main(argv=None) -> dict[str, float]:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--dry_run", action="store_true", help="CPU backend, tiny sizes")
  parser.add_argument("--skip_tests", action="store_true", help="no pytest step")
  parser.add_argument("--cache_dir", default=None, help="converted-parameter cache (SmolLM2)")
  parser.add_argument("--train", choices=("auto", "on", "off"), default="auto",
                      help="the train step: auto = when arenarl_jax/trainer.py exists")
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
    if train:
      flops_s, tok_s = measure.train(model, sizes)
      result[f"{prefix}_train_frac"] = round(flops_s / ceiling, 4)
      result[f"{prefix}_train_tok_s"] = round(tok_s, 1)
    print({k: v for k, v in result.items() if k.startswith(prefix)},
          f"{time.perf_counter() - start:.1f} s in all")
  result["dry_run"] = int(args.dry_run)
  print(f"RESULT backend={backend} " + " ".join(f"{k}={v}" for k, v in result.items()))
  return result


if __name__ == "__main__":
  main()
