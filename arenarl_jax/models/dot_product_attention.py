"""The model's attention on ``jax.nn.dot_product_attention`` (the ``dot_product_attention`` choice).

The call takes [N, S, K, F] keys (GQA natively) and a boolean mask [N, 1, T, S]. With
``return_residual`` it also gives each query's log-normaliser, so attention over separate key
sets (the row's cache, the prompt's shared prefix, a branch's own tokens) is merged exactly:
out = sum_i exp(lse_i - lse) out_i with lse = logaddexp_i lse_i. The caches this implementation's
models make are ``nskf`` ([N, S, K, F] keys and values, ``models/kv_cache.py``): the call's own
layout, read as stored, and the one whose decode writes the TPU compiler does in place. A cache
in the ``nkfs`` layout (made by another implementation) is transposed for the call, and its
decode steps (one query per row) use the reference attention, which reads it as stored.

Implementation: cuDNN flash attention (``implementation="cudnn"``) on GPU for full causal
sequences without a padding mask in bfloat16/float16 with a head size that is a multiple of 8 up
to 128 (cuDNN's constraints); XLA's implementation of the same call otherwise (any mask, any
float dtype). Fallback to the reference: queries and keys of different dtypes, or dtypes other
than float32/bfloat16/float16, use ``ReferenceAttention``.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from arenarl_jax.models import kv_cache
from arenarl_jax.models.attention import ReferenceAttention, branch_counts, cache_visibility
from arenarl_jax.models.kv_cache import LayerCache

_FLOATS = (jnp.float32, jnp.bfloat16, jnp.float16)


def _supported(*arrays) -> bool:
  dtypes = {jnp.dtype(x.dtype) for x in arrays}
  return len(dtypes) == 1 and dtypes.pop() in tuple(jnp.dtype(d) for d in _FLOATS)


def _cudnn_ok(q_NTHF) -> bool:
  f = q_NTHF.shape[-1]
  return (jax.default_backend() == "gpu" and q_NTHF.dtype in (jnp.bfloat16, jnp.float16)
          and f % 8 == 0 and f <= 128)


def _call(q_NTHF, k_NSKF, v_NSKF, mask_N1TS):
  """(out [N, T, H, F], lse [N, T, H] float32) with XLA's implementation."""
  out, lse = jax.nn.dot_product_attention(q_NTHF, k_NSKF, v_NSKF, mask=mask_N1TS,
                                          return_residual=True, implementation="xla")
  return out, lse.astype(jnp.float32)


def _merge(parts):
  """One softmax over several key sets from each part's (out, lse)."""
  total = parts[0][1]
  for _, lse in parts[1:]:
    total = jnp.logaddexp(total, lse)
  out = 0.0
  for part_out, lse in parts:
    out = out + jnp.exp(lse - total)[..., None] * part_out.astype(jnp.float32)
  return out


class DotProductAttention(ReferenceAttention):
  """``jax.nn.dot_product_attention`` for every call (see the module doc)."""

  name = "dot_product_attention"
  cache_layout = "nskf"

  def sequence(self, q_NTKRF, k_NTKF, v_NTKF, mask_NT):
    if not _supported(q_NTKRF, k_NTKF, v_NTKF):
      return super().sequence(q_NTKRF, k_NTKF, v_NTKF, mask_NT)
    n, t, kv, r, f = q_NTKRF.shape
    q_NTHF = q_NTKRF.reshape(n, t, kv * r, f)
    if mask_NT is None and _cudnn_ok(q_NTHF):
      out = jax.nn.dot_product_attention(q_NTHF, k_NTKF, v_NTKF, is_causal=True,
                                         implementation="cudnn")
      return out.reshape(n, t, kv, r, f)
    visible = jnp.tril(jnp.ones((t, t), bool))[None, None]
    if mask_NT is not None:
      visible = visible & mask_NT[:, None, None, :].astype(bool)
    out = jax.nn.dot_product_attention(q_NTHF, k_NTKF, v_NTKF, mask=visible, implementation="xla")
    return out.reshape(n, t, kv, r, f)

  def _against_cache(self, q_NTKRF, k, v, layer: LayerCache, count_NT, extra=None):
    n, t, kv, r, f = q_NTKRF.shape
    q_NTHF = q_NTKRF.reshape(n, t, kv * r, f).astype(v.dtype)
    visible_NTS, prefix = cache_visibility(layer, count_NT)
    parts = [_call(q_NTHF, *kv_cache.as_nskf(k, v, layer.layout), visible_NTS[:, None])]
    if prefix is not None:
      pk, pv, visible_BP = prefix
      b = pk.shape[0]
      # The G rows of a prompt as one sequence of G*T queries against the prompt's keys.
      q_BXHF = q_NTHF.reshape(b, (n // b) * t, kv * r, f)
      out_BXHF, lse_BXH = _call(q_BXHF, *kv_cache.as_nskf(pk, pv, layer.layout),
                                visible_BP[:, None, None, :])
      parts.append((out_BXHF.reshape(n, t, kv * r, f), lse_BXH.reshape(n, t, kv * r)))
    if extra is not None:
      parts.append(_call(q_NTHF, *extra))
    out = parts[0][0] if len(parts) == 1 else _merge(parts)
    return out.astype(v.dtype).reshape(n, t, kv, r, f)

  def cache(self, q_NTKRF, k_NTKF, v_NTKF, positions_NT, layer: LayerCache):
    decode_nkfs = q_NTKRF.shape[1] == 1 and layer.layout == "nkfs"
    if decode_nkfs or not _supported(q_NTKRF, layer.k):
      return super().cache(q_NTKRF, k_NTKF, v_NTKF, positions_NT, layer)
    k, v = layer.write(k_NTKF, v_NTKF, positions_NT)
    out = self._against_cache(q_NTKRF, k, v, layer, layer.slots(positions_NT) + 1)
    return out, (k, v)

  def branch(self, q_NTKRF, k_NTKF, v_NTKF, layer: LayerCache, lengths_N, sees_TT):
    if not _supported(q_NTKRF, layer.k):
      return super().branch(q_NTKRF, k_NTKF, v_NTKF, layer, lengths_N, sees_TT)
    t = q_NTKRF.shape[1]
    extra = (k_NTKF.astype(layer.k.dtype), v_NTKF.astype(layer.v.dtype), sees_TT[None, None])
    return self._against_cache(q_NTKRF, layer.k, layer.v, layer,
                               branch_counts(layer, lengths_N, t), extra)
