"""Grouped-query attention with RoPE, optional q/k RMSNorm (Qwen3) and the position-indexed KV cache."""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from arenarl_jax.models import cache_attention
from arenarl_jax.models.config import ModelConfig
from arenarl_jax.models.layers import Linear, RMSNorm
from arenarl_jax.models.rope import apply_rope

# Finite, so a query whose keys are all masked (a padding query) averages instead of producing NaN.
_MASKED = -1e30


def _to_groups(x_NK_, b: int):
  """[N, K, Q, ...] -> [B, K, G*Q, ...]: a prompt's G rows side by side (row n = prompt n // G)."""
  n, k, q = x_NK_.shape[:3]
  rest = x_NK_.shape[3:]
  x = x_NK_.reshape(b, n // b, k, q, *rest).swapaxes(1, 2)
  return x.reshape(b, k, (n // b) * q, *rest)


def _from_groups(x_BK_, n: int):
  """The inverse of _to_groups: [B, K, G*Q, ...] -> [N, K, Q, ...]."""
  b, k, gq = x_BK_.shape[:3]
  rest = x_BK_.shape[3:]
  x = x_BK_.reshape(b, k, n // b, gq * b // n, *rest).swapaxes(1, 2)
  return x.reshape(n, k, gq * b // n, *rest)


def attend(q_NTKRF, k_NKFS, v_NKSF, visible_NTS, prefix=None):
  """Softmax attention in float32; R = query heads per KV head (GQA without repeating K/V).

  The T*R queries of each (row, KV head) form one matrix, so both products are batched matmuls
  over (N, K) against the cache layout as stored (keys [F, S], values [S, F]). ``prefix``:
  optional (keys [B, K, F, P], values [B, K, P, F], visible [B, P]) shared by the G = N / B rows
  of each prompt: the G rows' queries are stacked into one matrix per (prompt, KV head), so the
  prompt's keys are read once per group, and both parts share one softmax (a common maximum and
  one normaliser).
  """
  n, t, kv, r, f = q_NTKRF.shape
  q_NKQF = (q_NTKRF * f ** -0.5).transpose(0, 2, 1, 3, 4).reshape(n, kv, t * r, f)
  batch = ((0, 1), (0, 1))
  scores_NKQS = jax.lax.dot_general(q_NKQF, k_NKFS, (((3,), (2,)), batch),
                                    preferred_element_type=jnp.float32)
  visible_NQS = jnp.repeat(visible_NTS, r, axis=1) if r > 1 else visible_NTS
  scores_NKQS = jnp.where(visible_NQS[:, None], scores_NKQS, _MASKED)
  max_NKQ = jnp.max(scores_NKQS, axis=-1)
  if prefix is not None:
    pk_BKFP, pv_BKPF, visible_BP = prefix
    b = pk_BKFP.shape[0]
    pscores_BKXP = jax.lax.dot_general(_to_groups(q_NKQF, b), pk_BKFP, (((3,), (2,)), batch),
                                       preferred_element_type=jnp.float32)
    pscores_BKXP = jnp.where(visible_BP[:, None, None, :], pscores_BKXP, _MASKED)
    max_NKQ = jnp.maximum(max_NKQ, _from_groups(jnp.max(pscores_BKXP, axis=-1), n))
  # Normalise after the value product: F divisions per query instead of S.
  weights_NKQS = jnp.exp(scores_NKQS - max_NKQ[..., None])
  out_NKQF = jax.lax.dot_general(weights_NKQS.astype(v_NKSF.dtype), v_NKSF,
                                 (((3,), (2,)), batch), preferred_element_type=jnp.float32)
  total_NKQ = jnp.sum(weights_NKQS, axis=-1)
  if prefix is not None:
    pweights_BKXP = jnp.exp(pscores_BKXP - _to_groups(max_NKQ, b)[..., None])
    pout_BKXF = jax.lax.dot_general(pweights_BKXP.astype(pv_BKPF.dtype), pv_BKPF,
                                    (((3,), (2,)), batch), preferred_element_type=jnp.float32)
    out_NKQF = out_NKQF + _from_groups(pout_BKXF, n)
    total_NKQ = total_NKQ + _from_groups(jnp.sum(pweights_BKXP, axis=-1), n)
  out_NKQF = (out_NKQF / total_NKQ[..., None]).astype(v_NKSF.dtype)
  return out_NKQF.reshape(n, kv, t, r, f).transpose(0, 2, 1, 3, 4)


class Attention(nnx.Module):
  """Projections + RoPE + GQA. With a cache, writes this chunk at its positions, then attends."""

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    d, hd, dt = cfg.d_model, cfg.head_dim, cfg.dtype
    self.cfg = cfg
    self.q = Linear(d, cfg.n_heads * hd, bias=cfg.qkv_bias, dtype=dt, rngs=rngs)
    self.k = Linear(d, cfg.n_kv_heads * hd, bias=cfg.qkv_bias, dtype=dt, rngs=rngs)
    self.v = Linear(d, cfg.n_kv_heads * hd, bias=cfg.qkv_bias, dtype=dt, rngs=rngs)
    self.o = Linear(cfg.n_heads * hd, d, bias=cfg.o_bias, dtype=dt, rngs=rngs)
    if cfg.qk_norm:
      self.q_norm = RMSNorm(hd, cfg.norm_eps, dt)
      self.k_norm = RMSNorm(hd, cfg.norm_eps, dt)
    else:
      self.q_norm = self.k_norm = None

  def project(self, x_NTD, cos_NTF, sin_NTF):
    """Queries [N, T, H, F], keys and values [N, T, K, F], with q/k norm and RoPE applied."""
    return self.heads(self.q(x_NTD), self.k(x_NTD), self.v(x_NTD), cos_NTF, sin_NTF)

  def heads(self, q_NTE, k_NTE, v_NTE, cos_NTF, sin_NTF):
    """The projections' outputs (E = heads x F) split into heads, q/k norm and RoPE applied."""
    cfg = self.cfg
    n, t, _ = q_NTE.shape
    q_NTHF = q_NTE.reshape(n, t, cfg.n_heads, cfg.head_dim)
    k_NTKF = k_NTE.reshape(n, t, cfg.n_kv_heads, cfg.head_dim)
    v_NTKF = v_NTE.reshape(n, t, cfg.n_kv_heads, cfg.head_dim)
    if self.q_norm is not None:
      q_NTHF, k_NTKF = self.q_norm(q_NTHF), self.k_norm(k_NTKF)
    return apply_rope(q_NTHF, cos_NTF, sin_NTF), apply_rope(k_NTKF, cos_NTF, sin_NTF), v_NTKF

  def __call__(self, x_NTD, cos_NTF, sin_NTF, positions_NT, *, mask_NT=None, cache_kv=None,
               kernel: bool = False):
    """Returns (out_NTD, (k_NKFS, v_NKSF) or None); ``cache_kv`` is a kv_cache.LayerCache."""
    n, t, _ = x_NTD.shape
    out_NTKRF, new_cache = self.mix(*self.project(x_NTD, cos_NTF, sin_NTF), positions_NT,
                                    mask_NT=mask_NT, cache_kv=cache_kv, kernel=kernel)
    return self.o(out_NTKRF.reshape(n, t, -1)), new_cache

  def mix(self, q_NTHF, k_NTKF, v_NTKF, positions_NT, *, mask_NT=None, cache_kv=None,
          kernel: bool = False):
    """Attention of projected heads: (out [N, T, K, R, F], (k_NKFS, v_NKSF) or None).

    ``kernel``: with a cache, attend with the compiled CPU kernel (``cache_attention``; the
    caller checks ``cache_attention.available``): the same function, without materialising
    the [N, K, T*R, S] scores. Unsharded programs only (it has no partitioning rule)."""
    if kernel and cache_kv is not None:
      return cache_attention.chunk_mix(self, q_NTHF, k_NTKF, v_NTKF, positions_NT, cache_kv)
    cfg = self.cfg
    n, t = q_NTHF.shape[:2]
    kv = cfg.n_kv_heads
    q_NTKRF = q_NTHF.reshape(n, t, kv, cfg.n_heads // kv, cfg.head_dim)
    prefix = None

    if cache_kv is None:
      # Full sequence: causal by token index, keys limited by the padding mask.
      visible_NTS = jnp.tril(jnp.ones((t, t), bool))[None]
      if mask_NT is not None:
        visible_NTS = visible_NTS & mask_NT[:, None, :].astype(bool)
      k_NKFS, v_NKSF = k_NTKF.transpose(0, 2, 3, 1), v_NTKF.transpose(0, 2, 1, 3)
      new_cache = None
    else:
      k_NKFS, v_NKSF = cache_kv.write(k_NTKF, v_NTKF, positions_NT)
      # Right-padding tokens of a chunk sit at later positions than the row's real tokens, so what
      # they write is invisible to them; mask_NT is not needed here.
      slots_S = jnp.arange(v_NKSF.shape[2])
      visible_NTS = slots_S[None, None, :] <= cache_kv.slots(positions_NT)[:, :, None]
      if cache_kv.prefix_k is not None:
        slots_P = jnp.arange(cache_kv.prefix_v.shape[2])
        prefix = (cache_kv.prefix_k, cache_kv.prefix_v,
                  slots_P[None, :] < cache_kv.prefix_lengths_B[:, None])
      new_cache = (k_NKFS, v_NKSF)
    return attend(q_NTKRF, k_NKFS, v_NKSF, visible_NTS, prefix), new_cache
