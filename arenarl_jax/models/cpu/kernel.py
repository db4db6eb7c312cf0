"""Attention by the compiled CPU kernels: against the KV cache (``cache_attention.cc``): the call
(``attend``) and the model's uses of it: decode (one token per row, written in place), chunks at
per-row offsets, tree branches merged with their own keys; and the training attention of full
causal sequences on ``causal_attention.cc`` (``causal``, ``causal_backward``).

Why: XLA:CPU runs cache attention as two batched library products around a materialised
[N, K, T*R, S] score tensor. At decode the products repack each (row, KV head)'s operand per call
and read every slot of the row's buffers, filled or not, plus two scatters for the new token; for
chunks the score tensor makes the softmax passes memory-bound and every query reads every slot.
The kernel reads only each query's visible slots, once, in one softmax with the prompt's shared
prefix, keeps the scores in a small per-thread buffer, and splits the (row, KV head) pairs over
XLA's intra-op threads. It computes the reference attention's function (tests check it).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec as P

from arenarl_jax.models.cpu import build
from arenarl_jax.models.kv_cache import LayerCache


def available(dtype=jnp.float32) -> bool:
  """Whether the kernel can attend to a cache of ``dtype``: float32, CPU backend, built and
  registered (``build.registered``)."""
  return jnp.dtype(dtype) == jnp.float32 and build.registered()


def _shard_map():
  return getattr(jax, "shard_map", None) or __import__(
      "jax.experimental.shard_map", fromlist=["shard_map"]).shard_map


def attend(q, k_NKFS, v_NKSF, count, prefix=None, *, new=None, group: int = 1,
           mesh: Mesh | None = None, threads: int = 0, lse: bool = False):
  """Attention against the cache: (out float32 shaped like q, keys, values), with ``lse``: (out,
  lse, keys, values), lse shaped like q without F = per query the log of its softmax normaliser
  (-1e30 for a query that sees nothing), to merge this attention with one over other keys.

  One query token per row: q [N, K, R, F] and count [N]; a chunk of T tokens per row: q [N, K, T,
  R, F] and count [N, T]. q is already scaled by F^-1/2. ``new`` = (keys [N, K, F], values [N, K,
  F], slot_N), one token per row only: first written into each row's buffers at slot_N[n]
  (dropped outside [0, S)), in place: the returned keys and values are the updated buffers
  (donate them, as decode does, and XLA writes the inputs' memory; without ``new`` they are the
  inputs). Row n's token t then sees the first count[n, t] slots of its own buffers and, given
  ``prefix`` = (keys [B, K, F, P], values [B, K, P, F], lengths_B), the first lengths_B[b] slots
  of prompt b = n // group; one softmax over both (a query that sees nothing gets zeros). With a
  ``mesh`` the rows are split over its 'data' axis (shard_map; the prefix is replicated), so each
  device runs the kernel on its own rows. ``threads``: most threads of XLA's intra-op pool one
  call uses (0: all of them).
  """
  if not build.registered():
    raise RuntimeError(f"the CPU attention kernels could not be built from "
                       f"{build.SOURCES[0].parent} (see the warning above); use the reference "
                       "attention instead")
  one_token = q.ndim == 4
  q_NKTRF = q[:, :, None] if one_token else q
  count_NT = count[:, None] if one_token else count
  n, kv, t, _, f = q_NKTRF.shape
  if prefix is None:
    pk, pv = jnp.zeros((1, kv, f, 0), jnp.float32), jnp.zeros((1, kv, 0, f), jnp.float32)
    plen, group = jnp.zeros((1,), jnp.int32), n
  else:
    pk, pv, plen = prefix
  if new is None:
    k_new = v_new = jnp.zeros((n, kv, f), jnp.float32)
    slot_N = jnp.full((n,), -1, jnp.int32)
  elif t != 1:
    raise ValueError(f"only one token per row can be written in place, got {t}")
  else:
    k_new, v_new, slot_N = new

  def call(q, k, v, k_new, v_new, slot, count, pk, pv, plen, row0):
    shapes = [jax.ShapeDtypeStruct(x.shape, jnp.float32) for x in (q, k, v, q[..., 0])]
    return jax.ffi.ffi_call(build.TARGET, shapes, input_output_aliases={1: 1, 2: 2})(
        q, k, v, k_new, v_new, slot.astype(jnp.int32), count.astype(jnp.int32), pk, pv,
        plen.astype(jnp.int32), row0.astype(jnp.int32), group=np.int64(group),
        threads=np.int64(threads))

  args = (q_NKTRF, k_NKFS, v_NKSF, k_new, v_new, slot_N, count_NT)
  if mesh is None or mesh.shape.get("data", 1) == 1:
    out, k_NKFS, v_NKSF, lse_ = call(*args, pk, pv, plen, jnp.zeros((), jnp.int32))
  else:
    def local(*a):
      return tuple(call(*a, jax.lax.axis_index("data") * a[0].shape[0]))

    rows, whole = P("data"), P()
    out, k_NKFS, v_NKSF, lse_ = _shard_map()(
        local, mesh=mesh, in_specs=(rows,) * len(args) + (whole,) * 3,
        out_specs=(rows,) * 4)(*args, pk, pv, plen)
  if one_token:
    out, lse_ = out[:, :, 0], lse_[:, :, 0]
  return (out, lse_, k_NKFS, v_NKSF) if lse else (out, k_NKFS, v_NKSF)


def _shared_prefix(layer: LayerCache, n: int):
  """(the layer's shared prefix as ``attend`` takes it, or None; rows per prompt)."""
  if layer.prefix_k is None:
    return None, n
  lengths_B = layer.prefix_lengths_B
  return (layer.prefix_k, layer.prefix_v, lengths_B), n // lengths_B.shape[0]


def _scaled(q_NTKRF):
  """[N, T, K, R, F] -> [N, K, T, R, F] scaled by F^-1/2 (the kernel's query layout)."""
  return (q_NTKRF * q_NTKRF.shape[-1] ** -0.5).transpose(0, 2, 1, 3, 4)


def decode(q_NTKRF, k_NTKF, v_NTKF, positions_NT, layer: LayerCache, *,
           mesh: Mesh | None = None):
  """A cache chunk of one token per row: (out [N, 1, K, R, F], (k_NKFS, v_NKSF)). The token is
  written in place at its position's slot, then a query at position p sees the row's slots <= p.
  ``mesh``: the rows are split over its 'data' axis."""
  n, t = q_NTKRF.shape[:2]
  if t != 1:
    raise ValueError(f"decode takes one token per row, got {t}")
  slot_N = layer.slots(positions_NT)[:, 0]
  s = layer.v.shape[2]
  prefix, group = _shared_prefix(layer, n)
  out_NKRF, k_NKFS, v_NKSF = attend(
      _scaled(q_NTKRF)[:, :, 0], layer.k, layer.v, jnp.minimum(slot_N + 1, s), prefix,
      new=(k_NTKF[:, 0], v_NTKF[:, 0], slot_N), group=group, mesh=mesh)
  return out_NKRF[:, None], (k_NKFS, v_NKSF)


def chunk(q_NTKRF, k_NTKF, v_NTKF, positions_NT, layer: LayerCache):
  """A cache chunk of T tokens per row: (out [N, T, K, R, F], (k_NKFS, v_NKSF)). The chunk is
  written with the cache's own scatter, then token t of row n sees the slots <= its position's."""
  k_NKFS, v_NKSF = layer.write(k_NTKF, v_NTKF, positions_NT)
  count_NT = jnp.clip(layer.slots(positions_NT) + 1, 0, v_NKSF.shape[2])
  prefix, group = _shared_prefix(layer, q_NTKRF.shape[0])
  out_NKTRF, k_NKFS, v_NKSF = attend(_scaled(q_NTKRF), k_NKFS, v_NKSF, count_NT, prefix,
                                     group=group)
  return out_NKTRF.transpose(0, 2, 1, 3, 4), (k_NKFS, v_NKSF)


def causal(q_NTKRF, k_NTKF, v_NTKF, mask_NT, blocks: int):
  """A full causal sequence without a cache or key mask (the training forward) on
  ``causal_attention.cc``: (out [N, T, K, R, F], lse [N, K, T*R]), the forward
  ``causal_blocks.causal_attention`` takes; token t sees keys 0..t, each read once. The kernel
  takes the model's layouts as they are (no transposes around the call)."""
  if mask_NT is not None:
    raise ValueError("kernel.causal takes no key mask (use causal_blocks.blocked_forward)")
  del blocks  # the kernel reads each query's visible keys; no blocks
  n, t, kv, r, f = q_NTKRF.shape
  shapes = (jax.ShapeDtypeStruct(q_NTKRF.shape, jnp.float32),
            jax.ShapeDtypeStruct((n, kv, t, r), jnp.float32))
  out, lse_NKTR = jax.ffi.ffi_call(build.CAUSAL_TARGET, shapes)(q_NTKRF, k_NTKF, v_NTKF)
  return out, lse_NKTR.reshape(n, kv, t * r)


def causal_backward(q_NTKRF, k_NTKF, v_NTKF, mask_NT, out_NTKRF, lse_NKX, dout_NTKRF,
                    blocks: int):
  """The backward of ``causal`` on ``causal_attention.cc``: (dq, dk, dv) shaped like q, k, v,
  from the forward's output and log-normaliser (the backward ``causal_blocks.causal_attention``
  takes). Float32; no key mask."""
  if mask_NT is not None:
    raise ValueError("kernel.causal_backward takes no key mask (use causal_blocks)")
  del blocks  # the kernel tiles the queries itself and never scores a future key
  n, t, kv, r, _ = q_NTKRF.shape
  shapes = [jax.ShapeDtypeStruct(x.shape, jnp.float32) for x in (q_NTKRF, k_NTKF, v_NTKF)]
  return tuple(jax.ffi.ffi_call(build.BACKWARD_TARGET, shapes)(
      q_NTKRF, k_NTKF, v_NTKF, out_NTKRF, lse_NKX.reshape(n, kv, t, r),
      dout_NTKRF.astype(jnp.float32)))


def branch(q_NTKRF, k_NTKF, v_NTKF, layer: LayerCache, count_NT, sees_TT):
  """Tree branches: the cache part on the kernel (the first count_NT slots, and the shared prefix;
  no [.., T, S] score tensor) merged with the branch tokens' own attention (``sees_TT``) through
  both parts' softmax normalisers. Out [N, T, K, R, F]; nothing is written."""
  n, t = q_NTKRF.shape[:2]
  q_NKTRF = _scaled(q_NTKRF)
  prefix, group = _shared_prefix(layer, n)
  out_NKTRF, lse_NKTR, _, _ = attend(q_NKTRF, layer.k, layer.v, count_NT, prefix, group=group,
                                     lse=True)
  k_NKFT = k_NTKF.transpose(0, 2, 3, 1).astype(layer.k.dtype)
  v_NKTF = v_NTKF.transpose(0, 2, 1, 3).astype(layer.v.dtype)
  scores_NKTRX = jnp.einsum("nkqrf,nkfx->nkqrx", q_NKTRF, k_NKFT,
                            preferred_element_type=jnp.float32)
  scores_NKTRX = jnp.where(sees_TT[:, None, :], scores_NKTRX, -1e30)
  self_lse_NKTR = jax.nn.logsumexp(scores_NKTRX, axis=-1)
  self_NKTRF = jnp.einsum("nkqrx,nkxf->nkqrf", jnp.exp(scores_NKTRX - self_lse_NKTR[..., None]),
                          v_NKTF)
  total_NKTR = jnp.logaddexp(lse_NKTR, self_lse_NKTR)
  out_NKTRF = (jnp.exp(lse_NKTR - total_NKTR)[..., None] * out_NKTRF
               + jnp.exp(self_lse_NKTR - total_NKTR)[..., None] * self_NKTRF)
  return out_NKTRF.transpose(0, 2, 1, 3, 4)
