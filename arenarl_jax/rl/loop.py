"""The RL loop: prompts -> experience (pluggable: rollouts judged into advantages) -> training batch -> minibatch updates -> metrics.

Every host runs this same loop (``distributed.initialize`` joins them): each host rolls out its
own contiguous share of the step's prompts (a group never spans hosts; the rollout indexes its
random draws by the global group, so the union of the shares is what one process rolls out), the
update is one global SPMD step over all hosts' rows, every host takes part in checkpoint saves,
the hosts' rollout stats are combined (``hosts.combine_host_stats``) and process 0 writes
metrics.
An experience source is any callable ``experience(params, *, step, prompt_ids, all_prompt_ids,
key) -> (trajectories, advantages_N, stats)`` with ``num_prompts``, ``state_dict()`` and
``load_state_dict()``: the agent's (``rl/experience.py``) or a test's stand-in.
Resume: the newest checkpoint restores the train state, the step, the prompt cursor, the PRNG key
and the experience source's state (its judge's), so a run killed at any point and rerun ends where an uninterrupted run
does. SIGTERM finishes the current step, saves and returns.
"""
from __future__ import annotations

import dataclasses
import os
import signal
import time
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from arenarl_jax import checkpoint as ckpt_lib
from arenarl_jax import hosts
from arenarl_jax import metrics as metrics_lib
from arenarl_jax.rl import batch as batch_lib
from arenarl_jax.rl import losses
from arenarl_jax.rl.settings import RlSettings
from arenarl_jax.trainer import Trainer, make_optimizer


class PromptCursor:
  """Prompt ids per step: a fresh seeded permutation each epoch, incomplete tail dropped."""

  def __init__(self, num_prompts: int, per_step: int, seed: int):
    if per_step <= 0 or num_prompts < per_step:
      raise ValueError(f"rl.prompts_per_step={per_step} needs at least that many prompts, "
                       f"the experience source has {num_prompts}")
    self.num_prompts, self.per_step, self.seed = num_prompts, per_step, seed
    self.epoch, self.index = 0, 0

  def state(self) -> dict[str, int]:
    return {"epoch": self.epoch, "index": self.index}

  def load(self, state: Mapping[str, int]) -> None:
    self.epoch, self.index = int(state["epoch"]), int(state["index"])

  def next(self) -> list[int]:
    if self.index + self.per_step > self.num_prompts:
      self.epoch, self.index = self.epoch + 1, 0
    order = np.random.default_rng([self.seed, self.epoch]).permutation(self.num_prompts)
    ids = order[self.index:self.index + self.per_step]
    self.index += self.per_step
    if self.index + self.per_step > self.num_prompts:  # the epoch's last step: the next is new
      self.epoch, self.index = self.epoch + 1, 0
    return [int(i) for i in ids]


_TRAINERS: dict[Any, Trainer] = {}  # compiled programs, reused by runs with the same settings


def make_trainer(settings: RlSettings, graphdef, params, mesh: Mesh) -> Trainer:
  """The RL stage's trainer (its loss, optimizer and schedule over every update of the stage),
  compiled once per distinct setting and parameter shapes and then reused."""
  total = settings.total_updates
  shapes = str(jax.tree.map(lambda x: (x.shape, str(x.dtype)), params))
  key = (graphdef, mesh, settings.loss, settings.optim, total, int(settings.accumulation_steps),
         int(settings.logprob_chunk), settings.remat, shapes)
  if key not in _TRAINERS:
    _TRAINERS[key] = Trainer(graphdef, params, mesh, losses.make_rl_loss(settings.loss),
                             make_optimizer(dataclasses.asdict(settings.optim), total),
                             accumulation_steps=settings.accumulation_steps,
                             chunk=settings.logprob_chunk, remat=settings.remat)
  return _TRAINERS[key]


def _combine_updates(per_update: list[dict]) -> dict[str, float]:
  """Means over the rollout's minibatch updates (max / min for the ratio extremes)."""
  out = {}
  for key in per_update[0]:
    values = np.asarray([float(m[key]) for m in per_update])
    out[key] = values.max() if key.endswith("_max") else values.min() if key.endswith(
        "_min") else values.mean()
  return out


def make_checkpointer(settings: RlSettings, workdir: str) -> ckpt_lib.Checkpointer:
  """The RL stage's checkpoints, ``<workdir>/checkpoints``, as ``checkpoint.*`` says."""
  return ckpt_lib.Checkpointer(os.path.join(workdir, "checkpoints"),
                               every=settings.checkpoint.every, keep=settings.checkpoint.keep)


def run(rl: RlSettings, workdir: str, experience, *, mesh: Mesh, model=None, on_step=None):
  """Runs ``rl.steps`` RL steps (resuming from ``workdir/checkpoints``); returns the state.

  ``model`` is the initial policy (an nnx Transformer; also the frozen KL reference), trained
  on the run's ``mesh``. ``on_step(step, state, writer)`` runs after each step's metrics and
  checkpoint (evaluation).
  """
  graphdef, params = nnx.split(model)
  params = nnx.to_pure_dict(params)
  trainer = make_trainer(rl, graphdef, params, mesh)
  state = trainer.init_state(params)
  ref_params = trainer.place_params(params)
  del params

  procs, me = jax.process_count(), jax.process_index()
  if rl.prompts_per_step % procs:
    raise ValueError(f"rl.prompts_per_step={rl.prompts_per_step} must split over {procs} hosts")
  cursor = PromptCursor(experience.num_prompts, rl.prompts_per_step, rl.seed)
  rng = jax.random.key(rl.seed)
  checkpointer = make_checkpointer(rl, workdir)
  start = 0
  latest = checkpointer.latest_step() if rl.checkpoint.resume else None
  if latest is not None:
    state, loop = checkpointer.restore(latest, state)
    start = int(loop["step"])
    cursor.load(loop["cursor"])
    rng = jax.random.wrap_key_data(jnp.asarray(loop["rng"], jnp.uint32))
    experience.load_state_dict(loop["experience"])
  writer = metrics_lib.MetricsWriter(workdir, tensorboard=rl.metrics.tensorboard,
                                     jsonl=rl.metrics.jsonl, resume_step=start)
  bar = metrics_lib.progress(rl.steps, desc="rl steps", initial=start,
                             enabled=rl.metrics.progress and me == 0)

  stop = {"sigterm": False}
  previous = signal.signal(signal.SIGTERM, lambda *_: stop.update(sigterm=True))
  shards = mesh.shape["data"] * mesh.shape["fsdp"]
  rows_multiple = (rl.minibatches_per_rollout * rl.accumulation_steps * max(1, shards // procs))

  def loop_state(step):
    return {"step": step, "cursor": cursor.state(),
            "rng": np.asarray(jax.random.key_data(rng)).tolist(), "experience": experience.state_dict()}

  try:
    step = start
    while step < rl.steps and not stop["sigterm"]:
      t0 = time.perf_counter()
      epoch = cursor.epoch
      all_ids = cursor.next()
      share = len(all_ids) // procs
      rng, key = jax.random.split(rng)
      trajectories, adv_N, stats = experience(state.params, step=step,
                                           prompt_ids=all_ids[me * share:(me + 1) * share],
                                           all_prompt_ids=all_ids, key=key)
      t1 = time.perf_counter()
      local = batch_lib.make_batch(trajectories, adv_N, bucket=rl.bucket,
                                   rows_multiple=rows_multiple, train_anchor=rl.train_anchor)
      width = hosts.global_max(local["tokens_NT"].shape[1])  # every host's rows in one global shape
      if width > local["tokens_NT"].shape[1]:
        local = {k: np.pad(v, ((0, 0), (0, width - v.shape[1]))) if v.ndim == 2 else v
                 for k, v in local.items()}
      minibatches = [trainer.put_batch(mb)
                     for mb in batch_lib.split_rows(local, rl.minibatches_per_rollout)]
      for mb in minibatches:  # the rollout policy's log-probs, before this rollout's updates
        mb["old_logp_NT"] = trainer.logprobs(state.params, mb)
      per_update = []
      for mb in minibatches:
        state, m = trainer.step(state, ref_params, mb)
        per_update.append(m)
      per_update = jax.device_get(per_update)
      t2 = time.perf_counter()
      step += 1
      values = dict(_combine_updates(per_update), **hosts.gather_stats(stats))
      values.update({"optimizer_step": int(state.step), "epoch": epoch,
                     "time/rollout_s": t1 - t0, "time/update_s": t2 - t1,
                     "time/step_s": time.perf_counter() - t0})
      writer.write(step, values)
      bar.update(1)
      if checkpointer.due(step) or step == rl.steps or stop["sigterm"]:
        checkpointer.save(step, state, loop_state(step))
      if on_step is not None:
        on_step(step, state, writer)
  finally:
    signal.signal(signal.SIGTERM, previous)
    bar.close()
    writer.close()
    checkpointer.close()
  return state


