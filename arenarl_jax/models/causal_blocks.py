"""Causal self-attention of a full sequence in query blocks that skip the masked keys (training).

The reference ``attend`` scores every query against every key and masks the upper triangle, so
half of its two products and of its softmax is thrown away. Here the T queries are split into
``blocks`` blocks of T / blocks; block i scores only the keys of blocks 0..i, so the work is
(blocks + 1) / (2 blocks) of the full square (0.56 at 8 blocks), and only the diagonal block of
keys has masked entries.

The backward is written out (``jax.custom_vjp``) in the flash-attention form: the forward keeps
only each query's output and log-normaliser (lse), and the backward recomputes each block's
probabilities from them, p = exp(s - lse), then dV = p^T dO, dP = dO V^T, dS = p (dP - rowsum(dO
* O)), dQ = dS K, dK = dS^T Q. Every [queries, keys] sized array appears only as the left operand
of a product or contracted over its leading dimension with a small [queries, F] operand, so no
large transpose is materialised (automatic differentiation of the masked softmax transposes
them). The blocks are independent programs, so a multi-threaded backend runs them side by side.

Shapes: queries [N, T, K, R, F] (R query heads per KV head, unscaled), keys and values
[N, T, K, F], ``mask_NT`` valid keys (or None); out [N, T, K, R, F]. Float32 softmax.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

OUT_NAME, LSE_NAME = "causal_attention_out", "causal_attention_lse"  # the kept residuals
MASKED = -1e30  # finite: a query whose keys are all masked averages instead of producing NaN


def block_count(t: int, target: int = 64) -> int:
  """The number of query blocks for T: the divisor of T whose blocks are closest to ``target``
  queries (fewer, larger blocks on a tie). Smaller blocks skip more of the masked square but make
  more, smaller products; the default 64 balances the two for SmolLM2's training shapes on CPU."""
  divisors = [b for b in range(1, t + 1) if t % b == 0]
  return min(divisors, key=lambda b: (abs(t // b - target), b))


def _visible(i: int, size: int, keep_K=None):
  """[N or 1, 1, size, 1, S] visibility of block i's queries over keys 0 .. S = (i + 1) * size:
  causal (only the last block of keys has hidden entries) and the keys' mask ``keep_K`` ([N, T]
  float, 1 = valid; or None)."""
  s = (i + 1) * size
  q_pos = i * size + jnp.arange(size)
  causal_QS = jnp.arange(s)[None, :] <= q_pos[:, None]
  if keep_K is None:
    return causal_QS[None, None, :, None, :]
  return causal_QS[None, None, :, None, :] & (keep_K[:, None, None, None, :s] > 0)


def _scores(q_NKQRF, k_NKSF, visible):
  n, kv, size, r, f = q_NKQRF.shape
  s_NKXS = jnp.einsum("nkxf,nksf->nkxs", q_NKQRF.reshape(n, kv, size * r, f), k_NKSF,
                      preferred_element_type=jnp.float32)
  s_NKQRS = s_NKXS.reshape(n, kv, size, r, -1)
  return jnp.where(visible, s_NKQRS, MASKED).reshape(n, kv, size * r, -1)


def _split(q_NTKRF, k_NTKF, v_NTKF, blocks: int):
  n, t, kv, r, f = q_NTKRF.shape
  q_NKTRF = (q_NTKRF * f ** -0.5).transpose(0, 2, 1, 3, 4)
  return q_NKTRF, k_NTKF.transpose(0, 2, 1, 3), v_NTKF.transpose(0, 2, 1, 3), t // blocks


def blocked_forward(q_NTKRF, k_NTKF, v_NTKF, mask_NT, blocks: int):
  """The forward in plain jnp: (out [N, T, K, R, F], lse [N, K, T*R] float32)."""
  n, t, kv, r, f = q_NTKRF.shape
  q_NKTRF, k_NKTF, v_NKTF, size = _split(q_NTKRF, k_NTKF, v_NTKF, blocks)
  outs, lses = [], []
  for i in range(blocks):
    s = (i + 1) * size
    scores_NKXS = _scores(q_NKTRF[:, :, i * size:s], k_NKTF[:, :, :s], _visible(i, size, mask_NT))
    max_NKX = jnp.max(scores_NKXS, axis=-1)
    w_NKXS = jnp.exp(scores_NKXS - max_NKX[..., None])
    total_NKX = jnp.sum(w_NKXS, axis=-1)
    o_NKXF = jnp.einsum("nkxs,nksf->nkxf", w_NKXS, v_NKTF[:, :, :s].astype(jnp.float32))
    outs.append(o_NKXF / total_NKX[..., None])
    lses.append(max_NKX + jnp.log(total_NKX))
  out_NKXF = jnp.concatenate(outs, axis=2)  # X = T*R, query-major
  out = out_NKXF.reshape(n, kv, t, r, f).transpose(0, 2, 1, 3, 4).astype(v_NTKF.dtype)
  return out, jnp.concatenate(lses, axis=2)


def blocked_backward(q_NTKRF, k_NTKF, v_NTKF, mask_NT, out, lse_NKX, dout_NTKRF, blocks: int):
  """The backward in plain jnp, in ``blocks`` query blocks (see the module doc): (dq, dk, dv)."""
  n, t, kv, r, f = q_NTKRF.shape
  q_NKTRF, k_NKTF, v_NKTF, size = _split(q_NTKRF, k_NTKF, v_NTKF, blocks)
  do_NKXF = dout_NTKRF.astype(jnp.float32).transpose(0, 2, 1, 3, 4).reshape(n, kv, t * r, f)
  o_NKXF = out.astype(jnp.float32).transpose(0, 2, 1, 3, 4).reshape(n, kv, t * r, f)
  delta_NKX = jnp.sum(do_NKXF * o_NKXF, axis=-1)
  q_NKXF = q_NKTRF.reshape(n, kv, t * r, f).astype(jnp.float32)
  k32, v32 = k_NKTF.astype(jnp.float32), v_NKTF.astype(jnp.float32)
  dq_parts = []
  dk_NKTF = jnp.zeros((n, kv, t, f), jnp.float32)
  dv_NKTF = jnp.zeros((n, kv, t, f), jnp.float32)
  x = size * r
  for i in range(blocks):
    s, rows = (i + 1) * size, slice(i * x, (i + 1) * x)
    scores_NKXS = _scores(q_NKTRF[:, :, i * size:s], k_NKTF[:, :, :s], _visible(i, size, mask_NT))
    p_NKXS = jnp.exp(scores_NKXS - lse_NKX[:, :, rows, None])
    do_i = do_NKXF[:, :, rows]
    dv_NKSF = jnp.einsum("nkxf,nkxs->nksf", do_i, p_NKXS)
    dp_NKXS = jnp.einsum("nkxf,nksf->nkxs", do_i, v32[:, :, :s])
    ds_NKXS = p_NKXS * (dp_NKXS - delta_NKX[:, :, rows, None])
    dq_parts.append(jnp.einsum("nkxs,nksf->nkxf", ds_NKXS, k32[:, :, :s]))
    dk_NKSF = jnp.einsum("nkxf,nkxs->nksf", q_NKXF[:, :, rows], ds_NKXS)
    dk_NKTF = dk_NKTF.at[:, :, :s].add(dk_NKSF)
    dv_NKTF = dv_NKTF.at[:, :, :s].add(dv_NKSF)
  dq_NKXF = jnp.concatenate(dq_parts, axis=2) * f ** -0.5
  dq = dq_NKXF.reshape(n, kv, t, r, f).transpose(0, 2, 1, 3, 4).astype(q_NTKRF.dtype)
  dk = dk_NKTF.transpose(0, 2, 1, 3).astype(k_NTKF.dtype)
  dv = dv_NKTF.transpose(0, 2, 1, 3).astype(v_NTKF.dtype)
  return dq, dk, dv


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6))
def causal_attention(q_NTKRF, k_NTKF, v_NTKF, mask_NT, blocks: int, forward=blocked_forward,
                     backward=blocked_backward):
  """Causal attention of a full sequence (see the module doc). ``mask_NT``: float32 1 = valid key,
  or None. ``forward(q, k, v, mask_NT, blocks)`` -> (out [N, T, K, R, F], lse [N, K, T*R] float32,
  query-major) and ``backward(q, k, v, mask_NT, out, lse, dout, blocks)`` -> (dq, dk, dv): the
  blocked jnp ones, or a backend's faster ones (``models/cpu/``) computing the same functions."""
  return forward(q_NTKRF, k_NTKF, v_NTKF, mask_NT, blocks)[0]


def _fwd(q_NTKRF, k_NTKF, v_NTKF, mask_NT, blocks, forward, backward):
  del backward
  out, lse = forward(q_NTKRF, k_NTKF, v_NTKF, mask_NT, blocks)
  # Named, so a remat policy can keep them (models/remat.py): without them the backward would
  # rerun this forward; with them it needs only q, k, v, which the projections give back.
  out, lse = checkpoint_name(out, OUT_NAME), checkpoint_name(lse, LSE_NAME)
  return out, (q_NTKRF, k_NTKF, v_NTKF, mask_NT, out, lse)


def _bwd(blocks, forward, backward, res, dout_NTKRF):
  del forward
  q_NTKRF, k_NTKF, v_NTKF, mask_NT, out, lse_NKX = res
  dq, dk, dv = backward(q_NTKRF, k_NTKF, v_NTKF, mask_NT, out, lse_NKX, dout_NTKRF, blocks)
  return dq, dk, dv, None if mask_NT is None else jnp.zeros_like(mask_NT)


causal_attention.defvjp(_fwd, _bwd)
