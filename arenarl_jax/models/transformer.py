"""The decoder-only transformer (Llama / Qwen2 / Qwen3 from one ModelConfig), in Flax NNX.

Call contract (fixed; the sampler, judges and train step rely on it):
  logits_NTV, cache = model(tokens_NT, positions_NT, cache=None, mask_NT=None)
  h_NTD, cache = model.hidden(...)      # after the final norm
  cache = model.fill(tokens_NT, positions_NT, cache=cache)  # keys/values only (no outputs)
  h_NTD = model.branch_hidden(tokens_T, offsets_T, sees_TT, cache=cache, lengths_N=lengths_N)
  logits_NTV = model.head(h_NTD)        # float32, tied or untied head
  cache = model.empty_cache(n_rows, n_slots)
Without a cache it is a full causal pass (mask_NT marks valid keys, e.g. left padding). With a
KVCache it writes the chunk at ``positions_NT`` (per-row offsets) and attends to slots <= position.
``branch_hidden`` runs tree branches after each row's first ``lengths_N`` positions without
writing the cache (the local judge's score reads).

Every mode is the same block forward (``_forward``); the attention inside it is the
implementation named by ``attention`` (``models/attention_choice.py``). In a full pass without a
cache each block is rematerialised as ``remat`` says (``models/remat.py``; never with a cache).
"""
from __future__ import annotations

import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from arenarl_jax.models import attention_choice, backend, remat as remat_lib
from arenarl_jax.models.attention import Attention, Context
from arenarl_jax.models.config import ModelConfig
from arenarl_jax.models.kv_cache import KVCache
from arenarl_jax.models.layers import MLP, Linear, RMSNorm
from arenarl_jax.models.rope import rope_tables


class Block(nnx.Module):
  """Pre-norm residual block: x + attn(norm(x)); x + mlp(norm(x))."""

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps, cfg.dtype, cfg.act_dtype)
    self.attn = Attention(cfg, rngs=rngs)
    self.mlp_norm = RMSNorm(cfg.d_model, cfg.norm_eps, cfg.dtype, cfg.act_dtype)
    self.mlp = MLP(cfg.d_model, cfg.ffn_dim, dtype=cfg.dtype, rngs=rngs)

  def __call__(self, x_NTD, cos, sin, ctx: Context, impl):
    a_NTD, new_kv = self.attn(self.attn_norm(x_NTD), cos, sin, ctx, impl)
    x_NTD = x_NTD + a_NTD
    return x_NTD + self.mlp(self.mlp_norm(x_NTD)), new_kv


def _sequence_block(impl, layer: Block, x_NTD, cos, sin, positions_NT, mask_NT):
  """A block of a full causal pass without a cache (what ``remat`` checkpoints)."""
  return layer(x_NTD, cos, sin, Context(positions_NT, mask_NT), impl)[0]


class Transformer(nnx.Module):
  """Embedding, L blocks (a Python list: unrolled, so each layer's cache updates in place), head.

  ``attention``: the attention implementation (``attention_choice.CHOICES``; static, part of the
  graph definition, so every program of this model compiles with it). ``remat``: the per-block
  rematerialisation of cache-less passes (``remat.CHOICES``; static in the same way)."""

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs, attention: str = "auto",
               remat: str = "none"):
    self.cfg = cfg
    self.attention = attention_choice.check(attention)
    self.remat = remat_lib.check(remat)
    embed = jax.random.normal(rngs.params(), (cfg.vocab_size, cfg.d_model), jnp.float32) * 0.02
    self.embed = nnx.Param(embed.astype(cfg.dtype))
    self.layers = nnx.List([Block(cfg, rngs=rngs) for _ in range(cfg.n_layers)])
    self.final_norm = RMSNorm(cfg.d_model, cfg.norm_eps, cfg.dtype, cfg.act_dtype)
    self.lm_head = None if cfg.tie_embeddings else Linear(
        cfg.d_model, cfg.vocab_size, bias=False, dtype=cfg.dtype, rngs=rngs)

  @property
  def cache_layout(self) -> str:
    """The layout of this model's KV caches: its attention implementation's (resolved for the
    current backend, so call it where a program is traced; ``models/kv_cache.py``)."""
    return attention_choice.resolve(self.attention).cache_layout

  def empty_cache(self, n_rows: int, n_slots: int, dtype=None) -> KVCache:
    """A zeroed KV cache of ``n_slots`` positions per row for this model, in its layout."""
    return KVCache.init(self.cfg, n_rows, n_slots, dtype, layout=self.cache_layout)

  def hidden(self, tokens_NT, positions_NT=None, *, cache: KVCache | None = None, mask_NT=None):
    n, t = tokens_NT.shape
    bound = None if cache is None else cache.position_bound
    if positions_NT is None:
      positions_NT = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (n, t))
      # The default positions are 0..T-1: RoPE then gathers from a table of exactly those, made
      # once (``rope_tables``), where cos and sin computed per position would be evaluated again
      # inside every layer's q and k rotation (the training forward's and its recompute's).
      bound = t if bound is None else bound
    x_NTD = jnp.take(self.embed[...], tokens_NT, axis=0)
    return self._forward(x_NTD, positions_NT, cache, bound, mask_NT=mask_NT)

  def fill(self, tokens_NT, positions_NT, *, cache: KVCache) -> KVCache:
    """Only writes the chunk's keys and values into every layer of ``cache``: the last layer's
    attention and MLP, which only the chunk's outputs need, are skipped (~1/L of the work)."""
    x_NTD = jnp.take(self.embed[...], tokens_NT, axis=0)
    return self._forward(x_NTD, positions_NT, cache, cache.position_bound, outputs=False)[1]

  def branch_hidden(self, tokens_T: Sequence[int], offsets_T: Sequence[int], sees_TT, *,
                    cache: KVCache, lengths_N) -> jax.Array:
    """Final hidden states [N, T, D] of tree branches after every row of ``cache``.

    The same T tokens follow each row n: token t sits at position lengths_N[n] + offsets_T[t]
    and sees the row's positions below lengths_N[n] and the tokens ``sees_TT[t]`` marks (its
    ancestors in the tree and itself). ``tokens_T`` and ``offsets_T`` are static (Python or
    numpy); the cache is read, not written."""
    n, t = lengths_N.shape[0], len(tokens_T)
    x_TD = jnp.take(self.embed[...], jnp.asarray(np.asarray(tokens_T), jnp.int32), axis=0)
    x_NTD = jnp.broadcast_to(x_TD[None], (n, t, self.cfg.d_model))
    offsets = np.asarray(offsets_T, np.int32)
    positions_NT = lengths_N[:, None] + jnp.asarray(offsets)[None, :]
    bound = cache.position_bound + int(offsets.max()) + 1
    return self._forward(x_NTD, positions_NT, cache, bound, lengths_N=lengths_N,
                         sees_TT=jnp.asarray(sees_TT, bool))[0]

  def _forward(self, x_NTD, positions_NT, cache, bound, *, mask_NT=None, lengths_N=None,
               sees_TT=None, outputs: bool = True):
    """The one block forward of every mode: (final-norm hidden states or None, new cache)."""
    impl = attention_choice.resolve(self.attention)
    cos, sin = rope_tables(self.cfg, positions_NT, bound)
    writes = cache is not None and sees_TT is None
    start_N = None if cache is None else cache.start_N()
    new_k, new_v = [], []
    for i, layer in enumerate(self.layers):
      kv = None if cache is None else cache.layer(i, start_N)
      if not outputs and i == len(self.layers) - 1:
        _, k_NTKF, v_NTKF = layer.attn.project(layer.attn_norm(x_NTD), cos, sin)
        kv = kv.write(k_NTKF, v_NTKF, positions_NT)
      elif cache is None and self.remat != "none":
        x_NTD = backend.current().remat(layer, self.remat,
                                        functools.partial(_sequence_block, impl),
                                        x_NTD, cos, sin, positions_NT, mask_NT)
      else:
        ctx = Context(positions_NT, mask_NT, kv, lengths_N, sees_TT)
        x_NTD, kv = layer(x_NTD, cos, sin, ctx, impl)
      if writes:
        new_k.append(kv[0])
        new_v.append(kv[1])
    new_cache = cache.replace(k=tuple(new_k), v=tuple(new_v)) if writes else cache
    return (self.final_norm(x_NTD) if outputs else None), new_cache

  def head(self, h_NTD):
    """Logits in float32 (tied: h @ embed^T)."""
    if self.lm_head is None:
      return backend.current().dense_t(h_NTD, self.embed[...].astype(h_NTD.dtype), jnp.float32)
    return backend.current().dense(h_NTD, self.lm_head.kernel[...].astype(h_NTD.dtype),
                                   jnp.float32)

  def head_vocab_major(self, h_NTD):
    """The head's logits vocabulary-major, [V, N, T] float32: the teacher-forced log-probs'
    layout. Computed as embed @ h^T, the orientation whose product XLA:CPU runs near its matmul
    peak (h @ embed^T ran at about half of it), with the vocabulary reductions over axis 0."""
    if self.lm_head is None:
      w_VD = self.embed[...].astype(h_NTD.dtype)
      return jnp.einsum("vd,ntd->vnt", w_VD, h_NTD, preferred_element_type=jnp.float32)
    return jnp.einsum("dv,ntd->vnt", self.lm_head.kernel[...].astype(h_NTD.dtype), h_NTD,
                      preferred_element_type=jnp.float32)

  def __call__(self, tokens_NT, positions_NT=None, *, cache: KVCache | None = None, mask_NT=None):
    h_NTD, cache = self.hidden(tokens_NT, positions_NT, cache=cache, mask_NT=mask_NT)
    return self.head(h_NTD), cache


def set_attention(model: nnx.Module, attention: str) -> nnx.Module:
  """Sets the model's attention implementation (in place; returns the model)."""
  model.attention = attention_choice.check(attention)
  return model


def set_remat(model: nnx.Module, remat: str) -> nnx.Module:
  """Sets the model's per-block rematerialisation (``model.remat``; in place; returns the model)."""
  model.remat = remat_lib.check(remat)
  return model


def make_model(cfg: ModelConfig, seed: int = 0, attention: str = "auto",
               remat: str = "none") -> Transformer:
  """A randomly initialised model (weights are replaced by a loader for real checkpoints)."""
  return Transformer(cfg, rngs=nnx.Rngs(params=seed), attention=attention, remat=remat)


def abstract_model(cfg: ModelConfig, attention: str = "auto", remat: str = "none") -> Transformer:
  """Shapes only, no memory: the skeleton a loader fills (nnx.eval_shape)."""
  return nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(params=0), attention=attention,
                                            remat=remat))
