"""Grouped-query attention: the projections (RoPE, optional q/k RMSNorm for Qwen3), what each
query sees (``Context``), and the reference attention every implementation is tested against.

The attention itself goes through one seam: ``Attention.mix`` hands the projected heads and the
``Context`` to the implementation the model was built with (``models/attention_choice.py``:
reference, ``jax.nn.dot_product_attention``, or the CPU kernel of ``models/cpu/``). The three
kinds of call are
- a full sequence (no cache): causal by token index, keys limited by a padding mask;
- a chunk against the KV cache at each row's own offset (decode is a chunk of one token): the
  chunk is written at its positions, then a query at position p sees the row's positions <= p
  (and its prompt's shared prefix, if the cache has one);
- a tree branch against the cache (the local judge's score branches): nothing is written; each
  query sees the row's positions below ``lengths_N`` plus those chunk tokens ``sees_TT`` marks
  (its ancestors in the tree and itself), so every branch reads as its own causal sequence.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from arenarl_jax.models.config import ModelConfig
from arenarl_jax.models import kv_cache
from arenarl_jax.models.kv_cache import LayerCache
from arenarl_jax.models.layers import Linear, RMSNorm
from arenarl_jax.models.rope import apply_rope

# Finite, so a query whose keys are all masked (a padding query) averages instead of producing NaN.
MASKED = -1e30


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


def attend(q_NTKRF, k_NKFS, v_NKSF, visible_NTS, prefix=None, extra=None):
  """Softmax attention in float32; R = query heads per KV head (GQA without repeating K/V).

  The T*R queries of each (row, KV head) form one matrix, so both products are batched matmuls
  over (N, K) against the cache layout as stored (keys [F, S], values [S, F]). ``prefix``:
  optional (keys [B, K, F, P], values [B, K, P, F], visible [B, P]) shared by the G = N / B rows
  of each prompt: the G rows' queries are stacked into one matrix per (prompt, KV head), so the
  prompt's keys are read once per group. ``extra``: optional per-row keys [N, K, F, E], values
  [N, K, E, F] and visible [N or 1, T, E] (a tree branch's own tokens). All parts share one
  softmax (a common maximum and one normaliser).
  """
  n, t, kv, r, f = q_NTKRF.shape
  q_NKQF = (q_NTKRF * f ** -0.5).transpose(0, 2, 1, 3, 4).reshape(n, kv, t * r, f)
  batch = ((0, 1), (0, 1))
  parts = [(k_NKFS, v_NKSF, visible_NTS)] + ([extra] if extra is not None else [])
  scores, max_NKQ = [], None
  for k_NKFX, _, visible_NTX in parts:
    scores_NKQX = jax.lax.dot_general(q_NKQF, k_NKFX, (((3,), (2,)), batch),
                                      preferred_element_type=jnp.float32)
    visible_NQX = jnp.repeat(visible_NTX, r, axis=1) if r > 1 else visible_NTX
    scores_NKQX = jnp.where(visible_NQX[:, None], scores_NKQX, MASKED)
    scores.append(scores_NKQX)
    part_max = jnp.max(scores_NKQX, axis=-1)
    max_NKQ = part_max if max_NKQ is None else jnp.maximum(max_NKQ, part_max)
  if prefix is not None:
    pk_BKFP, pv_BKPF, visible_BP = prefix
    b = pk_BKFP.shape[0]
    pscores_BKXP = jax.lax.dot_general(_to_groups(q_NKQF, b), pk_BKFP, (((3,), (2,)), batch),
                                       preferred_element_type=jnp.float32)
    pscores_BKXP = jnp.where(visible_BP[:, None, None, :], pscores_BKXP, MASKED)
    max_NKQ = jnp.maximum(max_NKQ, _from_groups(jnp.max(pscores_BKXP, axis=-1), n))
  # Normalise after the value product: F divisions per query instead of S.
  out_NKQF = total_NKQ = None
  for scores_NKQX, (_, v_NKXF, _) in zip(scores, parts):
    weights_NKQX = jnp.exp(scores_NKQX - max_NKQ[..., None])
    part_out = jax.lax.dot_general(weights_NKQX.astype(v_NKXF.dtype), v_NKXF,
                                   (((3,), (2,)), batch), preferred_element_type=jnp.float32)
    part_total = jnp.sum(weights_NKQX, axis=-1)
    out_NKQF = part_out if out_NKQF is None else out_NKQF + part_out
    total_NKQ = part_total if total_NKQ is None else total_NKQ + part_total
  if prefix is not None:
    pweights_BKXP = jnp.exp(pscores_BKXP - _to_groups(max_NKQ, b)[..., None])
    pout_BKXF = jax.lax.dot_general(pweights_BKXP.astype(pv_BKPF.dtype), pv_BKPF,
                                    (((3,), (2,)), batch), preferred_element_type=jnp.float32)
    out_NKQF = out_NKQF + _from_groups(pout_BKXF, n)
    total_NKQ = total_NKQ + _from_groups(jnp.sum(pweights_BKXP, axis=-1), n)
  out_NKQF = (out_NKQF / total_NKQ[..., None]).astype(v_NKSF.dtype)
  return out_NKQF.reshape(n, kv, t, r, f).transpose(0, 2, 1, 3, 4)


@dataclasses.dataclass(frozen=True)
class Context:
  """What a layer's queries see (see the module doc): ``cache`` None = a full sequence (``mask_NT``
  marks valid keys); a cache without ``sees_TT`` = a chunk written at ``positions_NT``; with
  ``sees_TT`` = a tree branch that reads the row's positions below ``lengths_N`` plus its own
  tokens per ``sees_TT`` [T, T] and writes nothing."""

  positions_NT: jax.Array
  mask_NT: jax.Array | None = None
  cache: LayerCache | None = None
  lengths_N: jax.Array | None = None
  sees_TT: jax.Array | None = None


def cache_visibility(layer: LayerCache, count_NT):
  """(visible [N, T, S] = slot < count_NT, the shared prefix (keys, values as stored, visible
  [B, P]) or None)."""
  slots_S = jnp.arange(layer.n_slots)
  visible_NTS = slots_S[None, None, :] < count_NT[:, :, None]
  prefix = None
  if layer.prefix_k is not None:
    slots_P = jnp.arange(layer.prefix_slots)
    prefix = (layer.prefix_k, layer.prefix_v,
              slots_P[None, :] < layer.prefix_lengths_B[:, None])
  return visible_NTS, prefix


def nkfs_prefix(prefix, layout: str):
  """``cache_visibility``'s prefix with its keys and values as ``attend`` reads them."""
  if prefix is None:
    return None
  return (*kv_cache.as_nkfs(prefix[0], prefix[1], layout), prefix[2])


def branch_counts(layer: LayerCache, lengths_N, t: int):
  """[N, T]: the row-buffer slots a branch query sees (positions below lengths_N)."""
  count_N = jnp.clip(lengths_N - layer.start_N, 0, layer.n_slots)
  return jnp.broadcast_to(count_N[:, None], (count_N.shape[0], t))


class ReferenceAttention:
  """The plain softmax of ``attend``: the test oracle, and the fallback of the other
  implementations. Queries arrive as [N, T, K, R, F] (unscaled), keys and values as [N, T, K, F].
  It reads caches of either layout (an ``nskf`` one through transposed copies)."""

  name = "reference"
  # Whether the sampler decodes with the feature-major CPU step (``models/cpu/decode.py``).
  feature_major_decode = False
  cache_layout = "nkfs"  # the layout of the caches this implementation's models make

  def sequence(self, q_NTKRF, k_NTKF, v_NTKF, mask_NT):
    t = q_NTKRF.shape[1]
    visible_NTS = jnp.tril(jnp.ones((t, t), bool))[None]
    if mask_NT is not None:
      visible_NTS = visible_NTS & mask_NT[:, None, :].astype(bool)
    return attend(q_NTKRF, k_NTKF.transpose(0, 2, 3, 1), v_NTKF.transpose(0, 2, 1, 3),
                  visible_NTS)

  def cache(self, q_NTKRF, k_NTKF, v_NTKF, positions_NT, layer: LayerCache):
    """(out, (keys, values) with the chunk written, in the layer's layout)."""
    k, v = layer.write(k_NTKF, v_NTKF, positions_NT)
    # Right-padding tokens of a chunk sit at later positions than the row's real tokens, so what
    # they write is invisible to them; no padding mask is needed here.
    visible_NTS, prefix = cache_visibility(layer, layer.slots(positions_NT) + 1)
    k_NKFS, v_NKSF = kv_cache.as_nkfs(k, v, layer.layout)
    out = attend(q_NTKRF, k_NKFS, v_NKSF, visible_NTS, nkfs_prefix(prefix, layer.layout))
    return out, (k, v)

  def branch(self, q_NTKRF, k_NTKF, v_NTKF, layer: LayerCache, lengths_N, sees_TT):
    t = q_NTKRF.shape[1]
    visible_NTS, prefix = cache_visibility(layer, branch_counts(layer, lengths_N, t))
    extra = (k_NTKF.transpose(0, 2, 3, 1).astype(layer.k.dtype),
             v_NTKF.transpose(0, 2, 1, 3).astype(layer.v.dtype), sees_TT[None])
    k_NKFS, v_NKSF = kv_cache.as_nkfs(layer.k, layer.v, layer.layout)
    return attend(q_NTKRF, k_NKFS, v_NKSF, visible_NTS, nkfs_prefix(prefix, layer.layout), extra)


class Attention(nnx.Module):
  """Projections + RoPE + GQA; the attention of the heads by the model's chosen implementation."""

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

  def __call__(self, x_NTD, cos_NTF, sin_NTF, ctx: Context, impl):
    """(out_NTD, the layer's (k_NKFS, v_NKSF) after a chunk's write, or None)."""
    n, t, _ = x_NTD.shape
    out_NTKRF, new_kv = self.mix(*self.project(x_NTD, cos_NTF, sin_NTF), ctx, impl)
    return self.o(out_NTKRF.reshape(n, t, -1)), new_kv

  def mix(self, q_NTHF, k_NTKF, v_NTKF, ctx: Context, impl):
    """The seam: attention of projected heads by ``impl`` -> (out [N, T, K, R, F], new keys and
    values or None)."""
    cfg = self.cfg
    n, t = q_NTHF.shape[:2]
    kv = cfg.n_kv_heads
    q_NTKRF = q_NTHF.reshape(n, t, kv, cfg.n_heads // kv, cfg.head_dim)
    if ctx.cache is None:
      return impl.sequence(q_NTKRF, k_NTKF, v_NTKF, ctx.mask_NT), None
    if ctx.sees_TT is not None:
      return impl.branch(q_NTKRF, k_NTKF, v_NTKF, ctx.cache, ctx.lengths_N, ctx.sees_TT), None
    return impl.cache(q_NTKRF, k_NTKF, v_NTKF, ctx.positions_NT, ctx.cache)
