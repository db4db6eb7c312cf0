"""Decode attention on CPU as a compiled kernel (``kernels/decode_attention.cc``, an XLA FFI call).

Why: at decode (one token per row) XLA:CPU runs attention as two batched library products per
layer that pack each (row, KV head)'s operand on every call and read every slot of the row's
buffers, filled or not, plus two scatters for the new token: ~1 ms of a layer's ~3 ms on the
2-core development CPU, on the step's critical path. The kernel writes the new token in place,
reads only each row's visible slots, once, in one softmax with the prompt's shared prefix, and
splits the (row, KV head) pairs over XLA's intra-op threads: sampler 235 -> 283 tok/s
(benchmarks/README.md, session 7).

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

_SOURCE = pathlib.Path(__file__).resolve().parent.parent / "kernels" / "decode_attention.cc"
_TARGET = "arenarl_decode_attention"
_SYMBOL = "ArenaDecodeAttention"
# Set to 0 to force the XLA attention (A/B comparisons, debugging).
ENV_SWITCH = "ARENARL_DECODE_KERNEL"
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
  out = _cache_dir() / f"decode_attention-{tag[:16]}.so"
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
    logging.warning("decode attention kernel unavailable, using XLA attention: %s", err)
    return False


def available(dtype=jnp.float32) -> bool:
  """Whether decode can use the kernel: CPU backend, float32 cache, built and registered, and not
  switched off with ARENARL_DECODE_KERNEL=0."""
  if os.environ.get(ENV_SWITCH, "1") == "0" or jax.default_backend() != "cpu":
    return False
  return jnp.dtype(dtype) == jnp.float32 and _registered()


def _shard_map():
  return getattr(jax, "shard_map", None) or __import__(
      "jax.experimental.shard_map", fromlist=["shard_map"]).shard_map


def attend(q_NKRF, k_NKFS, v_NKSF, count_N, prefix=None, *, new=None, group: int = 1,
           mesh: Mesh | None = None, threads: int = 0):
  """Attention of one query token per row: (out [N, K, R, F] float32, keys, values).

  q_NKRF is already scaled by F^-1/2. ``new`` = (keys [N, K, F], values [N, K, F], slot_N):
  first written into each row's buffers at slot_N[n] (dropped outside [0, S)), in place: the
  returned keys and values are the updated buffers (donate them, as decode does, and XLA writes
  the inputs' memory). Row n then sees the first count_N[n] slots of its own buffers and, given
  ``prefix`` = (keys [B, K, F, P], values [B, K, P, F], lengths_B), the first lengths_B[b] slots
  of prompt b = n // group; one softmax over both (a row that sees nothing gets zeros). With a
  ``mesh`` the rows are split over its 'data' axis (shard_map; the prefix is replicated), so each
  device runs the kernel on its own rows. ``threads``: most threads of XLA's intra-op pool one
  call uses (0: all of them).
  """
  if not _registered():
    raise RuntimeError(f"the decode attention kernel could not be built from {_SOURCE} (see the "
                       "warning above); use the model's Attention.mix instead")
  n, kv, _, f = q_NKRF.shape
  if prefix is None:
    pk, pv = jnp.zeros((1, kv, f, 0), jnp.float32), jnp.zeros((1, kv, 0, f), jnp.float32)
    plen, group = jnp.zeros((1,), jnp.int32), n
  else:
    pk, pv, plen = prefix
  if new is None:
    k_new = v_new = jnp.zeros((n, kv, f), jnp.float32)
    slot_N = jnp.full((n,), -1, jnp.int32)
  else:
    k_new, v_new, slot_N = new

  def call(q, k, v, k_new, v_new, slot, count, pk, pv, plen, row0):
    shapes = [jax.ShapeDtypeStruct(x.shape, jnp.float32) for x in (q, k, v)]
    return jax.ffi.ffi_call(_TARGET, shapes, input_output_aliases={1: 1, 2: 2})(
        q, k, v, k_new, v_new, slot.astype(jnp.int32), count.astype(jnp.int32), pk, pv,
        plen.astype(jnp.int32), row0.astype(jnp.int32), group=np.int64(group),
        threads=np.int64(threads))

  args = (q_NKRF, k_NKFS, v_NKSF, k_new, v_new, slot_N, count_N)
  if mesh is None or mesh.shape.get("data", 1) == 1:
    return tuple(call(*args, pk, pv, plen, jnp.zeros((), jnp.int32)))

  def local(*a):
    return tuple(call(*a, jax.lax.axis_index("data") * a[0].shape[0]))

  rows, whole = P("data"), P()
  return _shard_map()(local, mesh=mesh, in_specs=(rows,) * len(args) + (whole,) * 3,
                      out_specs=(rows,) * 3)(*args, pk, pv, plen)


def mix(attn, q_NTHF, k_NTKF, v_NTKF, positions_NT, cache_kv, *, mesh: Mesh | None = None):
  """``Attention.mix`` for one token per row with a cache, on the kernel: (out [N, 1, K, R, F],
  (k_NKFS, v_NKSF)). Same cache write and visibility: the token goes to its position's slot and a
  query at position p sees the slots <= p of its row."""
  cfg = attn.cfg
  n, t = q_NTHF.shape[:2]
  if t != 1:
    raise ValueError(f"decode_attention.mix takes one token per row, got {t}")
  slot_N = cache_kv.slots(positions_NT)[:, 0]
  s = cache_kv.v.shape[2]
  kv = cfg.n_kv_heads
  q_NKRF = q_NTHF.reshape(n, kv, cfg.n_heads // kv, cfg.head_dim) * cfg.head_dim ** -0.5
  prefix = None
  if cache_kv.prefix_k is not None:
    prefix = (cache_kv.prefix_k, cache_kv.prefix_v, cache_kv.prefix_lengths_B)
  group = n // (1 if prefix is None else prefix[2].shape[0])
  # Float32 throughout: callers use the kernel only where available(cache dtype) holds.
  out_NKRF, k_NKFS, v_NKSF = attend(
      q_NKRF, cache_kv.k, cache_kv.v, jnp.minimum(slot_N + 1, s), prefix,
      new=(k_NTKF[:, 0], v_NTKF[:, 0], slot_N), group=group, mesh=mesh)
  return out_NKRF[:, None], (k_NKFS, v_NKSF)
