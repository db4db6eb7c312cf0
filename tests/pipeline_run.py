"""The quickstart ``:smoke`` pipeline as a (sub)process, recording which groups it rolled out.

  python tests/pipeline_run.py WORKDIR DATA_DIR [--procs K --proc I --port P] [--set key=value ...]

Runs ``pipeline.pipeline`` (SFT -> RL with the agent rollout -> evaluation) with the smoke config
(``--set`` overrides scalars, e.g. ``--set rl.steps=1``). Each process writes
``WORKDIR/groups_<process>.json``: per RL step, the prompt ids it rolled out and, per group,
every trajectory's tokens and advantage. Process 0 writes the final RL parameters (gathered from
all processes) to ``WORKDIR/params.npz``, the pipeline's output to ``WORKDIR/result.txt`` and
the exported policy (``pipeline.export``) to ``WORKDIR/export``.
"""
import argparse
import contextlib
import io
import json
import os
import sys

import numpy as np


def make_config(data_dir, procs=1, proc=0, port=0, overrides=()):
  sys.path.insert(0, os.path.join(ROOT, "configs"))
  import quickstart  # pylint: disable=import-outside-toplevel
  c = quickstart.get_config("smoke")
  with c.unlocked():
    c.data.dir = data_dir
    for item in overrides:
      key, value = item.split("=", 1)
      *parents, leaf = key.split(".")
      node = c
      for p in parents:
        node = node[p]
      node[leaf] = type(node[leaf])(json.loads(value) if not isinstance(node[leaf], str) else value)
    if procs > 1:
      c.distributed.update(dict(initialize=True, coordinator_address=f"127.0.0.1:{port}",
                                num_processes=procs, process_id=proc, cpu_collectives="gloo"))
  return c


def main(argv):
  parser = argparse.ArgumentParser()
  parser.add_argument("workdir")
  parser.add_argument("data_dir")
  parser.add_argument("--procs", type=int, default=1)
  parser.add_argument("--proc", type=int, default=0)
  parser.add_argument("--port", type=int, default=0)
  parser.add_argument("--set", action="append", default=[])
  args = parser.parse_args(argv)
  config = make_config(args.data_dir, args.procs, args.proc, args.port, args.set)
  from arenarl_jax.rl import experience  # pylint: disable=import-outside-toplevel
  from arenarl_jax import pipeline
  from arenarl_jax.rl import loop
  import jax  # pylint: disable=import-outside-toplevel
  from jax.experimental import multihost_utils  # pylint: disable=import-outside-toplevel

  record, final = [], {}
  call = experience.Experience.__call__

  def recording_call(self, params, *, step, prompt_ids, all_prompt_ids, key=None, **kw):
    trajectories, adv_N, stats = call(self, params, step=step, prompt_ids=prompt_ids,
                                      all_prompt_ids=all_prompt_ids, key=key, **kw)
    g = self.group_size
    record.append({"step": step, "prompt_ids": [int(i) for i in prompt_ids],
                   "all_prompt_ids": [int(i) for i in all_prompt_ids],
                   "groups": [{"prompt": int(p),
                               "tokens": [trajectories[b * g + i].tokens.tolist()
                                          for i in range(g)],
                               "advantages": adv_N[b * g:(b + 1) * g].tolist()}
                              for b, p in enumerate(prompt_ids)]})
    return trajectories, adv_N, stats

  experience.Experience.__call__ = recording_call
  run = loop.run

  def capturing_run(*a, **kw):
    state = run(*a, **kw)
    final["params"] = multihost_utils.process_allgather(state.params, tiled=True)
    return state

  loop.run = capturing_run
  out = io.StringIO()
  with contextlib.redirect_stdout(out):
    pipeline.pipeline(config, args.workdir)
  pipeline.export(config, args.workdir)  # the final policy as an HF directory (process 0 writes)
  me = jax.process_index()
  with open(os.path.join(args.workdir, f"groups_{me}.json"), "w", encoding="utf-8") as f:
    json.dump(record, f)
  if me == 0:
    flat = {"/".join(str(getattr(k, "key", k)) for k in path): np.asarray(x)
            for path, x in jax.tree_util.tree_leaves_with_path(final["params"])}
    np.savez(os.path.join(args.workdir, "params.npz"), **flat)
    with open(os.path.join(args.workdir, "result.txt"), "w", encoding="utf-8") as f:
      f.write(out.getvalue())
  sys.stdout.write(out.getvalue())


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

if __name__ == "__main__":
  sys.path.insert(0, ROOT)
  main(sys.argv[1:])
