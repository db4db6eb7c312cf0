"""The RL update: a pure, jitted, sharded optimizer step over one minibatch of the training batch.

``train_step(state, ref_params, batch) -> (state, metrics)``:
  - the batch (ARCHITECTURE.md "Training batch", plus ``old_logp_NT`` from ``Trainer.logprobs``
    taken before the rollout's first update) is split into ``accumulation_steps`` micro-batches
    (row r goes to micro-batch r % A, so each one spans every device); gradients and the loss are
    SUMS over micro-batches of terms already divided by batch-wide normalisers, so the update is
    the same however the batch is split (micro-batches, accumulation, devices);
  - ``ref_logp`` comes from the frozen ``ref_params`` (never donated) at each row's temperature;
  - the token ratio's objective and SFT's are sums of per-token terms, so the head's gradients
    are formed in the forward pass (``models/loss_head.py``; no logits recomputed); the sequence
    ratio's loss is differentiated through the checkpointed log-probs;
  - clip-by-global-norm + AdamW with a schedule.
``Trainer`` holds the jitted functions for a mesh: parameters and optimizer state placed by the
partition rules (``sharding.py``), the batch's rows over data x fsdp, the state donated. The new
parameters stay on device (``state.params``), where the sampler reads them.
"""
from __future__ import annotations

import functools
from typing import Any, Mapping

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from arenarl_jax import sharding
from arenarl_jax.rl import losses
from arenarl_jax.models import backend, loss_head, remat as remat_lib
from arenarl_jax.models.logprobs import token_logprobs
from arenarl_jax.models.transformer import set_remat

BATCH_KEYS = ("tokens_NT", "loss_mask_NT", "advantages_N", "temperature_N", "sampler_logp_NT",
              "policy_step_N")
ROW_AXES = ("data", "fsdp")  # the batch's rows are split over both
OBJECTIVES = ("rl", "sft")  # the clipped policy loss | masked token cross-entropy (SFT)


@flax.struct.dataclass
class TrainState:
  step: jax.Array  # int32: optimizer updates applied
  params: Any  # pure dict of arrays (nnx.to_pure_dict of the model's state)
  opt_state: Any


def make_schedule(optim: Mapping[str, Any], total_steps: int) -> optax.Schedule:
  """``optim.schedule`` in {constant, linear, cosine}, after ``optim.warmup_steps`` of linear warmup."""
  lr, warm = float(optim["lr"]), int(optim.get("warmup_steps", 0))
  kind = optim.get("schedule", "constant")
  decay = max(int(total_steps) - warm, 1)
  if kind == "constant":
    after = optax.constant_schedule(lr)
  elif kind == "linear":
    after = optax.linear_schedule(lr, 0.0, decay)
  elif kind == "cosine":
    after = optax.cosine_decay_schedule(lr, decay)
  else:
    raise ValueError(f"optim.schedule: unknown value {kind!r}; expected constant, linear, cosine")
  if warm <= 0:
    return after
  return optax.join_schedules([optax.linear_schedule(0.0, lr, warm), after], [warm])


def make_optimizer(optim: Mapping[str, Any], total_steps: int) -> optax.GradientTransformation:
  """Clip by global norm (``optim.grad_clip``; <= 0 disables) then AdamW."""
  adamw = optax.adamw(make_schedule(optim, total_steps), b1=float(optim["b1"]),
                      b2=float(optim["b2"]), weight_decay=float(optim["weight_decay"]))
  clip = float(optim["grad_clip"])
  return optax.chain(optax.clip_by_global_norm(clip), adamw) if clip > 0 else adamw


def _model(graphdef, params, remat: str | None):
  model = nnx.merge(graphdef, nnx.State(params))
  if remat is not None:
    set_remat(model, remat)
  return model


def batch_logprobs(graphdef, params, batch, *, chunk: int, entropy: bool = False,
                   remat: str | None = None):
  """Teacher-forced log-probs of ``batch["tokens_NT"]`` at each row's temperature.

  ``remat``: the blocks' rematerialisation (``model.remat``; None: the graph definition's)."""
  return token_logprobs(_model(graphdef, params, remat), batch["tokens_NT"], chunk=chunk,
                        temperature=batch["temperature_N"], return_entropy=entropy)


def fused_objective(graphdef, params, batch, token_loss, extras, *, chunk: int,
                    remat: str | None = None):
  """(objective, logp_NT, entropy_NT) by the fused head (``models/loss_head.py``) when the model
  has the plain head, else objective None and the log-probs of ``batch_logprobs``: the caller
  then differentiates its loss through them. ``token_loss`` and ``extras`` as the fused head
  takes them."""
  model = _model(graphdef, params, remat)
  if not loss_head.supports(model):
    return (None, *token_logprobs(model, batch["tokens_NT"], chunk=chunk,
                                  temperature=batch["temperature_N"], return_entropy=True))
  return loss_head.fused_token_loss(model, batch["tokens_NT"], token_loss, extras, chunk=chunk,
                                    temperature=batch["temperature_N"])


def _with_gradient_of(loss, objective):
  """``loss``'s value with ``objective``'s gradient (the same function of the parameters; the
  fused pass leaves out position 0's constant term)."""
  if objective is None:
    return loss
  return objective + jax.lax.stop_gradient(loss - objective)


def _split_micro(batch, a: int):
  """[N, ...] -> [A, N / A, ...] with row r in micro-batch r % A."""
  def one(x):
    n = x.shape[0]
    if n % a:
      raise ValueError(f"train_step: {n} rows do not split into rl.accumulation_steps={a}")
    return jnp.moveaxis(x.reshape(n // a, a, *x.shape[1:]), 1, 0)
  return jax.tree.map(one, batch)


def batch_loss(params, ref_params, batch: Mapping[str, jax.Array], norm, *, graphdef,
               loss_cfg: losses.LossConfig, chunk: int = 64, remat: str | None = None):
  """(loss, metrics) of ``batch`` (a part of a minibatch whose normalisers are ``norm``).

  ``old_logp_NT`` from the batch when present, else the current log-probs (on-policy: ratio 1);
  ``ref_logp`` from ``ref_params`` (skipped when ``loss.kl_coef`` is 0). The token ratio's
  objective is per-token, so its gradient comes from the fused head; the sequence ratio's from
  the log-probs.
  """
  mask_NT = batch["loss_mask_NT"].astype(jnp.float32)
  ref_NT = None
  if loss_cfg.kl_coef:
    ref_NT = jax.lax.stop_gradient(batch_logprobs(graphdef, ref_params, batch, chunk=chunk))
  if loss_cfg.ratio == "token":
    adv_NT = jnp.broadcast_to(batch["advantages_N"].astype(jnp.float32)[:, None], mask_NT.shape)
    extras = {"weight": losses.token_weights(mask_NT, norm, loss_cfg), "mask": mask_NT,
              "advantage": adv_NT}
    if "old_logp_NT" in batch:
      extras["old_logp"] = batch["old_logp_NT"]
    if ref_NT is not None:
      extras["ref_logp"] = ref_NT
    objective, logp_NT, ent_NT = fused_objective(
        graphdef, params, batch, functools.partial(losses.token_objective, cfg=loss_cfg), extras,
        chunk=chunk, remat=remat)
  else:
    objective = None
    logp_NT, ent_NT = batch_logprobs(graphdef, params, batch, chunk=chunk, entropy=True,
                                     remat=remat)
  old_NT = batch["old_logp_NT"] if "old_logp_NT" in batch else jax.lax.stop_gradient(logp_NT)
  ref_NT = jax.lax.stop_gradient(logp_NT) if ref_NT is None else ref_NT
  loss, metrics = losses.policy_loss(logp_NT, old_NT, ref_NT, batch["advantages_N"],
                                     batch["loss_mask_NT"], norm, loss_cfg, ent_NT)
  loss = _with_gradient_of(loss, objective)
  # The sampler's log-probs against the trainer's (same temperature): should be ~0.
  gap_NT = jnp.abs(batch["sampler_logp_NT"] - old_NT) * mask_NT
  metrics["logp_mismatch_sum"] = jnp.sum(gap_NT) / norm["tokens"]
  metrics["logp_mismatch_max"] = jnp.max(gap_NT)
  return loss, metrics


def sft_batch_loss(params, batch: Mapping[str, jax.Array], norm, *, graphdef, chunk: int = 64,
                   remat: str | None = None):
  """(loss, metrics) of SFT on ``batch`` (a part of a minibatch whose normalisers are ``norm``),
  its gradient from the fused head."""
  weight_NT = batch["loss_mask_NT"].astype(jnp.float32) / norm["tokens"]
  objective, logp_NT, ent_NT = fused_objective(
      graphdef, params, batch, losses.sft_token_objective, {"weight": weight_NT}, chunk=chunk,
      remat=remat)
  loss, metrics = losses.sft_loss(logp_NT, batch["loss_mask_NT"], norm, ent_NT)
  return _with_gradient_of(loss, objective), metrics


def train_step(state: TrainState, ref_params, batch: Mapping[str, jax.Array], *, graphdef,
               loss_cfg: losses.LossConfig, optimizer: optax.GradientTransformation,
               accumulation_steps: int = 1, chunk: int = 64,
               rows: NamedSharding | None = None,
               objective: str = "rl", remat: str | None = None) -> tuple[TrainState, dict]:
  """One optimizer update on ``batch`` (see the module docstring); metrics are batch-wide.

  ``objective="sft"`` replaces the policy loss by the masked mean token cross-entropy
  (``losses.sft_loss``; the batch needs only tokens_NT, loss_mask_NT and temperature_N, and
  ``ref_params`` is unused). ``remat``: the blocks' rematerialisation in the differentiated pass
  (``model.remat``; None: the graph definition's)."""
  mask_NT = batch["loss_mask_NT"].astype(jnp.float32)
  norm = losses.normalisers(mask_NT)  # over the whole minibatch: every micro-batch divides by it

  def part(params, mb):
    if rows is not None:
      mb = jax.lax.with_sharding_constraint(mb, rows)
    if objective == "sft":
      return sft_batch_loss(params, mb, norm, graphdef=graphdef, chunk=chunk, remat=remat)
    return batch_loss(params, ref_params, mb, norm, graphdef=graphdef, loss_cfg=loss_cfg,
                      chunk=chunk, remat=remat)

  grad_fn = jax.value_and_grad(part, has_aux=True)
  if accumulation_steps == 1:
    (_, metrics), grads = grad_fn(state.params, batch)
  else:
    micro = _split_micro(batch, accumulation_steps)
    shapes = jax.eval_shape(grad_fn, state.params, jax.tree.map(lambda x: x[0], micro))
    big = jnp.finfo(jnp.float32).max
    metrics0 = {k: jnp.full(v.shape, -big if k.endswith("_max") else big if k.endswith("_min")
                            else 0.0, v.dtype) for k, v in shapes[0][1].items()}
    grads0 = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), shapes[1])

    def body(carry, mb):
      grads, metrics = carry
      (_, m), g = grad_fn(state.params, mb)
      return (jax.tree.map(jnp.add, grads, g), losses.combine_metrics(metrics, m)), None

    (grads, metrics), _ = jax.lax.scan(body, (grads0, metrics0), micro)

  updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
  params = optax.apply_updates(state.params, updates)
  metrics = losses.finish_metrics(metrics)
  metrics["grad_norm"] = optax.tree.norm(grads)
  metrics["update_norm"] = optax.tree.norm(updates)
  metrics["tokens"] = norm["tokens"]
  return TrainState(step=state.step + 1, params=params, opt_state=opt_state), metrics


class Trainer:
  """The jitted update and teacher-forced pass for one model, mesh and loss (holder of jit fns).

  ``remat`` (``model.remat``, ``models/remat.py``): how the update's differentiated forward
  rematerialises each block; the no-grad ``logprobs`` pass and the reference pass are unaffected."""

  def __init__(self, graphdef, params_shape, mesh: Mesh, loss_cfg: losses.LossConfig,
               optimizer: optax.GradientTransformation, *, accumulation_steps: int = 1,
               chunk: int = 64, objective: str = "rl", remat: str = remat_lib.TRAINING_DEFAULT):
    if objective not in OBJECTIVES:
      raise ValueError(f"Trainer: objective {objective!r} is not one of {OBJECTIVES}")
    self.remat = remat_lib.check(remat)
    self.graphdef, self.mesh, self.optimizer = graphdef, mesh, optimizer
    self.accumulation_steps = int(accumulation_steps)
    self.rows = NamedSharding(mesh, P(ROW_AXES))
    self.param_shardings = sharding.param_shardings(params_shape, mesh)
    opt_shape = jax.eval_shape(optimizer.init, params_shape)
    self.state_shardings = TrainState(step=sharding.replicated(mesh),
                                      params=self.param_shardings,
                                      opt_state=sharding.param_shardings(opt_shape, mesh))
    step = functools.partial(train_step, graphdef=graphdef, loss_cfg=loss_cfg,
                             optimizer=optimizer, accumulation_steps=self.accumulation_steps,
                             chunk=chunk, rows=self.rows, objective=objective, remat=remat)
    # SFT reads no reference: its step takes ref_params=None (no second copy of the weights).
    ref_shardings = self.param_shardings if objective == "rl" else None
    # Both compile with the backend's training options (on CPU: Eigen's products).
    self.step = backend.jit(
        step, kind=backend.TRAINING,
        in_shardings=(self.state_shardings, ref_shardings, self.rows),
        out_shardings=(self.state_shardings, sharding.replicated(mesh)), donate_argnums=0)
    self.logprobs = backend.jit(
        functools.partial(batch_logprobs, graphdef, chunk=chunk), kind=backend.TRAINING,
        in_shardings=(self.param_shardings, self.rows), out_shardings=self.rows)
    self._copy = jax.jit(lambda p: jax.tree.map(jnp.copy, p),
                         out_shardings=self.param_shardings)

  def place_params(self, params):
    """A fresh copy of ``params`` in the partition rules' shardings (e.g. the frozen reference)."""
    return self._copy(params)

  def init_state(self, params) -> TrainState:
    params = self.place_params(params)  # own buffers: the state is donated, the source is not
    opt_state = jax.jit(self.optimizer.init,
                        out_shardings=self.state_shardings.opt_state)(params)
    return TrainState(step=jax.device_put(jnp.zeros((), jnp.int32), self.state_shardings.step),
                      params=params, opt_state=opt_state)

  def put_batch(self, local: Mapping[str, np.ndarray]) -> dict[str, jax.Array]:
    """This process's rows -> global arrays with rows over data x fsdp (one host: device_put)."""
    out = {}
    for key, value in local.items():
      value = np.asarray(value)
      out[key] = jax.make_array_from_process_local_data(self.rows, value)
    n, shards = out["tokens_NT"].shape[0], self.mesh.shape["data"] * self.mesh.shape["fsdp"]
    if n % (shards * self.accumulation_steps):
      raise ValueError(f"train batch: {n} rows must split into data x fsdp = {shards} shards times "
                       f"rl.accumulation_steps={self.accumulation_steps}")
    return out
