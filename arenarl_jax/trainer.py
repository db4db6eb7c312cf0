"""One trainer for SFT and RL: a jitted, sharded optimizer step that takes its loss as a function.

``train_step(state, ref_params, batch) -> (state, metrics)``:
  - the batch (tokens_NT, loss_mask_NT, temperature_N and what the loss reads) is split into
    ``accumulation_steps`` micro-batches (row r goes to micro-batch r % A, so each one spans every
    device); a micro-batch's loss is a SUM of terms already divided by the minibatch's
    ``normalisers``, so the update is the same however the batch is split;
  - the ``Loss`` reads the model through ``Forward``: teacher-forced log-probs, or a sum of
    per-token terms whose head gradients the fused head forms in the forward pass
    (``models/loss_head.py``); a loss that ``uses_reference`` also reads the frozen ``ref_params``;
  - clip-by-global-norm + AdamW with a schedule.
``Trainer`` holds the jitted functions for a mesh: parameters and optimizer state placed by the
partition rules (``sharding.py``), rows over data x fsdp, the state donated; the new parameters
stay on device (``state.params``), where the sampler reads them.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Mapping

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from arenarl_jax import sharding
from arenarl_jax.models import backend, loss_head, remat as remat_lib
from arenarl_jax.models.logprobs import token_logprobs
from arenarl_jax.models.transformer import set_remat

ROW_AXES = ("data", "fsdp")  # the batch's rows are split over both


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


def normalisers(mask_NT) -> dict[str, jax.Array]:
  """Batch-wide counts every weight divides by: masked tokens and rows with any masked token.

  Computed over the WHOLE minibatch (all micro-batches, all devices) and passed to each part.
  """
  mask_NT = mask_NT.astype(jnp.float32)
  return {"tokens": jnp.maximum(mask_NT.sum(), 1.0),
          "rows": jnp.maximum((mask_NT.sum(-1) > 0).sum().astype(jnp.float32), 1.0)}


def combine_metrics(a: Mapping[str, jax.Array], b: Mapping[str, jax.Array]) -> dict:
  """Adds two parts' metrics: max for ``*_max``, min for ``*_min``, sum otherwise."""
  out = {}
  for key in a:
    if key.endswith("_max"):
      out[key] = jnp.maximum(a[key], b[key])
    elif key.endswith("_min"):
      out[key] = jnp.minimum(a[key], b[key])
    else:
      out[key] = a[key] + b[key]
  return out


def finish_metrics(metrics: Mapping[str, jax.Array]) -> dict:
  """Drops the ``_sum`` suffix once every part is added (the sums are already the means)."""
  return {(k[:-4] if k.endswith("_sum") else k): v for k, v in metrics.items()}


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


def with_gradient_of(loss, objective):
  """``loss``'s value with ``objective``'s gradient (the same function of the parameters; the
  fused pass leaves out position 0's constant term). ``objective`` None: ``loss`` itself."""
  if objective is None:
    return loss
  return objective + jax.lax.stop_gradient(loss - objective)


@dataclasses.dataclass(frozen=True, eq=False)  # holds arrays: compared by identity
class Forward:
  """The model at one set of parameters, as a loss reads it: teacher-forced on the batch's
  tokens at each row's temperature, in log-prob chunks of ``chunk`` positions."""

  graphdef: Any
  params: Any
  chunk: int
  remat: str | None = None  # the blocks' rematerialisation (None: the graph definition's)

  def logprobs(self, batch, *, entropy: bool = False):
    """logp_NT, or (logp_NT, entropy_NT) with ``entropy`` (``batch_logprobs``)."""
    return batch_logprobs(self.graphdef, self.params, batch, chunk=self.chunk, entropy=entropy,
                          remat=self.remat)

  def fused_objective(self, batch, token_loss, extras):
    """(objective or None, logp_NT, entropy_NT) of ``fused_objective``."""
    return fused_objective(self.graphdef, self.params, batch, token_loss, extras,
                           chunk=self.chunk, remat=self.remat)


@dataclasses.dataclass(frozen=True)
class Loss:
  """What the trainer minimises: ``fn(policy, reference, batch, norm) -> (loss, metrics)``.

  ``policy`` is the ``Forward`` being differentiated, ``reference`` the frozen parameters' (None
  unless ``uses_reference``), ``batch`` one micro-batch and ``norm`` the minibatch's
  ``normalisers``. ``loss`` is this part's share of the minibatch's loss; metrics named
  ``*_sum`` add up over parts (their totals are reported without the suffix), ``*_max`` combine
  by max, ``*_min`` by min. ``name`` names the objective (``rl``, ``sft``)."""

  name: str
  fn: Callable[..., tuple[jax.Array, dict]]
  uses_reference: bool = False

  def __call__(self, policy: Forward, reference: Forward | None, batch, norm):
    return self.fn(policy, reference, batch, norm)


def _split_micro(batch, a: int):
  """[N, ...] -> [A, N / A, ...] with row r in micro-batch r % A."""
  def one(x):
    n = x.shape[0]
    if n % a:
      raise ValueError(f"train_step: {n} rows do not split into accumulation_steps={a}")
    return jnp.moveaxis(x.reshape(n // a, a, *x.shape[1:]), 1, 0)
  return jax.tree.map(one, batch)


def train_step(state: TrainState, ref_params, batch: Mapping[str, jax.Array], *, graphdef,
               loss: Loss, optimizer: optax.GradientTransformation,
               accumulation_steps: int = 1, chunk: int = 64,
               rows: NamedSharding | None = None,
               remat: str | None = None) -> tuple[TrainState, dict]:
  """One optimizer update of ``loss`` on ``batch`` (see the module docstring); metrics are
  batch-wide. ``ref_params``: the frozen reference when ``loss.uses_reference`` (else unread).
  ``remat``: the blocks' rematerialisation in the differentiated pass (``model.remat``; None:
  the graph definition's)."""
  mask_NT = batch["loss_mask_NT"].astype(jnp.float32)
  norm = normalisers(mask_NT)  # over the whole minibatch: every micro-batch divides by it
  reference = Forward(graphdef, ref_params, chunk) if loss.uses_reference else None

  def part(params, mb):
    if rows is not None:
      mb = jax.lax.with_sharding_constraint(mb, rows)
    return loss(Forward(graphdef, params, chunk, remat), reference, mb, norm)

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
      return (jax.tree.map(jnp.add, grads, g), combine_metrics(metrics, m)), None

    (grads, metrics), _ = jax.lax.scan(body, (grads0, metrics0), micro)

  updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
  params = optax.apply_updates(state.params, updates)
  metrics = finish_metrics(metrics)
  metrics["grad_norm"] = optax.tree.norm(grads)
  metrics["update_norm"] = optax.tree.norm(updates)
  metrics["tokens"] = norm["tokens"]
  return TrainState(step=state.step + 1, params=params, opt_state=opt_state), metrics


class Trainer:
  """The jitted update and teacher-forced pass for one model, mesh and loss (holder of jit fns).

  ``remat`` (``model.remat``, ``models/remat.py``): how the update's differentiated forward
  rematerialises each block; the no-grad ``logprobs`` pass and the reference pass are unaffected."""

  def __init__(self, graphdef, params_shape, mesh: Mesh, loss: Loss,
               optimizer: optax.GradientTransformation, *, accumulation_steps: int = 1,
               chunk: int = 64, remat: str = remat_lib.TRAINING_DEFAULT, ref_shape=None):
    self.remat = remat_lib.check(remat)
    self.graphdef, self.mesh, self.loss, self.optimizer = graphdef, mesh, loss, optimizer
    self.accumulation_steps = int(accumulation_steps)
    self.rows = NamedSharding(mesh, P(ROW_AXES))
    self.param_shardings = sharding.param_shardings(params_shape, mesh)
    opt_shape = jax.eval_shape(optimizer.init, params_shape)
    self.state_shardings = TrainState(step=sharding.replicated(mesh),
                                      params=self.param_shardings,
                                      opt_state=sharding.param_shardings(opt_shape, mesh))
    step = functools.partial(train_step, graphdef=graphdef, loss=loss, optimizer=optimizer,
                             accumulation_steps=self.accumulation_steps, chunk=chunk,
                             rows=self.rows, remat=remat)
    # A loss without a reference takes ref_params=None (no second copy of the weights). The
    # reference has the trained parameters' layout unless ``ref_shape`` says otherwise (an
    # adapter trains small tensors against a frozen base: ``sft/adapter.py``).
    ref_shardings = None
    if loss.uses_reference:
      ref_shardings = (self.param_shardings if ref_shape is None
                       else sharding.param_shardings(ref_shape, mesh))
    self.ref_shardings = ref_shardings
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
                       f"accumulation_steps={self.accumulation_steps}")
    return out
