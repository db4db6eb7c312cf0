"""The CPU attention kernels' variants side by side: each instruction set this CPU runs, on the
training attention (forward and backward) and the decode step's attention against a KV cache.

  .venv/bin/python benchmarks/kernel_variants.py [--rounds 5]

Each variant (``ARENARL_KERNEL_ISA``: ``avx512``, ``avx2``, ``portable``, the ones this CPU
supports) runs in its own worker process, since a process loads one kernel library; the workers
stay up and are timed in interleaved rounds (each round runs every variant's problems once, so a
change in the machine's load hits all of them alike). Problems: the quickstart model's training
attention (8 rows x 1,856 tokens, 2 KV heads x 2 queries each, F = 32) and SmolLM2's (2 x 1,024,
3 x 3, F = 64), forward and backward; one decode step of 32 rows against a 2,048-slot cache with
a 1,024-token shared prefix (F = 64). Medians in milliseconds. Ends with one ``RESULT`` line
naming the machine (``cpu=``) and each variant's speedup over ``avx2``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

PROBLEMS = {"train_f32": (8, 1856, 2, 2, 32), "train_f64": (2, 1024, 3, 3, 64)}


def worker() -> None:
  """Builds this process's variant, then answers each ``run`` line with one round's times."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from arenarl_jax.models.cpu import build, kernel  # pylint: disable=import-outside-toplevel
  assert build.registered(), "the kernel did not build"
  calls = {}
  for name, (n, t, kv, r, f) in PROBLEMS.items():
    ks = jax.random.split(jax.random.key(0), 4)
    q = jax.random.normal(ks[0], (n, t, kv, r, f))
    k, v = (jax.random.normal(x, (n, t, kv, f)) for x in ks[1:3])
    d = jax.random.normal(ks[3], (n, t, kv, r, f))
    fwd = jax.jit(kernel.causal, static_argnums=4)
    out, lse = fwd(q, k, v, None, 4)
    bwd = jax.jit(kernel.causal_backward, static_argnums=7)
    calls[name + "_fwd"] = lambda fwd=fwd, a=(q, k, v): fwd(*a, None, 4)
    calls[name + "_bwd"] = lambda bwd=bwd, a=(q, k, v, None, out, lse, d): bwd(*a, 4)
  # Decode: 32 rows (16 prompts x G = 2), 3 KV heads x 3 queries, F = 64.
  n, kv, r, f, s, p = 32, 3, 3, 64, 2048, 1024
  ks = jax.random.split(jax.random.key(1), 5)
  q = jax.random.normal(ks[0], (n, kv, r, f))
  k = jax.random.normal(ks[1], (n, kv, f, s))
  v = jax.random.normal(ks[2], (n, kv, s, f))
  pk = jax.random.normal(ks[3], (n // 2, kv, f, p))
  pv = jax.random.normal(ks[4], (n // 2, kv, p, f))
  count, lengths = jnp.full((n,), s // 2, jnp.int32), jnp.full((n // 2,), p, jnp.int32)
  dec = jax.jit(lambda *a: kernel.attend(*a[:4], a[4:], group=2))
  calls["decode_f64"] = lambda: dec(q, k, v, count, pk, pv, lengths)
  for call in calls.values():
    jax.block_until_ready(call())
  print(json.dumps({"variant": build.loaded_variant()}), flush=True)
  for line in sys.stdin:
    if line.strip() != "run":
      break
    times = {}
    for name, call in calls.items():
      start = time.perf_counter()
      jax.block_until_ready(call())
      times[name] = time.perf_counter() - start
    print(json.dumps(times), flush=True)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--rounds", type=int, default=5)
  parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.worker:
    return worker()
  import timing  # pylint: disable=import-outside-toplevel  (benchmarks/timing.py)
  from arenarl_jax.models.cpu import isa  # pylint: disable=import-outside-toplevel
  print(f"load average at start: {os.getloadavg()}; cpu: {timing.cpu_kind()}")
  procs = {}
  for variant in isa.supported_isas():
    env = dict(os.environ, ARENARL_KERNEL_ISA=variant, ARENARL_REQUIRE_KERNEL="1")
    procs[variant] = subprocess.Popen([sys.executable, __file__, "--worker"], env=env, text=True,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    loaded = json.loads(procs[variant].stdout.readline())["variant"]
    assert loaded == variant, (loaded, variant)
  times: dict[str, dict[str, list[float]]] = {v: {} for v in procs}
  try:
    for _ in range(args.rounds):
      for variant, proc in procs.items():
        proc.stdin.write("run\n")
        proc.stdin.flush()
        for name, seconds in json.loads(proc.stdout.readline()).items():
          times[variant].setdefault(name, []).append(seconds)
  finally:
    for proc in procs.values():
      proc.stdin.close()
      proc.wait(timeout=60)
  med = {v: {name: statistics.median(ts) * 1e3 for name, ts in by.items()}
         for v, by in times.items()}
  names = list(next(iter(med.values())))
  print("ms (median of rounds) " + " ".join(f"{n:>12}" for n in names))
  for variant, by in med.items():
    print(f"{variant:>21} " + " ".join(f"{by[n]:12.2f}" for n in names))
  print(f"load average at end: {os.getloadavg()}")
  base = med.get("avx2")
  speedups = ""
  if base:
    for variant in med:
      if variant != "avx2":
        ratios = [base[n] / med[variant][n] for n in names]
        speedups += (f" {variant}_vs_avx2_min={min(ratios):.3f}"
                     f" {variant}_vs_avx2_median={statistics.median(ratios):.3f}")
  print("RESULT " + " ".join(f"{v}_{n}_ms={by[n]:.2f}" for v, by in med.items() for n in names)
        + speedups + f" cpu={timing.cpu_kind()}")


if __name__ == "__main__":
  main()
