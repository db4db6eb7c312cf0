"""The dense products of the model with their backward written out: ``dense`` (x @ w) and
``dense_t`` (x @ w^T, the tied head against the [V, D] embedding).

Why: automatic differentiation of ``x @ w`` states the weight gradient as a product whose operand
order makes XLA:CPU materialise the transpose of the [tokens, out] output gradient, fused into the
element-wise producer before it (SwiGLU's backward), which writes it with a strided, slow loop:
one extra pass over every large output gradient of the step (see benchmarks/README.md, Train
step). Here the weight gradient is one product of the flattened input and output gradient
contracted over their leading (token) axis, dW = x^T g, which every backend's dot takes without a
copy of either large operand, and the input gradient is g w^T. The values are those of autodiff
(tested). These are the CPU backend's products; ``plain_dense``/``plain_dense_t`` are the same
products with autodiff's own backward, the other backends' (``models/backend.py`` chooses).

bfloat16 inputs accumulate in float32 and are rounded to bfloat16 after the product: a product
whose output is bfloat16 misses the CPU's bfloat16 matrix units (AMX), which accumulate in
float32; one with float32 output runs on them (benchmarks/README.md, "Per instruction set").
Float32 products are unchanged.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

# The products' outputs carry this name in a differentiated pass, so a remat policy can keep them
# (models/remat.py): a custom_vjp's inner dots are not visible to the dot-based policies.
OUT_NAME = "dense_out"


def _flat(a):
  return a.reshape(-1, a.shape[-1])


def accumulation_dtype(dtype):
  """The dtype a product of ``dtype`` inputs accumulates and is written in: float32 for
  bfloat16 (the matrix units' own accumulation), else ``dtype``."""
  return jnp.float32 if jnp.dtype(dtype) == jnp.bfloat16 else dtype


def _product(a, b, dims, out_dtype):
  """``dot_general`` accumulated in ``accumulation_dtype`` and written in ``out_dtype``."""
  y = jax.lax.dot_general(a, b, (dims, ((), ())), preferred_element_type=accumulation_dtype(a.dtype))
  return y.astype(out_dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def dense(x, w, out_dtype=None):
  """x [..., I] @ w [I, O] -> [..., O] (``out_dtype``: the output dtype, default ``x``'s)."""
  return _product(x, w, ((x.ndim - 1,), (0,)), out_dtype or x.dtype)


def _dense_fwd(x, w, out_dtype):
  return checkpoint_name(dense(x, w, out_dtype), OUT_NAME), (x, w)


def _dense_bwd(out_dtype, res, g):
  del out_dtype
  x, w = res
  dx = _product(g.astype(x.dtype), w, ((g.ndim - 1,), (1,)), x.dtype)
  dw = _product(_flat(x), _flat(g).astype(x.dtype), ((0,), (0,)), w.dtype)
  return dx, dw


dense.defvjp(_dense_fwd, _dense_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def dense_t(x, w, out_dtype=None):
  """x [..., D] @ w^T for w [O, D] -> [..., O] (the tied head: w is the [V, D] embedding)."""
  return _product(x, w, ((x.ndim - 1,), (1,)), out_dtype or x.dtype)


def _dense_t_fwd(x, w, out_dtype):
  return checkpoint_name(dense_t(x, w, out_dtype), OUT_NAME), (x, w)


def _dense_t_bwd(out_dtype, res, g):
  del out_dtype
  x, w = res
  dx = _product(g.astype(x.dtype), w, ((g.ndim - 1,), (0,)), x.dtype)
  dw = _product(_flat(g).astype(x.dtype), _flat(x), ((0,), (0,)), w.dtype)
  return dx, dw


dense_t.defvjp(_dense_t_fwd, _dense_t_bwd)


def plain_dense(x, w, out_dtype=None):
  """``dense`` as jnp states it: autodiff's backward."""
  return jnp.matmul(x, w, preferred_element_type=out_dtype)


def plain_dense_t(x, w, out_dtype=None):
  """``dense_t`` as jnp states it: autodiff's backward."""
  return jnp.einsum("...d,od->...o", x, w, preferred_element_type=out_dtype)
