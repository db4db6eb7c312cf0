"""The KV cache: per-layer key/value buffers indexed by position, optionally after a shared prefix.

Contract (used by the sampler, the local judge and the model):
- two layouts, chosen by the attention implementation that reads the cache (its
  ``cache_layout``; ``Transformer.cache_layout``), both with rows on axis 0 (sharded over 'data'):
  - ``nkfs`` (the reference and CPU attention): per layer one key buffer [N, K, F, S]
    (transposed: slots on the minor axis) and one value buffer [N, K, S, F]. Both attention
    products are then plain batched matmuls over (N, K) that XLA:CPU runs without relayout
    copies (a [N, K, S, F] key buffer makes it copy the keys into another layout for the score
    product at every decode step; see benchmarks/README.md, Sampler);
  - ``nskf`` (``jax.nn.dot_product_attention``'s own [N, S, K, F], for keys and values): a
    decode step's write of one slot per row is then a contiguous [K, F] block, which the TPU
    compiler scatters in place. Into an ``nkfs`` buffer it scatters in a layout of its own
    choosing ([N, S, K, F]-like) and so keeps a second copy of the whole cache across the decode
    loop (benchmarks/README.md, Pod plan);
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

LAYOUTS = ("nkfs", "nskf")
# The slot axis of (keys, values) in each layout.
_SLOT_AXES = {"nkfs": (3, 2), "nskf": (1, 1)}


def check_layout(layout: str) -> str:
  if layout not in LAYOUTS:
    raise ValueError(f"KV cache layout must be one of {LAYOUTS}, got {layout!r}")
  return layout


def layout_of(model) -> str:
  """The layout of ``model``'s caches (``Transformer.cache_layout``); ``nkfs`` for a model that
  names none (a stand-in with ``cfg`` and ``hidden`` only, as tests use)."""
  return check_layout(getattr(model, "cache_layout", "nkfs"))


def buffer_shapes(layout: str, rows: int, kv_heads: int, head_dim: int,
                  slots: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
  """(key shape, value shape) of one layer's buffers in ``layout``."""
  if check_layout(layout) == "nkfs":
    return (rows, kv_heads, head_dim, slots), (rows, kv_heads, slots, head_dim)
  return (rows, slots, kv_heads, head_dim), (rows, slots, kv_heads, head_dim)


def as_nkfs(k, v, layout: str):
  """(keys [N, K, F, S], values [N, K, S, F]) of buffers stored in ``layout`` (transposed
  copies for ``nskf``: what the reference attention reads)."""
  if layout == "nkfs":
    return k, v
  return k.transpose(0, 2, 3, 1), v.transpose(0, 2, 1, 3)


def as_nskf(k, v, layout: str):
  """(keys, values) [N, S, K, F] of buffers stored in ``layout``."""
  if layout == "nskf":
    return k, v
  return k.transpose(0, 3, 1, 2), v.transpose(0, 2, 1, 3)


@flax.struct.dataclass
class SharedPrefix:
  """Keys/values of B prompts (per layer [B, K, F, P] and [B, K, P, F] in ``nkfs``, both
  [B, P, K, F] in ``nskf``), lengths_B valid slots."""

  k: tuple[jax.Array, ...]
  v: tuple[jax.Array, ...]
  lengths_B: jax.Array
  layout: str = flax.struct.field(pytree_node=False, default="nkfs")


@flax.struct.dataclass
class LayerCache:
  """One layer's view: the rows' buffers, where they start, and the shared prefix if any."""

  k: jax.Array  # nkfs: [N, K, F, S]; nskf: [N, S, K, F]
  v: jax.Array  # nkfs: [N, K, S, F]; nskf: [N, S, K, F]
  start_N: jax.Array  # absolute position of slot 0 of each row's buffer
  prefix_k: jax.Array | None = None  # nkfs: [B, K, F, P]; nskf: [B, P, K, F]
  prefix_v: jax.Array | None = None  # nkfs: [B, K, P, F]; nskf: [B, P, K, F]
  prefix_lengths_B: jax.Array | None = None
  layout: str = flax.struct.field(pytree_node=False, default="nkfs")

  @property
  def n_slots(self) -> int:
    return self.v.shape[_SLOT_AXES[self.layout][1]]

  @property
  def prefix_slots(self) -> int:
    return self.prefix_v.shape[_SLOT_AXES[self.layout][1]]

  def slots(self, positions_NT: jax.Array) -> jax.Array:
    """Buffer slots of absolute positions; positions inside the prefix map past the end (drop)."""
    slots_NT = positions_NT - self.start_N[:, None]
    return jnp.where(slots_NT < 0, self.n_slots, slots_NT)

  def write(self, k_NTKF: jax.Array, v_NTKF: jax.Array, positions_NT: jax.Array):
    """(key buffer, value buffer) with a chunk written at its positions."""
    slots_NT = self.slots(positions_NT)
    if self.layout == "nskf":
      return write_slots(self.k, k_NTKF, slots_NT), write_slots(self.v, v_NTKF, slots_NT)
    return write_keys(self.k, k_NTKF, slots_NT), write_values(self.v, v_NTKF, slots_NT)


@flax.struct.dataclass
class KVCache:
  k: tuple[jax.Array, ...]  # per layer: nkfs [N, K, F, S]; nskf [N, S, K, F]
  v: tuple[jax.Array, ...]  # per layer: nkfs [N, K, S, F]; nskf [N, S, K, F]
  prefix: SharedPrefix | None = None
  layout: str = flax.struct.field(pytree_node=False, default="nkfs")

  @classmethod
  def init(cls, cfg: ModelConfig, n_rows: int, n_slots: int, dtype=None,
           prefix: SharedPrefix | None = None, layout: str = "nkfs") -> "KVCache":
    dtype = dtype or cfg.act_dtype
    if prefix is not None and prefix.layout != layout:
      raise ValueError(f"a {layout} cache cannot take a {prefix.layout} prefix")
    k_shape, v_shape = buffer_shapes(layout, n_rows, cfg.n_kv_heads, cfg.head_dim, n_slots)
    return cls(k=tuple(jnp.zeros(k_shape, dtype) for _ in range(cfg.n_layers)),
               v=tuple(jnp.zeros(v_shape, dtype) for _ in range(cfg.n_layers)), prefix=prefix,
               layout=layout)

  @property
  def n_rows(self) -> int:
    return self.v[0].shape[0]

  @property
  def n_slots(self) -> int:
    """Slots of each row's own buffer (after the shared prefix, if any)."""
    return self.v[0].shape[_SLOT_AXES[self.layout][1]]

  @property
  def head_axis(self) -> int:
    """The axis of the KV heads in every buffer (the one the 'tensor' mesh axis splits)."""
    return 1 if self.layout == "nkfs" else 2

  @property
  def position_bound(self) -> int:
    """A static bound on the positions the rows can hold: every position is below it."""
    prefix = 0 if self.prefix is None else self.prefix.v[0].shape[_SLOT_AXES[self.layout][1]]
    return self.n_slots + prefix

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
                      None if p is None else p.lengths_B, layout=self.layout)

  def resize(self, n_slots: int) -> "KVCache":
    """The same rows with ``n_slots`` buffer slots: new slots are zero, slots >= n_slots dropped."""
    def fit(x, axis):
      if n_slots <= x.shape[axis]:
        return jax.lax.slice_in_dim(x, 0, n_slots, axis=axis)
      widths = [(0, 0)] * x.ndim
      widths[axis] = (0, n_slots - x.shape[axis])
      return jnp.pad(x, widths)
    k_axis, v_axis = _SLOT_AXES[self.layout]
    return self.replace(k=tuple(fit(x, k_axis) for x in self.k),
                        v=tuple(fit(x, v_axis) for x in self.v))

  def take_rows(self, rows_N: jax.Array) -> "KVCache":
    """A cache whose row n is this cache's row rows_N[n] (a copy per row; no prefix)."""
    if self.prefix is not None:
      raise ValueError("take_rows copies whole rows; a cache with a shared prefix has none")
    take = lambda x: jnp.take(x, rows_N, axis=0)
    return KVCache(k=tuple(map(take, self.k)), v=tuple(map(take, self.v)), layout=self.layout)

  def as_prefix(self, lengths_B: jax.Array) -> SharedPrefix:
    """This cache's rows as the shared prefix of B prompts (lengths_B valid slots each)."""
    if self.prefix is not None:
      raise ValueError("a cache that already has a prefix cannot become one")
    return SharedPrefix(k=self.k, v=self.v, lengths_B=lengths_B, layout=self.layout)


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


def write_slots(buf_NSKF: jax.Array, new_NTKF: jax.Array, slots_NT: jax.Array) -> jax.Array:
  """Scatters a chunk into the given slots of an ``nskf`` buffer, row by row (a [K, F] block per
  token); out-of-range slots are dropped."""
  return buf_NSKF.at[_rows(slots_NT), slots_NT].set(new_NTKF.astype(buf_NSKF.dtype), mode="drop")
