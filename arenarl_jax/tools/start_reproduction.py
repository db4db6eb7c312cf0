"""Whether a pinned start reproduces its record on this machine: greedy roll-outs of some of
its validation tasks, verified, against the per-task met that ``START.json`` recorded.

  python -m arenarl_jax.tools.start_reproduction --config=configs/smollm2_travel.py:build_start \
      [--subtasks=search,compare] [--tasks_per_subtask=2] [--max_rows=0] [--cache=ladder|full] \
      [--set=KEY=VALUE ...]

``--config`` is the config that builds the start (``start.name``); the tool loads the start as
a run that names it does (``start.build`` off), takes the first ``--tasks_per_subtask`` tasks of
each chosen subtask of the build's evaluation split, rolls them out greedily in one batch (or in
waves of ``--max_rows`` rows, as an evaluation does), and compares each task's verdict (met of
total) with the record. Prints one line per task and ends with ``RESULT tasks=... matched=...
met=... recorded_met=... cpu=... recorded_cpu=... reproduced=0|1 max_rows=... rollout_s=...
peak_rss_gb=...`` (``rollout_s``: the roll-outs' wall time, compiles included).

``--cache=full`` holds every row's cache at ``sampling.cache_len`` from the start instead of
growing it along the sampler's ladder of sizes as a run does. Each size on the ladder is a decode
program to compile (a SmolLM2 search answer's rows pass through 7), while the CPU attention
kernel reads only a row's filled slots, so a few rows decode as fast in the full cache and the
tool spends far less time compiling (benchmarks/README.md, "Loading it reproduces the record").
It costs memory (``cache_len`` slots a row: about 190 MB for SmolLM2 at 4,096), so it suits few
rows; a cache size is one more shape, like the batch's, that may change the rounding (below).

What can differ. Greedy decoding is deterministic on one machine, but its float rounding
depends on the CPU's instruction set (``cpu`` in START.json) and on the batch's shape (XLA picks
its matrix kernels, and so the order of a sum, per shape): the build rolled its tasks out in
waves of ``eval.max_rows`` rows, this tool in one batch of the chosen ones by default. A
rounding change matters only where two tokens' logits are nearly tied; after one different
token the roll-out goes its own way and may meet other requirements. ``matched`` counts tasks
whose met and total both equal the record.

``reproduced`` applies the tolerance (``reproduces``): on the CPU kind that built the start
(``cpu_kind(amx=True)`` equal to the record's) every task must match; on another kind all but
one. Why one: a rounding change is of the same order whether it comes from another batch shape
or another instruction set, and on the CPU kind that built ``travel_smollm2`` rolling its tasks
out in other batches (10 tasks, 2 per subtask, in one batch; the first wave's 20 again) changed
the met of none of 30 (benchmarks/README.md, "Loading it reproduces the record"). At a flip
rate p per task, two or more flips among n tasks happen with probability about n(n-1)p²/2
(under 1% for n = 3 at p = 5%), while a start that loads wrong weights differs on nearly every
task.
"""
from __future__ import annotations

from typing import Any, Sequence


def chosen_tasks(tasks: Sequence[Any], subtasks: Sequence[str], per_subtask: int) -> list[Any]:
  """The first ``per_subtask`` tasks of each of ``subtasks`` (all subtasks when empty), in the
  tasks' own order."""
  known = list(dict.fromkeys(t.subtask for t in tasks))
  unknown = [s for s in subtasks if s not in known]
  if unknown:
    raise ValueError(f"--subtasks: {unknown} not among this split's subtasks {known}")
  if per_subtask < 1:
    raise ValueError(f"--tasks_per_subtask must be >= 1, got {per_subtask}")
  wanted, out, seen = set(subtasks or known), [], {}
  for t in tasks:
    if t.subtask in wanted and seen.get(t.subtask, 0) < per_subtask:
      seen[t.subtask] = seen.get(t.subtask, 0) + 1
      out.append(t)
  return out


def compare(recorded: dict[str, Any], verdicts: dict[str, tuple[int, int, str]]
            ) -> tuple[list[str], dict[str, Any]]:
  """Table lines and totals of this machine's ``verdicts`` (task id -> met, total, finish)
  against START.json's ``validation.tasks``. A task the record lacks is an error: the start and
  the config disagree on the split."""
  missing = [t for t in verdicts if t not in recorded]
  if missing:
    raise KeyError(f"START.json has no validation record of tasks {missing[:5]}: the config's "
                   "evaluation split differs from the build's")
  lines = ["| task | recorded met / total | here | finish here | same |", "|---|---|---|---|---|"]
  matched, met, recorded_met = 0, 0.0, 0.0
  for task_id, (m, total, finish) in verdicts.items():
    want = recorded[task_id]
    same = (m, total) == (want["met"], want["total"])
    matched += same
    met += m / total if total else 0.0
    recorded_met += want["met"] / want["total"] if want["total"] else 0.0
    lines.append(f"| {task_id} | {want['met']} / {want['total']} | {m} / {total} | {finish} | "
                 f"{'yes' if same else 'NO'} |")
  n = len(verdicts)
  return lines, {"tasks": n, "matched": matched, "met": met / n if n else 0.0,
                 "recorded_met": recorded_met / n if n else 0.0}


def reproduces(matched: int, tasks: int, cpu: str, recorded_cpu: str) -> bool:
  """The tolerance (module docstring): every task on the CPU kind that built the start, all but
  one on another."""
  return matched == tasks if cpu == recorded_cpu else matched >= tasks - 1


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
  import argparse  # pylint: disable=g-import-not-at-top
  import resource  # pylint: disable=g-import-not-at-top
  import tempfile  # pylint: disable=g-import-not-at-top
  import time  # pylint: disable=g-import-not-at-top
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from arenarl_jax import pipeline  # pylint: disable=g-import-not-at-top
  from arenarl_jax.envs import base  # pylint: disable=g-import-not-at-top
  from arenarl_jax.models import backend  # pylint: disable=g-import-not-at-top
  from arenarl_jax.sft import start as start_lib  # pylint: disable=g-import-not-at-top
  from arenarl_jax.sft.settings import StartSettings  # pylint: disable=g-import-not-at-top
  from arenarl_jax.tools import headroom  # pylint: disable=g-import-not-at-top

  parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
  parser.add_argument("--config", required=True, help="the config (path[:arg]) that builds the "
                      "start")
  parser.add_argument("--subtasks", default="", help="comma-separated; empty = every subtask")
  parser.add_argument("--tasks_per_subtask", type=int, default=2)
  parser.add_argument("--max_rows", type=int, default=0,
                      help="roll out in waves of at most this many rows (0: one batch)")
  parser.add_argument("--cache", choices=("ladder", "full"), default="ladder",
                      help="ladder: grow each row's cache as a run does; full: one cache size "
                      "(sampling.cache_len), one decode program to compile")
  parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                      help="change a config key (e.g. model.cache_dir=DIR), as headroom's --set")
  args = parser.parse_args(argv)
  config = headroom.load_config("", args.config)
  for item in args.set:
    headroom.set_key(config, item)
  config.start.build = False
  start = StartSettings.from_config(config.start)
  if not start.loads:
    parser.error(f"{args.config}: start.name is empty; give the config that builds a start")
  record = start_lib.read_record(start_lib.start_dir(start))
  settings = record["settings"]
  config.update_from_flattened_dict({
      "eval.split": settings["eval.split"], "eval.group_size": 1, "eval.greedy": True,
      "eval.max_rows": args.max_rows,
      "eval.tasks_per_subtask": settings["eval.tasks_per_subtask"]})
  env = base.make_environment_from_config(config.env)
  mesh = pipeline.make_mesh(config)
  with tempfile.TemporaryDirectory(prefix="start_reproduction_") as workdir:
    policy = pipeline.starting_policy(config, workdir, env, mesh)
    evaluator = pipeline.make_evaluator(config, env, policy, workdir, mesh)
    if args.cache == "full":
      evaluator.sampler.cache_sizes = (evaluator.sampler.cache_len,)
    subtasks = [s for s in args.subtasks.split(",") if s]
    evaluator.tasks = chosen_tasks(evaluator.tasks, subtasks, args.tasks_per_subtask)
    t0 = time.perf_counter()
    rows = evaluator.rollouts(nnx.to_pure_dict(nnx.state(policy.model)))
    rollout_s = time.perf_counter() - t0
  verdicts = {}
  for t in rows:
    v = env.verify(t)
    verdicts[t.metadata["task_id"]] = (v.met, v.total, t.finish_reason)
  lines, out = compare(record["validation"]["tasks"], verdicts)
  out.update(cpu=backend.cpu_kind(amx=True), recorded_cpu=record.get("cpu", "unknown"))
  out["reproduced"] = reproduces(out["matched"], out["tasks"], out["cpu"], out["recorded_cpu"])
  print(f"start {start.name!r} ({start_lib.start_dir(start)}), built on {out['recorded_cpu']}, "
        f"rolled out here on {out['cpu']}: {out['tasks']} {settings['eval.split']} tasks, greedy, "
        + (f"waves of {args.max_rows} rows" if args.max_rows else "one batch")
        + f", cache {args.cache}")
  print("\n".join(lines))
  print(f"RESULT tasks={out['tasks']} matched={out['matched']} met={out['met']:.4f} "
        f"recorded_met={out['recorded_met']:.4f} cpu={out['cpu']} "
        f"recorded_cpu={out['recorded_cpu']} reproduced={int(out['reproduced'])} "
        f"max_rows={args.max_rows} cache={args.cache} rollout_s={rollout_s:.1f} "
        f"peak_rss_gb={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f}")
  return out


if __name__ == "__main__":
  from arenarl_jax.models import backend as _backend  # pylint: disable=g-import-not-at-top
  _backend.prepare_process()  # as the CLI does, before anything starts JAX
  raise SystemExit(0 if main()["reproduced"] else 1)
