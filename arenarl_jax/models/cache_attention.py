"""Attention against the KV cache on CPU as a compiled kernel (``kernels/cache_attention.cc``, an
XLA FFI call): decode (one token per row, ``decode_mix``) and chunks of tokens per row
(``chunk_mix``); ``attend`` is the call itself.

Why: at decode (one token per row) XLA:CPU runs attention as two batched library products per
layer that pack each (row, KV head)'s operand on every call and read every slot of the row's
buffers, filled or not, plus two scatters for the new token: ~1 ms of a layer's ~3 ms on the
2-core development CPU, on the step's critical path. The kernel writes the new token in place,
reads only each row's visible slots, once, in one softmax with the prompt's shared prefix, and
splits the (row, KV head) pairs over XLA's intra-op threads: sampler 235 -> 283 tok/s
(benchmarks/README.md, session 7). For chunks (the local judge's text) XLA materialises a [N, K,
T*R, S] score tensor per layer (tens of MB: memory-bound softmax passes) and every query reads
every slot; the kernel keeps each query's scores in a small per-thread buffer and reads only the
visible slots: one layer's attention for 4 rows x 256 tokens after ~1,100 slots 38-47 -> 14-15
ms, and a judge chunk 9.2-11.0 -> 7.6-8.2 s (session 8).

The kernel is built from source on first use with the system C++ compiler and jaxlib's FFI
headers, cached on disk by a hash of (source, flags, jax version), and registered with XLA.
``available()`` is False where that is impossible (not CPU, no compiler, a build error: logged
once); callers then use the model's own XLA attention, which computes the same function.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import pathlib
import platform
import subprocess
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec as P

_SOURCE = pathlib.Path(__file__).resolve().parent.parent / "kernels" / "cache_attention.cc"
_TARGET = "arenarl_cache_attention"
_SYMBOL = "ArenaCacheAttention"
# Set to 0 to force the XLA attention (A/B comparisons, debugging).
ENV_SWITCH = "ARENARL_ATTENTION_KERNEL"
CACHE_ENV = "ARENARL_KERNEL_CACHE"


def _flags() -> list[str]:
  # -ffast-math lets the softmax's exp loop use glibc's vector expf.
  flags = ["-O3", "-ffast-math", "-fPIC", "-shared", "-std=c++17", "-w"]
  if platform.machine() in ("x86_64", "AMD64"):
    # Not -march=native: on this VM it enables instructions the CPU reports but cannot run.
    try:
      cpu = pathlib.Path("/proc/cpuinfo").read_text().split()
    except OSError:
      cpu = []
    flags += [f"-m{x}" for x in ("avx2", "fma") if x in cpu]
  return flags


def _cache_dir() -> pathlib.Path:
  root = os.environ.get(CACHE_ENV) or os.path.join(
      os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "arenarl_jax", "kernels")
  return pathlib.Path(root)


def build() -> pathlib.Path:
  """The compiled kernel library (compiled now unless a cached build of this version exists)."""
  flags = _flags()
  compiler = os.environ.get("CXX", "g++")
  source = _SOURCE.read_bytes()
  tag = hashlib.sha256(source + " ".join([compiler, *flags, jax.__version__]).encode()).hexdigest()
  out = _cache_dir() / f"cache_attention-{tag[:16]}.so"
  if out.exists():
    return out
  out.parent.mkdir(parents=True, exist_ok=True)
  # Compile to a private name, then rename: concurrent processes never load a partial file.
  fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
  os.close(fd)
  try:
    cmd = [compiler, *flags, f"-I{jax.ffi.include_dir()}", str(_SOURCE), "-o", tmp]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode:
      raise RuntimeError(f"compiling {_SOURCE} failed ({' '.join(cmd)}):\n{done.stderr[-2000:]}")
    os.replace(tmp, out)
  finally:
    if os.path.exists(tmp):
      os.unlink(tmp)
  return out


@functools.cache
def _registered() -> bool:
  try:
    lib = ctypes.cdll.LoadLibrary(str(build()))
    jax.ffi.register_ffi_target(_TARGET, jax.ffi.pycapsule(getattr(lib, _SYMBOL)), platform="cpu")
    return True
  except Exception as err:  # pylint: disable=broad-except
    logging.warning("cache attention kernel unavailable, using XLA attention: %s", err)
    return False


def available(dtype=jnp.float32) -> bool:
  """Whether decode can use the kernel: CPU backend, float32 cache, built and registered, and not
  switched off with ARENARL_ATTENTION_KERNEL=0."""
  if os.environ.get(ENV_SWITCH, "1") == "0" or jax.default_backend() != "cpu":
    return False
  return jnp.dtype(dtype) == jnp.float32 and _registered()


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
  if not _registered():
    raise RuntimeError(f"the cache attention kernel could not be built from {_SOURCE} (see the "
                       "warning above); use the model's Attention.mix instead")
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
    return jax.ffi.ffi_call(_TARGET, shapes, input_output_aliases={1: 1, 2: 2})(
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


def _shared_prefix(cache_kv, n: int):
  """(the layer's shared prefix as ``attend`` takes it, or None; rows per prompt)."""
  if cache_kv.prefix_k is None:
    return None, n
  lengths_B = cache_kv.prefix_lengths_B
  return (cache_kv.prefix_k, cache_kv.prefix_v, lengths_B), n // lengths_B.shape[0]


def decode_mix(attn, q_NTHF, k_NTKF, v_NTKF, positions_NT, cache_kv, *,
               mesh: Mesh | None = None):
  """``Attention.mix`` for one token per row with a cache, on the kernel: (out [N, 1, K, R, F],
  (k_NKFS, v_NKSF)). Same cache write and visibility: the token goes to its position's slot and a
  query at position p sees the slots <= p of its row."""
  cfg = attn.cfg
  n, t = q_NTHF.shape[:2]
  if t != 1:
    raise ValueError(f"decode_mix takes one token per row, got {t}")
  slot_N = cache_kv.slots(positions_NT)[:, 0]
  s = cache_kv.v.shape[2]
  kv = cfg.n_kv_heads
  q_NKRF = q_NTHF.reshape(n, kv, cfg.n_heads // kv, cfg.head_dim) * cfg.head_dim ** -0.5
  prefix, group = _shared_prefix(cache_kv, n)
  # Float32 throughout: callers use the kernel only where available(cache dtype) holds.
  out_NKRF, k_NKFS, v_NKSF = attend(
      q_NKRF, cache_kv.k, cache_kv.v, jnp.minimum(slot_N + 1, s), prefix,
      new=(k_NTKF[:, 0], v_NTKF[:, 0], slot_N), group=group, mesh=mesh)
  return out_NKRF[:, None], (k_NKFS, v_NKSF)


def chunk_mix(attn, q_NTHF, k_NTKF, v_NTKF, positions_NT, cache_kv):
  """``Attention.mix`` for a chunk of tokens per row with a cache, on the kernel: (out [N, T, K,
  R, F], (k_NKFS, v_NKSF)). The chunk is written with the cache's own scatter, then token t of row
  n sees the slots <= its position's slot, as in the model."""
  cfg = attn.cfg
  n, t = q_NTHF.shape[:2]
  kv = cfg.n_kv_heads
  k_NKFS, v_NKSF = cache_kv.write(k_NTKF, v_NTKF, positions_NT)
  count_NT = jnp.clip(cache_kv.slots(positions_NT) + 1, 0, v_NKSF.shape[2])
  q_NKTRF = (q_NTHF.reshape(n, t, kv, cfg.n_heads // kv, cfg.head_dim)
             * cfg.head_dim ** -0.5).transpose(0, 2, 1, 3, 4)
  prefix, group = _shared_prefix(cache_kv, n)
  out_NKTRF, k_NKFS, v_NKSF = attend(q_NKTRF, k_NKFS, v_NKSF, count_NT, prefix, group=group)
  return out_NKTRF.transpose(0, 2, 1, 3, 4), (k_NKFS, v_NKSF)
