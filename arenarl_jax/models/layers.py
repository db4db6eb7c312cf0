"""Small building blocks: RMSNorm, a bias-optional linear layer, the SwiGLU MLP."""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from arenarl_jax.models import backend


class RMSNorm(nnx.Module):
  """y = x / rms(x) * scale, computed in float32 (as the reference does) and cast back.

  ``out_dtype``: the output's dtype (default: the input's). The blocks' norms output the model's
  compute dtype, so the residual stream stays in the parameters' dtype (float32) while the
  attention and MLP inputs are in the compute dtype (bf16 on accelerators)."""

  def __init__(self, dim: int, eps: float, dtype, out_dtype=None):
    self.scale = nnx.Param(jnp.ones((dim,), dtype))
    self.eps = eps
    self.out_dtype = None if out_dtype is None else jnp.dtype(out_dtype)

  def __call__(self, x, axis: int = -1):
    """Normalises over ``axis`` (the features; 0 for feature-major activations [D, N])."""
    x32 = x.astype(jnp.float32)
    y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=axis, keepdims=True) + self.eps)
    shape = [1] * x.ndim
    shape[axis] = -1
    y = y * self.scale[...].astype(jnp.float32).reshape(shape)
    return y.astype(self.out_dtype or x.dtype)


class Linear(nnx.Module):
  """x @ kernel (+ bias); kernel stored [in, out] (HF stores [out, in]: loaders transpose).

  The parameters keep their own dtype (float32 masters) and are cast to the input's dtype at use:
  the input's dtype is the model's compute dtype, set by the norm in front (``RMSNorm.out_dtype``)."""

  def __init__(self, d_in: int, d_out: int, *, bias: bool, dtype, rngs: nnx.Rngs):
    init = jax.random.normal(rngs.params(), (d_in, d_out), jnp.float32) * (d_in ** -0.5)
    self.kernel = nnx.Param(init.astype(dtype))
    self.bias = nnx.Param(jnp.zeros((d_out,), dtype)) if bias else None

  def __call__(self, x):
    """In ``x``'s dtype (the compute dtype): the parameters are cast at use."""
    y = backend.current().dense(x, self.kernel[...].astype(x.dtype))
    return y + self.bias[...].astype(y.dtype) if self.bias is not None else y


class MLP(nnx.Module):
  """SwiGLU: down(silu(gate(x)) * up(x))."""

  def __init__(self, d_model: int, ffn_dim: int, *, dtype, rngs: nnx.Rngs):
    self.gate = Linear(d_model, ffn_dim, bias=False, dtype=dtype, rngs=rngs)
    self.up = Linear(d_model, ffn_dim, bias=False, dtype=dtype, rngs=rngs)
    self.down = Linear(ffn_dim, d_model, bias=False, dtype=dtype, rngs=rngs)

  def __call__(self, x):
    return self.down(jax.nn.silu(self.gate(x)) * self.up(x))
