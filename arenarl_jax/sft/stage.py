"""SFT cold start: supervised training on the expert's whole conversations (``--mode=sft``).

Each update takes ``data.sft_batch_size`` conversations of the dataset's ``sft`` split, rendered
with the environment's tools and tokenised at read time (``data.pipeline.sft_batches``: loss weight
1 on every assistant body and its ``<|im_end|>``, ``sft.context_weight`` (default 0) on the user
and tool turns, 0 on the system turn), and minimises the weighted mean of -log p
(``sft/loss.py``; each batch cut after its last trained token, rounded up to
``data.sft_bucket``: the same loss without the trailing padding) with the trainer RL uses too
(``trainer.Trainer``: the same sharding, donation, accumulation, clip + AdamW; ``sft.*`` sets
the optimizer). Writes ``<workdir>/sft/metrics.jsonl`` (+ TensorBoard; the SFT curve) and an
orbax checkpoint in ``<workdir>/sft/checkpoints`` holding the state and the data position, every
``sft.checkpoint_every`` updates and at the end: a rerun resumes from the newest, and a finished
SFT stage is just read back (the pipeline's RL stage and the evaluation's starting policy both
start from it).

``sft.first_turn_steps`` > 0: the first updates train on ``sft.first_turn_rows`` conversations of
at most ``sft.first_turn_seq_len`` tokens, each cut after its first assistant turn, the rest on
whole conversations (the learning-rate schedule spans all ``sft.steps``). The first turn is
where the policy must copy the query's city, places and dates into its calls. In a whole row a
small model trained from scratch spends its updates on the long answers that copy tool results
a few lines up, and it learns to read the query last. Short rows put eight times as many
query-to-call copies into an update of about the same cost (benchmarks/README.md, Quickstart).
``sft.first_turn_every`` = k > 0 makes every k-th later update a first-turn one again: without
it, the whole rows that follow can unlearn the copy the phase taught.
"""
from __future__ import annotations

import os
import time
from typing import Any

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from arenarl_jax import checkpoint as ckpt_lib
from arenarl_jax import hosts, metrics as metrics_lib
from arenarl_jax.data import builder, pipeline, records
from arenarl_jax.envs import compact_schemas
from arenarl_jax.models import backend
from arenarl_jax.sft import adapter, delta, induction, loss as sft_loss
from arenarl_jax.sft.policy import Policy
from arenarl_jax.sft.settings import SftSettings
from arenarl_jax.trainer import Trainer, make_optimizer

SFT_DIR = "sft"


def dataset_path(data: Any, env: Any) -> str:
  """The run's built dataset, built on first use: ``data`` is the ``DataSettings`` and ``env``
  the ``env`` config section (``builder.make_source_config``)."""
  return builder.build(builder.make_source_config(data, env), data.dir or None)


def trainable(s: SftSettings, params) -> Any:
  """What SFT updates: the model's parameters, or with ``sft.adapter_rank`` > 0 the adapter's
  starting tensors for them (``sft/adapter.py``)."""
  if int(s.adapter_rank) <= 0:
    return params
  if int(s.induction_steps) > 0:
    raise ValueError("sft.adapter_rank > 0 with sft.induction_steps > 0: the induction drills "
                     "change the base the adapter is stored against; use one or the other")
  return adapter.init(delta.flat_params(params), int(s.adapter_rank), int(s.data.seed))


def make_trainer(s: SftSettings, graphdef, params, mesh: Mesh) -> Trainer:
  """The SFT stage's trainer: the SFT loss and ``sft.*``'s optimizer over ``sft.steps``; with an
  adapter its state holds the adapter's tensors and its reference slot the frozen ``params``."""
  loss = sft_loss.make_sft_loss()
  train = trainable(s, params)
  if train is not params:
    loss = adapter.make_loss(loss)
  return Trainer(graphdef, train, mesh, loss, make_optimizer(s.optim(), int(s.steps)),
                 accumulation_steps=s.accumulation_steps, chunk=s.logprob_chunk,
                 remat=s.remat, ref_shape=params if train is not params else None)


def _frozen(trainer: Trainer, params):
  """The step's reference argument: the frozen base under an adapter, else None."""
  return jax.device_put(params, trainer.ref_shardings) if trainer.loss.uses_reference else None


def phase_at(step: int, copy_steps: int, first_steps: int, every: int) -> str:
  """Which rows update ``step`` (0-based) trains on: "copy" (the drills), "first_turn" or
  "whole"; after the first two phases every ``every``-th update is a first-turn one (0: none)."""
  if step < copy_steps:
    return "copy"
  after = step - copy_steps - first_steps  # updates since the first-turn phase ended
  if after < 0 or (every > 0 and after % every == every - 1):
    return "first_turn"
  return "whole"


def copy_batch(env: Any, tokenizer: Any, tools, s: SftSettings, *, seed: int,
               step: int) -> dict[str, Any]:
  """This host's rows of copy-phase update ``step``: ``sft.copy_rows`` (global) drills of the
  environment (``copy_drill``) rendered like SFT rows, ``sft.copy_seq_len`` tokens each. A
  function of (seed, step, host) alone, so a resumed run draws the same rows."""
  rows = pipeline.local_batch_size(int(s.copy_rows), jax.process_count())
  features = pipeline.SFTFeatures(tokenizer, seq_len=int(s.copy_seq_len), tools=tools,
                                  reasoning=s.reasoning)
  rng = np.random.default_rng([seed, step, jax.process_index()])
  out = [features(records.Example(task_id=f"copy/{step}/{k}", env=env.name, subtask="copy",
                                  query="", messages=tuple(env.copy_drill(rng))))
         for k in range(rows)]
  return {"tokens_NT": np.stack([r["tokens_T"] for r in out]),
          "loss_mask_NT": np.stack([r["loss_mask_T"] for r in out])}


def has_checkpoint(workdir: str) -> bool:
  """Whether ``workdir`` holds a finished or partial SFT checkpoint."""
  return os.path.isdir(os.path.join(workdir, SFT_DIR, "checkpoints"))


def run(s: SftSettings, workdir: str, policy: Policy, env: Any, *, mesh: Mesh, data_path: str,
        schemas: str = "full"):
  """Trains ``sft.steps`` updates from ``policy.model`` on the run's ``mesh`` (resuming
  ``<workdir>/sft``) with the ``sft`` split of the dataset at ``data_path`` rendered with the
  tools as ``schemas`` (``env.schemas``) shows them; returns the parameters (a pure dict,
  placed by the partition rules) and the last step's metrics."""
  if s.steps <= 0:
    raise ValueError("sft.steps must be > 0 to run the SFT stage")
  out_dir = os.path.join(workdir, SFT_DIR)
  graphdef, params = nnx.split(policy.model)
  params = nnx.to_pure_dict(params)
  if not has_checkpoint(workdir):  # a resumed stage's parameters come from its checkpoint
    params, _ = induction.run(s, graphdef, params, mesh, policy.tokenizer,
                              policy.cfg.vocab_size, os.path.join(workdir, induction.DRILL_DIR))
  trainer = make_trainer(s, graphdef, params, mesh)
  state = trainer.init_state(trainable(s, params))
  frozen = _frozen(trainer, params)
  del params

  source = builder.data_source(data_path, "sft")
  tools = compact_schemas.tool_source(env, schemas).tools()
  copy_steps, first_steps = int(s.copy_steps), int(s.first_turn_steps)
  every = int(s.first_turn_every)
  if every < 0:
    raise ValueError(f"sft.first_turn_every={every} must be >= 0")
  if copy_steps < 0 or not 0 <= copy_steps + first_steps <= int(s.steps):
    raise ValueError(f"sft.copy_steps={copy_steps} + sft.first_turn_steps={first_steps} must be "
                     f"in [0, sft.steps={s.steps}]")
  if copy_steps and not hasattr(env, "copy_drill"):
    raise ValueError(f"sft.copy_steps={copy_steps}: environment {env.name!r} has no copy_drill()")
  groups = env.name_groups() if hasattr(env, "name_groups") else None
  iterators = {phase: iter(pipeline.sft_batches_for(
      s.data, s, source, tokenizer=policy.tokenizer, tools=tools,
      first_turn=phase == "first_turn", name_groups=groups))
               for phase in (("first_turn",) if first_steps or every else ()) + ("whole",)}

  def batch_at(step: int):
    phase = phase_at(step, copy_steps, first_steps, every)
    if phase == "copy":
      return copy_batch(env, policy.tokenizer, tools, s, seed=int(s.data.seed), step=step)
    return next(iterators[phase])

  every_save = int(s.checkpoint_every)
  if every_save < 0:
    raise ValueError(f"sft.checkpoint_every={every_save} must be >= 0 (0: only at the end)")
  checkpointer = ckpt_lib.Checkpointer(os.path.join(out_dir, "checkpoints"),
                                       every=every_save or max(int(s.steps), 1), keep=1)

  def save(step: int):
    checkpointer.save(step, state, {
        "step": step, "data": {phase: pipeline.position(it) for phase, it in iterators.items()}})

  start = 0
  latest = checkpointer.latest_step()
  if latest is not None:
    state, loop = checkpointer.restore(latest, state)
    start = int(loop["step"])
    saved = loop["data"] if "whole" in loop["data"] else {"whole": loop["data"]}  # one phase
    for phase, it in iterators.items():
      if phase in saved:
        pipeline.restore(it, saved[phase])
  writer = metrics_lib.MetricsWriter(out_dir, tensorboard=s.metrics.tensorboard,
                                     jsonl=s.metrics.jsonl, resume_step=start)
  bar = metrics_lib.progress(int(s.steps), desc="sft steps", initial=start,
                             enabled=s.metrics.progress and jax.process_index() == 0)
  last: dict[str, float] = {}
  try:
    t_log, tokens_since = time.perf_counter(), 0.0
    for step in range(start, int(s.steps)):
      local = batch_at(step)
      # Every host cuts its rows to the same width: the global batch has one shape.
      t = hosts.global_max(pipeline.trained_width(local["loss_mask_NT"],
                                                  int(s.data.sft_bucket)))
      batch = trainer.put_batch(pipeline.cut(local, t))
      state, m = trainer.step(state, frozen, batch)
      tokens_since += float((local["loss_mask_NT"] == 1).sum())
      done = step + 1
      if done % max(int(s.log_every), 1) == 0 or done == int(s.steps):
        m = jax.device_get(m)
        elapsed = time.perf_counter() - t_log
        last = writer.write(done, {**m, "optimizer_step": int(state.step),
                                   "time/step_s": elapsed / max(int(s.log_every), 1),
                                   "assistant_tokens_s": tokens_since / max(elapsed, 1e-9)})
        bar.set_postfix(loss=f"{last['loss']:.3f}")
        # The dispatched updates are done here: hand back the pages that other batch widths'
        # temporaries left, or the retained heap keeps every width's (models/cpu/allocator.py).
        backend.release_host_memory()
        t_log, tokens_since = time.perf_counter(), 0.0
      if checkpointer.due(done):
        save(done)
      bar.update(1)
    save(int(s.steps))  # Checkpointer.save skips a step already saved
  finally:
    bar.close()
    writer.close()
    checkpointer.close()
  if frozen is not None:
    return adapter.weights(frozen, state.params), last
  return state.params, last


def restore_params(s: SftSettings, workdir: str, policy: Policy, mesh: Mesh):
  """The finished SFT stage's parameters from ``<workdir>/sft/checkpoints`` (pure dict), placed
  on the run's ``mesh``; ``policy.model`` holds the weights SFT began from (an adapter's base)."""
  base = nnx.to_pure_dict(nnx.state(policy.model))
  tensors = restore_trained(s, workdir, policy, mesh)
  return adapter.weights(base, tensors) if int(s.adapter_rank) > 0 else tensors


def restore_trained(s: SftSettings, workdir: str, policy: Policy, mesh: Mesh):
  """What the finished SFT stage trained (``trainable``): the parameters, or the adapter's
  tensors (flat, by ``sft/delta.py``'s names)."""
  graphdef, params = nnx.split(policy.model)
  trainer = make_trainer(s, graphdef, nnx.to_pure_dict(params), mesh)
  state = trainer.init_state(trainable(s, nnx.to_pure_dict(params)))
  checkpointer = ckpt_lib.Checkpointer(os.path.join(workdir, SFT_DIR, "checkpoints"),
                                       every=1, keep=1)
  try:
    latest = checkpointer.latest_step()
    if latest is None or latest < int(s.steps):
      raise FileNotFoundError(f"{workdir}/{SFT_DIR}/checkpoints: no finished SFT checkpoint "
                              f"(sft.steps={s.steps}; newest: {latest})")
    state, _ = checkpointer.restore(latest, state)
  finally:
    checkpointer.close()
  return state.params
