"""The decoder-only transformer (Llama / Qwen2 / Qwen3 from one ModelConfig), in Flax NNX.

Call contract (fixed; the sampler, judges and train step rely on it):
  logits_NTV, cache = model(tokens_NT, positions_NT, cache=None, mask_NT=None)
  h_NTD, cache = model.hidden(...)      # after the final norm
  cache = model.fill(tokens_NT, positions_NT, cache=cache)  # keys/values only (no outputs)
  logits_NTV = model.head(h_NTD)        # float32, tied or untied head
Without a cache it is a full causal pass (mask_NT marks valid keys, e.g. left padding). With a
KVCache it writes the chunk at ``positions_NT`` (per-row offsets) and attends to slots <= position.
``hidden``/``fill`` take ``kernel=True`` to attend to the cache with the compiled CPU kernel
(``models/cache_attention.py``; unsharded programs, after ``cache_attention.available()``).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from arenarl_jax.models.attention import Attention
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

  def __call__(self, x_NTD, cos, sin, positions_NT, *, mask_NT=None, cache_kv=None,
               kernel: bool = False):
    a_NTD, cache_kv = self.attn(self.attn_norm(x_NTD), cos, sin, positions_NT,
                                mask_NT=mask_NT, cache_kv=cache_kv, kernel=kernel)
    x_NTD = x_NTD + a_NTD
    return x_NTD + self.mlp(self.mlp_norm(x_NTD)), cache_kv


class Transformer(nnx.Module):
  """Embedding, L blocks (a Python list: unrolled, so each layer's cache updates in place), head."""

  def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
    self.cfg = cfg
    embed = jax.random.normal(rngs.params(), (cfg.vocab_size, cfg.d_model), jnp.float32) * 0.02
    self.embed = nnx.Param(embed.astype(cfg.dtype))
    self.layers = nnx.List([Block(cfg, rngs=rngs) for _ in range(cfg.n_layers)])
    self.final_norm = RMSNorm(cfg.d_model, cfg.norm_eps, cfg.dtype, cfg.act_dtype)
    self.lm_head = None if cfg.tie_embeddings else Linear(
        cfg.d_model, cfg.vocab_size, bias=False, dtype=cfg.dtype, rngs=rngs)

  def hidden(self, tokens_NT, positions_NT=None, *, cache: KVCache | None = None, mask_NT=None,
             kernel: bool = False):
    return self._run(tokens_NT, positions_NT, cache, mask_NT, outputs=True, kernel=kernel)

  def fill(self, tokens_NT, positions_NT, *, cache: KVCache, kernel: bool = False) -> KVCache:
    """Only writes the chunk's keys and values into every layer of ``cache``: the last layer's
    attention and MLP, which only the chunk's outputs need, are skipped (~1/L of the work).
    ``kernel``: attend with the compiled CPU kernel (see ``Attention.mix``)."""
    return self._run(tokens_NT, positions_NT, cache, None, outputs=False, kernel=kernel)[1]

  def _run(self, tokens_NT, positions_NT, cache, mask_NT, *, outputs: bool,
           kernel: bool = False):
    n, t = tokens_NT.shape
    bound = None if cache is None else cache.position_bound
    if positions_NT is None:
      positions_NT = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (n, t))
    x_NTD = jnp.take(self.embed[...], tokens_NT, axis=0)
    cos, sin = rope_tables(self.cfg, positions_NT, bound)
    new_k, new_v = [], []
    start_N = None if cache is None else cache.start_N()
    for i, layer in enumerate(self.layers):
      kv = None if cache is None else cache.layer(i, start_N)
      if not outputs and i == len(self.layers) - 1:
        _, k_NTKF, v_NTKF = layer.attn.project(layer.attn_norm(x_NTD), cos, sin)
        kv = kv.write(k_NTKF, v_NTKF, positions_NT)
      else:
        x_NTD, kv = layer(x_NTD, cos, sin, positions_NT, mask_NT=mask_NT, cache_kv=kv,
                          kernel=kernel)
      if kv is not None:
        new_k.append(kv[0])
        new_v.append(kv[1])
    new_cache = None if cache is None else cache.replace(k=tuple(new_k), v=tuple(new_v))
    return (self.final_norm(x_NTD) if outputs else None), new_cache

  def head(self, h_NTD):
    """Logits in float32 (tied: h @ embed^T)."""
    if self.lm_head is None:
      return jnp.einsum("...d,vd->...v", h_NTD, self.embed[...].astype(h_NTD.dtype),
                        preferred_element_type=jnp.float32)
    return jnp.matmul(h_NTD, self.lm_head.kernel[...].astype(h_NTD.dtype),
                      preferred_element_type=jnp.float32)

  def __call__(self, tokens_NT, positions_NT=None, *, cache: KVCache | None = None, mask_NT=None):
    h_NTD, cache = self.hidden(tokens_NT, positions_NT, cache=cache, mask_NT=mask_NT)
    return self.head(h_NTD), cache


def make_model(cfg: ModelConfig, seed: int = 0) -> Transformer:
  """A randomly initialised model (weights are replaced by a loader for real checkpoints)."""
  return Transformer(cfg, rngs=nnx.Rngs(params=seed))


def abstract_model(cfg: ModelConfig) -> Transformer:
  """Shapes only, no memory: the skeleton a loader fills (nnx.eval_shape)."""
  return nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(params=0)))
