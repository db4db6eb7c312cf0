"""Tournament engine speed: host bookkeeping and lockstep wall time for 256 groups x 16.

Run: .venv/bin/python benchmarks/tournament.py
Bookkeeping = time of ``tournament.rank`` minus the time spent inside ``judge.judge`` (a
zero-latency synthetic judge), median over repeats, both as wall time and as this process's CPU
time (the CPU time is what the code costs; on a shared, oversubscribed machine the wall time
also counts waiting for a core). RESULT reports the CPU-time median. Wall = one ``rank`` call
with a judge that sleeps 200 ms per batch call: lockstep rounds make it about rounds x 200 ms.
A reference loop (``sum(range(1000))``, about 10 us on an idle desktop CPU) is timed first so
numbers from different machines can be compared.
"""
from __future__ import annotations

import argparse
import time
import timeit

import numpy as np

from arenarl_jax import tournament
from arenarl_jax.judges.synthetic import NoisyJudge
from arenarl_jax.types import Trajectory


class TimedJudge:
  """Wraps a judge and adds up the wall and CPU time spent inside it."""

  def __init__(self, judge):
    self.inner, self.wall, self.cpu, self.calls = judge, 0.0, 0.0, 0

  def judge(self, matches):
    wall, cpu = time.perf_counter(), time.process_time()
    out = self.inner.judge(matches)
    self.wall += time.perf_counter() - wall
    self.cpu += time.process_time() - cpu
    self.calls += 1
    return out


def run(groups, qualities, topology, latency_s):
  """(wall s, cpu s, judge wall s, judge cpu s, rounds, requests) of one rank call."""
  judge = TimedJudge(NoisyJudge(qualities, latency_s=latency_s))
  wall, cpu = time.perf_counter(), time.process_time()
  results = tournament.rank(groups, judge, topology, 0)
  wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
  requests = sum(r.requests for r in results)
  return wall, cpu, judge.wall, judge.cpu, judge.calls, requests


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--groups", type=int, default=256)
  parser.add_argument("--group_size", type=int, default=16)
  parser.add_argument("--repeats", type=int, default=7)
  parser.add_argument("--latency_s", type=float, default=0.2)
  args = parser.parse_args()
  qualities = np.random.default_rng(0).normal(size=(args.groups, args.group_size))
  groups = [[Trajectory(query=f"prompt {b}") for _ in range(args.group_size)]
            for b in range(args.groups)]

  reference_us = min(timeit.repeat("sum(range(1000))", number=2000, repeat=5)) / 2000 * 1e6
  print(f"reference loop sum(range(1000)): {reference_us:.1f} us")
  print(f"{args.groups} groups x {args.group_size}, zero-latency judge, "
        f"median (min) of {args.repeats} runs, bookkeeping excludes the judge")
  print(f"{'topology':<20} {'rounds':>6} {'requests':>9} {'cpu_ms':>15} {'wall_ms':>15} "
        f"{'judge_cpu_ms':>12}")
  summary = {}
  for name in tournament.TOPOLOGIES:
    runs = np.array([run(groups, qualities, name, 0.0) for _ in range(args.repeats)])
    cpu_ms = (runs[:, 1] - runs[:, 3]) * 1e3
    wall_ms = (runs[:, 0] - runs[:, 2]) * 1e3
    calls, requests = int(runs[0, 4]), int(runs[0, 5])
    summary[name] = np.median(cpu_ms)
    print(f"{name:<20} {calls:>6} {requests:>9} {np.median(cpu_ms):>7.1f} ({cpu_ms.min():5.1f}) "
          f"{np.median(wall_ms):>7.1f} ({wall_ms.min():5.1f}) {np.median(runs[:, 3]) * 1e3:>12.1f}")

  wall, _, _, _, calls, requests = run(groups, qualities, "single_elimination", args.latency_s)
  ideal = calls * args.latency_s
  print(f"single_elimination, judge sleeping {args.latency_s * 1e3:.0f} ms per batch call: "
        f"{calls} rounds, wall {wall:.3f} s vs rounds x latency {ideal:.3f} s "
        f"(ratio {wall / ideal:.3f})")
  print(f"RESULT bookkeeping_ms={summary['single_elimination']:.1f} wall_s={wall:.3f} "
        f"judge_requests={requests}")


if __name__ == "__main__":
  main()
