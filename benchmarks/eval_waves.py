"""Evaluation roll-outs of the pinned SmolLM2 start in waves of different sizes: wall time,
peak memory and whether each task still meets what START.json recorded.

  .venv/bin/python benchmarks/eval_waves.py [--rows 20,40] [--tasks_per_subtask 8]
      [--config configs/smollm2_travel.py:build_start]

Each wave size runs ``python -m arenarl_jax.tools.start_reproduction --max_rows=R`` in its own
process (so each peak RSS is its own), greedily on the first ``--tasks_per_subtask`` validation
tasks of every subtask, in the order given. A decode step's cost on 2 CPU cores grows much more
slowly than its row count (the weights are read once a step, whatever the rows), so bigger waves
finish an evaluation sooner, until the rows' key-value cache reads and memory catch up. Ends
with ``RESULT rows=... rollout_s_<R>=... peak_rss_gb_<R>=... matched_<R>=... tasks=...
speedup=...`` (``speedup``: the first size's roll-out time over the last's).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_one(config: str, rows: int, per_subtask: int) -> dict[str, str]:
  """One wave size in a fresh process: the tool's RESULT fields."""
  out = subprocess.run(
      [sys.executable, "-m", "arenarl_jax.tools.start_reproduction", f"--config={config}",
       f"--tasks_per_subtask={per_subtask}", f"--max_rows={rows}"],
      cwd=ROOT, capture_output=True, text=True, check=False)
  lines = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")]
  if not lines:
    raise RuntimeError(f"max_rows={rows}: no RESULT line\n{out.stdout[-2000:]}\n"
                       f"{out.stderr[-3000:]}")
  print("\n".join(l for l in out.stdout.splitlines() if "| NO |" in l or l.startswith("RESULT")),
        flush=True)
  return dict(item.split("=", 1) for item in lines[-1].split()[1:])


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--rows", default="20,40", help="comma-separated wave sizes")
  parser.add_argument("--tasks_per_subtask", type=int, default=8)
  parser.add_argument("--config", default="configs/smollm2_travel.py:build_start")
  args = parser.parse_args()
  sizes = [int(r) for r in args.rows.split(",")]
  results = {r: run_one(args.config, r, args.tasks_per_subtask) for r in sizes}
  print("| rows per wave | roll-out s | peak RSS GB | tasks matching the record |")
  print("|---|---|---|---|")
  for r, res in results.items():
    print(f"| {r} | {res['rollout_s']} | {res['peak_rss_gb']} | {res['matched']} of "
          f"{res['tasks']} |")
  first, last = results[sizes[0]], results[sizes[-1]]
  fields = " ".join(f"rollout_s_{r}={res['rollout_s']} peak_rss_gb_{r}={res['peak_rss_gb']} "
                    f"matched_{r}={res['matched']}" for r, res in results.items())
  print(f"RESULT rows={args.rows} {fields} tasks={first['tasks']} "
        f"speedup={float(first['rollout_s']) / float(last['rollout_s']):.3f} cpu={first['cpu']}")


if __name__ == "__main__":
  main()
