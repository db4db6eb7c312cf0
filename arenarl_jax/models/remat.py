"""Per-layer rematerialisation of the cache-less (training) forward: ``model.remat``.

Each block of a full-sequence pass without a KV cache (the training forward, teacher-forced
log-probs) can run under ``jax.checkpoint`` with one of these policies, which decide which of the
block's intermediate values the backward pass keeps and which it recomputes from the block's input:
- ``none``: no checkpoint; the backward keeps every intermediate (most memory, no recompute).
- ``full``: keeps nothing inside a block but its input (``nothing_saveable``): the backward reruns
  the whole block forward; least memory, about one extra forward of compute.
- ``dots``: keeps every matmul output (``checkpoint_dots``), including the attention scores and
  weighted values, and recomputes the element-wise work (norms, RoPE, SwiGLU, softmax).
- ``dots_no_batch``: keeps the weight matmuls' outputs (no batch dimensions:
  ``dots_with_no_batch_dims_saveable``) and recomputes the element-wise work; the reference
  attention's [N, K, T*R, T] scores are batched matmuls and are recomputed too. The training
  default: the attention probabilities are the largest per-layer buffers at long T.
Both dot policies also keep the outputs named by ``models/matmul.py`` (its products are custom_vjp
calls, invisible to the dot rules) and the output and log-normaliser of ``causal_blocks`` attention
(the ``cpu_kernel`` training attention), whose backward needs nothing else: the size of the
queries per layer instead of a second attention forward.

The choice is static (an attribute of the model, part of its graph definition; ``set_remat``), so
every program compiles once with it. Decode, chunk and branch passes against a KV cache never
take it: their programs are the same whatever ``model.remat`` says. In a pass that is not
differentiated a checkpoint is inlined, so it costs nothing there.
"""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
from flax import nnx

from arenarl_jax.models import causal_blocks, matmul
from arenarl_jax.models.settings import REMAT_CHOICES as CHOICES
from arenarl_jax.models.settings import REMAT_TRAINING_DEFAULT as TRAINING_DEFAULT  # noqa: F401

_cp = jax.checkpoint_policies
# The partial policies also keep the weight products of models/matmul.py (custom_vjp: their dots
# are hidden from the dot policies) and causal_blocks' attention output and log-normaliser (the
# size of the queries), so its backward never reruns the attention forward.
_NAMED = _cp.save_only_these_names(matmul.OUT_NAME, causal_blocks.OUT_NAME, causal_blocks.LSE_NAME)
_POLICIES: dict[str, Callable | None] = {
    "full": _cp.nothing_saveable,
    "dots": _cp.save_from_both_policies(_cp.checkpoint_dots, _NAMED),
    "dots_no_batch": _cp.save_from_both_policies(_cp.dots_with_no_batch_dims_saveable, _NAMED),
}


def check(name: str, where: str = "model.remat") -> str:
  """``name`` if it is a known choice, else a ValueError naming ``where``."""
  if name not in CHOICES:
    raise ValueError(f"{where} must be one of {CHOICES}, got {name!r}")
  return name


def policy(name: str):
  """The ``jax.checkpoint`` policy of ``name`` (``none`` has none: it is not checkpointed)."""
  check(name)
  if name == "none":
    raise ValueError("model.remat='none' has no checkpoint policy")
  return _POLICIES[name]


def checkpointed(module: nnx.Module, name: str, fn: Callable, *args,
                 after_cotangent: bool = True):
  """``fn(module, *args)`` under ``jax.checkpoint`` with ``name``'s policy (``none``: plain call).

  The module is split into its graph definition and state, so its parameters are explicit inputs
  of the checkpoint and their gradients flow through it; ``args`` are pytrees of arrays. With
  ``after_cotangent`` (the CPU backend's choice, ``models/backend.py``) the recomputation is
  tied to the block's output cotangent (``_after_cotangent``); without, it is plain
  ``jax.checkpoint``."""
  if check(name) == "none":
    return fn(module, *args)
  graphdef, state = nnx.split(module)

  def pure(state, *args):
    return fn(nnx.merge(graphdef, state), *args)

  checkpoint = jax.checkpoint(pure, policy=_POLICIES[name])
  return (_after_cotangent(checkpoint) if after_cotangent else checkpoint)(state, *args)


def _after_cotangent(f: Callable) -> Callable:
  """``f`` whose backward cannot start recomputing before its output's cotangent exists.

  ``jax.checkpoint`` keeps the recomputation after the cotangent with an optimization barrier,
  but XLA's CPU pipeline expands the barriers before it schedules, and its scheduler then hoists
  every block's recomputation into the forward pass, where all of them are alive at once (the
  memory of no remat at all). Here the backward first adds ``0 * (one element of the cotangent)``
  to every floating residual, a true data dependency no pass removes (x * 0 is not folded for
  floats), so each block's recomputation runs in its own turn on every backend. The cost is one
  elementwise copy of the residuals. A NaN or infinite cotangent element makes the gradients NaN,
  as they would be anyway."""

  @jax.custom_vjp
  def run(*primals):
    return f(*primals)

  def fwd(*primals):
    return jax.vjp(f, *primals)  # the pullback is a pytree whose leaves are the residuals

  def bwd(pullback, ct):
    zero = jax.tree.leaves(ct)[0].ravel()[0] * 0

    def tie(r):
      return r + zero.astype(r.dtype) if jnp.issubdtype(r.dtype, jnp.floating) else r

    return jax.tree.map(tie, pullback)(ct)

  run.defvjp(fwd, bwd)
  return run
