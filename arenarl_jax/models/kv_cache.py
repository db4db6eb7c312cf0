"""The KV cache: per-layer key/value buffers indexed by position, optionally after a shared prefix.

Contract (used by the sampler, the local judge and the model):
- per layer one key buffer [N, K, F, S] (transposed: slots on the minor axis) and one value buffer
  [N, K, S, F]; rows on axis 0 (sharded over 'data'). With this layout both attention products
  are plain batched matmuls over (N, K) that XLA runs without relayout copies (a [N, K, S, F] key
  buffer makes XLA:CPU copy the keys into another layout for the score product at every decode
  step; see benchmarks/README.md, Sampler);
- without a prefix, the token at absolute position p of row n lives in slot p of row n (no ring
  buffer, no paging), so rows can sit at different offsets and a chunk is written at each row's own
  offset;
- with a ``SharedPrefix`` (the sampler's prompts), positions below the prefix length of row n's
  prompt live ONCE per prompt in the prefix, shared by the G = N / B rows of its group (row n
  belongs to prompt n // G), and position p >= that length lives in slot p - length of the row's
  own buffer. Decode then reads each prompt's keys once per group instead of once per row;
- a query at position p sees exactly the positions <= p of its row. Slots past a row's end may hold
  garbage (right-padding of a chunk writes there) but are invisible until the row's next real tokens
  overwrite them, so no per-row length needs to be stored;
- writes at slots outside [0, S) are dropped, never clamped onto valid slots.
"""
from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp

from arenarl_jax.models.config import ModelConfig


@flax.struct.dataclass
class SharedPrefix:
  """Keys/values of B prompts (per layer [B, K, F, P] and [B, K, P, F]), lengths_B valid slots."""

  k: tuple[jax.Array, ...]
  v: tuple[jax.Array, ...]
  lengths_B: jax.Array


@flax.struct.dataclass
class LayerCache:
  """One layer's view: the rows' buffers, where they start, and the shared prefix if any."""

  k: jax.Array  # [N, K, F, S]
  v: jax.Array  # [N, K, S, F]
  start_N: jax.Array  # absolute position of slot 0 of each row's buffer
  prefix_k: jax.Array | None = None  # [B, K, F, P]
  prefix_v: jax.Array | None = None  # [B, K, P, F]
  prefix_lengths_B: jax.Array | None = None

  def slots(self, positions_NT: jax.Array) -> jax.Array:
    """Buffer slots of absolute positions; positions inside the prefix map past the end (drop)."""
    slots_NT = positions_NT - self.start_N[:, None]
    return jnp.where(slots_NT < 0, self.v.shape[2], slots_NT)

  def write(self, k_NTKF: jax.Array, v_NTKF: jax.Array, positions_NT: jax.Array):
    """(key buffer, value buffer) with a chunk written at its positions."""
    slots_NT = self.slots(positions_NT)
    return write_keys(self.k, k_NTKF, slots_NT), write_values(self.v, v_NTKF, slots_NT)


@flax.struct.dataclass
class KVCache:
  k: tuple[jax.Array, ...]  # per layer [N, K, F, S]
  v: tuple[jax.Array, ...]  # per layer [N, K, S, F]
  prefix: SharedPrefix | None = None

  @classmethod
  def init(cls, cfg: ModelConfig, n_rows: int, n_slots: int, dtype=None,
           prefix: SharedPrefix | None = None) -> "KVCache":
    dtype = dtype or cfg.act_dtype
    k_shape = (n_rows, cfg.n_kv_heads, cfg.head_dim, n_slots)
    v_shape = (n_rows, cfg.n_kv_heads, n_slots, cfg.head_dim)
    return cls(k=tuple(jnp.zeros(k_shape, dtype) for _ in range(cfg.n_layers)),
               v=tuple(jnp.zeros(v_shape, dtype) for _ in range(cfg.n_layers)), prefix=prefix)

  @property
  def n_rows(self) -> int:
    return self.v[0].shape[0]

  @property
  def n_slots(self) -> int:
    """Slots of each row's own buffer (after the shared prefix, if any)."""
    return self.v[0].shape[2]

  @property
  def position_bound(self) -> int:
    """A static bound on the positions the rows can hold: every position is below it."""
    return self.n_slots + (0 if self.prefix is None else self.prefix.v[0].shape[2])

  def start_N(self) -> jax.Array:
    """Absolute position of slot 0 of each row's buffer: its prompt's prefix length, or 0."""
    if self.prefix is None:
      return jnp.zeros((self.n_rows,), jnp.int32)
    return jnp.repeat(self.prefix.lengths_B, self.n_rows // self.prefix.lengths_B.shape[0],
                      total_repeat_length=self.n_rows)

  def layer(self, i: int, start_N: jax.Array | None = None) -> LayerCache:
    """Layer i's view; pass ``start_N()`` when taking every layer, to build it once."""
    p = self.prefix
    return LayerCache(self.k[i], self.v[i], self.start_N() if start_N is None else start_N,
                      None if p is None else p.k[i], None if p is None else p.v[i],
                      None if p is None else p.lengths_B)

  def resize(self, n_slots: int) -> "KVCache":
    """The same rows with ``n_slots`` buffer slots: new slots are zero, slots >= n_slots dropped."""
    def fit(x, axis):
      if n_slots <= x.shape[axis]:
        return jax.lax.slice_in_dim(x, 0, n_slots, axis=axis)
      widths = [(0, 0)] * x.ndim
      widths[axis] = (0, n_slots - x.shape[axis])
      return jnp.pad(x, widths)
    return self.replace(k=tuple(fit(x, 3) for x in self.k), v=tuple(fit(x, 2) for x in self.v))

  def take_rows(self, rows_N: jax.Array) -> "KVCache":
    """A cache whose row n is this cache's row rows_N[n] (a copy per row; no prefix)."""
    if self.prefix is not None:
      raise ValueError("take_rows copies whole rows; a cache with a shared prefix has none")
    take = lambda x: jnp.take(x, rows_N, axis=0)
    return KVCache(k=tuple(map(take, self.k)), v=tuple(map(take, self.v)))

  def as_prefix(self, lengths_B: jax.Array) -> SharedPrefix:
    """This cache's rows as the shared prefix of B prompts (lengths_B valid slots each)."""
    if self.prefix is not None:
      raise ValueError("a cache that already has a prefix cannot become one")
    return SharedPrefix(k=self.k, v=self.v, lengths_B=lengths_B)


def _rows(positions_NT):
  n, t = positions_NT.shape
  return jnp.broadcast_to(jnp.arange(n)[:, None], (n, t))


def write_keys(buf_NKFS: jax.Array, new_NTKF: jax.Array, slots_NT: jax.Array) -> jax.Array:
  """Scatters a chunk of keys into the given slots, row by row; out-of-range slots are dropped."""
  # Advanced indices on axes 0 and 3 around slices: the indexed view has shape [N, T, K, F].
  return buf_NKFS.at[_rows(slots_NT), :, :, slots_NT].set(
      new_NTKF.astype(buf_NKFS.dtype), mode="drop")


def write_values(buf_NKSF: jax.Array, new_NTKF: jax.Array, slots_NT: jax.Array) -> jax.Array:
  """Scatters a chunk of values into the given slots, row by row; out-of-range slots dropped."""
  # Advanced indices on axes 0 and 2 around a slice: the indexed view has shape [N, T, K, F].
  return buf_NKSF.at[_rows(slots_NT), :, slots_NT, :].set(
      new_NTKF.astype(buf_NKSF.dtype), mode="drop")
