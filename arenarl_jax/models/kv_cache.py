"""The KV cache: per-layer key/value buffers indexed by absolute position.

Contract (used by the sampler, the local judge and the model):
- per layer one key buffer [N, K, F, S] (transposed: slots on the minor axis) and one value buffer
  [N, K, S, F]; rows on axis 0 (sharded over 'data'). With this layout both attention products
  are plain batched matmuls over (N, K) that XLA runs without relayout copies (on CPU a [N, K, S, F]
  key buffer made decode attention ~2x slower);
- the token at absolute position p of row n lives in slot p of row n (no ring buffer, no paging), so
  rows can sit at different offsets and a chunk is written at each row's own offset;
- a query at position p sees exactly the slots s <= p of its row. Slots past a row's end may hold
  garbage (right-padding of a chunk writes there) but are invisible until the row's next real tokens
  overwrite them, so no per-row length needs to be stored;
- writes at slots >= S are dropped, never clamped onto valid slots.
"""
from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp

from arenarl_jax.models.config import ModelConfig


@flax.struct.dataclass
class KVCache:
  k: tuple[jax.Array, ...]  # per layer [N, K, F, S]
  v: tuple[jax.Array, ...]  # per layer [N, K, S, F]

  @classmethod
  def init(cls, cfg: ModelConfig, n_rows: int, n_slots: int, dtype=None) -> "KVCache":
    dtype = dtype or cfg.dtype
    k_shape = (n_rows, cfg.n_kv_heads, cfg.head_dim, n_slots)
    v_shape = (n_rows, cfg.n_kv_heads, n_slots, cfg.head_dim)
    return cls(k=tuple(jnp.zeros(k_shape, dtype) for _ in range(cfg.n_layers)),
               v=tuple(jnp.zeros(v_shape, dtype) for _ in range(cfg.n_layers)))

  @property
  def n_rows(self) -> int:
    return self.v[0].shape[0]

  @property
  def n_slots(self) -> int:
    return self.v[0].shape[2]

  def resize(self, n_slots: int) -> "KVCache":
    """The same rows with ``n_slots`` slots: new slots are zero, slots >= n_slots are dropped."""
    def fit(x, axis):
      if n_slots <= x.shape[axis]:
        return jax.lax.slice_in_dim(x, 0, n_slots, axis=axis)
      widths = [(0, 0)] * x.ndim
      widths[axis] = (0, n_slots - x.shape[axis])
      return jnp.pad(x, widths)
    return KVCache(k=tuple(fit(x, 3) for x in self.k), v=tuple(fit(x, 2) for x in self.v))

  def take_rows(self, rows_N: jax.Array) -> "KVCache":
    """A cache whose row n is this cache's row rows_N[n] (prefix sharing: prompt -> its G rows)."""
    take = lambda x: jnp.take(x, rows_N, axis=0)
    return KVCache(k=tuple(map(take, self.k)), v=tuple(map(take, self.v)))


def _rows(positions_NT):
  n, t = positions_NT.shape
  return jnp.broadcast_to(jnp.arange(n)[:, None], (n, t))


def write_keys(buf_NKFS: jax.Array, new_NTKF: jax.Array, positions_NT: jax.Array) -> jax.Array:
  """Scatters a chunk of keys into slots = positions, row by row; out-of-range slots are dropped."""
  # Advanced indices on axes 0 and 3 around slices: the indexed view has shape [N, T, K, F].
  return buf_NKFS.at[_rows(positions_NT), :, :, positions_NT].set(
      new_NTKF.astype(buf_NKFS.dtype), mode="drop")


def write_values(buf_NKSF: jax.Array, new_NTKF: jax.Array, positions_NT: jax.Array) -> jax.Array:
  """Scatters a chunk of values into slots = positions, row by row; out-of-range slots dropped."""
  # Advanced indices on axes 0 and 2 around a slice: the indexed view has shape [N, T, K, F].
  return buf_NKSF.at[_rows(positions_NT), :, positions_NT, :].set(
      new_NTKF.astype(buf_NKSF.dtype), mode="drop")
