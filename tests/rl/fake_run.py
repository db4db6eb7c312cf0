"""A tiny fake-rollout RL run, used in-process and as a subprocess by the train tests.

  python tests/rl/fake_run.py WORKDIR [--kill_at STEP] [--term_at STEP]
                              [--procs K --proc I --port P]
``--kill_at``: SIGKILL itself when asked for step STEP's rollout (after step STEP's checkpoint);
``--term_at``: SIGTERM itself there (the loop finishes that step, saves and returns).
"""
import argparse
import os
import signal
import sys

import numpy as np

VOCAB = 61


def make_config(steps=6, procs=1, proc=0, port=0):
  from arenarl_jax import config_tree
  c = config_tree.make_base_config()
  c.seed = 3
  c.rl.update(dict(prompts_per_step=2, steps=steps, minibatches_per_rollout=2,
                   accumulation_steps=1, logprob_chunk=8, bucket=16))
  c.optim.update(dict(lr=1e-2, schedule="cosine", warmup_steps=1))
  c.mesh.update(dict(data=4, fsdp=2, tensor=1))
  c.checkpoint.update(dict(every=1, keep=2))
  c.metrics.progress = False
  if procs > 1:
    c.distributed.update(dict(initialize=True, coordinator_address=f"127.0.0.1:{port}",
                              num_processes=procs, process_id=proc, cpu_collectives="gloo"))
  return c


def run(config, workdir, rollout):
  """``rl/loop.run`` of ``config`` (its settings and mesh as the pipeline builds them)."""
  from arenarl_jax import pipeline
  from arenarl_jax.rl import loop
  return loop.run(pipeline.rl_settings(config), workdir, rollout,
                  mesh=pipeline.make_mesh(config), model=make_model())


def make_model():
  from arenarl_jax.models.config import ModelConfig
  from arenarl_jax.models.transformer import make_model as build
  return build(ModelConfig(vocab_size=VOCAB, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1,
                           head_dim=8, ffn_dim=32, tie_embeddings=True), seed=0)


def make_rollout(kill_at=-1, term_at=-1):
  from fake_rollout import FakeRollout

  class Rollout(FakeRollout):
    def __call__(self, params, *, step, **kw):
      if step == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
      if step == term_at:
        os.kill(os.getpid(), signal.SIGTERM)
      return super().__call__(params, step=step, **kw)

  return Rollout(vocab_size=VOCAB, group_size=4, num_prompts=6, max_new_tokens=10, seed=3)


def main(argv):
  parser = argparse.ArgumentParser()
  parser.add_argument("workdir")
  parser.add_argument("--kill_at", type=int, default=-1)
  parser.add_argument("--term_at", type=int, default=-1)
  parser.add_argument("--steps", type=int, default=6)
  parser.add_argument("--procs", type=int, default=1)
  parser.add_argument("--proc", type=int, default=0)
  parser.add_argument("--port", type=int, default=0)
  args = parser.parse_args(argv)
  config = make_config(args.steps, args.procs, args.proc, args.port)
  from arenarl_jax import hosts
  hosts.initialize_distributed(config.distributed)
  import jax
  from jax.experimental import multihost_utils
  state = run(config, args.workdir, make_rollout(args.kill_at, args.term_at))
  params = multihost_utils.process_allgather(state.params, tiled=True)
  if jax.process_index() == 0:
    flat = {"/".join(str(getattr(k, "key", k)) for k in path): np.asarray(x)
            for path, x in jax.tree_util.tree_leaves_with_path(params)}
    np.savez(os.path.join(args.workdir, f"params_{int(state.step)}.npz"), **flat)


if __name__ == "__main__":
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
  main(sys.argv[1:])
