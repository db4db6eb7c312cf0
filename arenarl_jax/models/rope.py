"""Rotary position embeddings (HF "rotate half" layout) with the scaling variants our families use."""
from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from arenarl_jax.models.config import ModelConfig


def inverse_frequencies(cfg: ModelConfig) -> tuple[np.ndarray, float]:
  """Per-pair inverse frequencies [F/2] and the cos/sin scale (1 except for YaRN)."""
  dim = cfg.head_dim
  inv = 1.0 / (cfg.rope_theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
  rope = cfg.rope
  kind = rope.get("rope_type", "default")
  if kind == "default":
    return inv.astype(np.float32), 1.0
  factor = float(rope["factor"])
  if kind == "linear":
    return (inv / factor).astype(np.float32), 1.0
  if kind == "llama3":
    old = float(rope["original_max_position_embeddings"])
    low, high = float(rope["low_freq_factor"]), float(rope["high_freq_factor"])
    wavelen = 2 * math.pi / inv
    scaled = np.where(wavelen > old / low, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old / high) & (wavelen <= old / low)
    return np.where(medium, smoothed, scaled).astype(np.float32), 1.0
  if kind == "yarn":
    return _yarn(inv, dim, cfg.rope_theta, factor, rope)
  raise ValueError(f"unsupported rope_type {kind!r}")


def _yarn(inv, dim, base, factor, rope) -> tuple[np.ndarray, float]:
  """YaRN (arXiv 2309.00071): blend interpolated and extrapolated frequencies by a linear ramp."""
  old = float(rope["original_max_position_embeddings"])

  def mscale(scale, m=1.0):
    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

  attn = rope.get("attention_factor")
  if attn is None:
    m, m_all = rope.get("mscale"), rope.get("mscale_all_dim")
    attn = mscale(factor, m) / mscale(factor, m_all) if (m and m_all) else mscale(factor)
  fast, slow = rope.get("beta_fast") or 32, rope.get("beta_slow") or 1

  def correction_dim(rotations):
    return dim * math.log(old / (rotations * 2 * math.pi)) / (2 * math.log(base))

  lo, hi = correction_dim(fast), correction_dim(slow)
  if rope.get("truncate", True):
    lo, hi = math.floor(lo), math.ceil(hi)
  lo, hi = max(lo, 0), min(hi, dim - 1)
  if lo == hi:
    hi += 0.001
  ramp = np.clip((np.arange(dim // 2) - lo) / (hi - lo), 0, 1)
  extrapolate = 1 - ramp
  blended = (inv / factor) * (1 - extrapolate) + inv * extrapolate
  return blended.astype(np.float32), float(attn)


def rope_tables(cfg: ModelConfig, positions_NT: jnp.ndarray,
                max_position: int | None = None) -> tuple[jnp.ndarray, jnp.ndarray]:
  """cos, sin of shape [N, T, F] for integer positions (computed in float32).

  ``max_position``: a static bound on the positions (the caller's cache size). The tables are
  then computed once for positions [0, max_position) and gathered; positions past it are clipped
  (callers only pass such positions for writes that are dropped). Why: computed directly, XLA:CPU
  fuses cos/sin into each consumer and evaluates the transcendentals again for every head of q and
  k in every layer, at every step; a gathered table is computed once and only read after that
  (see benchmarks/README.md, Sampler and Train step).
  """
  if max_position is not None:
    cos_LF, sin_LF = rope_tables(cfg, jnp.arange(max_position, dtype=jnp.int32))
    take = lambda table: jnp.take(table, positions_NT, axis=0, mode="clip")
    return take(cos_LF), take(sin_LF)
  inv, scale = inverse_frequencies(cfg)
  angles_NTf = positions_NT.astype(jnp.float32)[..., None] * jnp.asarray(inv)
  angles_NTF = jnp.concatenate([angles_NTf, angles_NTf], axis=-1)
  return jnp.cos(angles_NTF) * scale, jnp.sin(angles_NTF) * scale


def apply_rope(x_NTHF: jnp.ndarray, cos_NTF: jnp.ndarray, sin_NTF: jnp.ndarray) -> jnp.ndarray:
  """Rotates pairs (i, i + F/2) of every head: x*cos + rotate_half(x)*sin."""
  half = x_NTHF.shape[-1] // 2
  x1, x2 = x_NTHF[..., :half], x_NTHF[..., half:]
  rotated = jnp.concatenate([-x2, x1], axis=-1)
  cos, sin = cos_NTF[:, :, None, :], sin_NTF[:, :, None, :]
  out = x_NTHF.astype(jnp.float32) * cos + rotated.astype(jnp.float32) * sin
  return out.astype(x_NTHF.dtype)
