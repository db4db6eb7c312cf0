"""Builds, verifies and registers the CPU attention kernels (XLA FFI): attention against a KV cache
(``cache_attention.cc``) and the training attention of full causal sequences, forward and
backward (``causal_attention.cc``), both on the tiles of ``attention_tiles.h``.

The kernels are compiled into one library on first use with the system C++ compiler (``$CXX``,
default g++) and jaxlib's FFI headers, and cached on disk by a hash of (sources, compiler, flags,
jax version) in ``$ARENARL_KERNEL_CACHE`` (default ``kernels`` in the package's cache root,
``cache_dirs``: ``~/.cache/arenarl_jax/kernels``). A shared library is code this process runs,
so a cached one is loaded only when
- its directory is owned by the current user and not writable by group or others (it is created
  0700), and the library file likewise, and
- its SHA-256 equals the one recorded next to it when it was built.
Otherwise it is rebuilt: in place when only the file fails its check, in a fresh private
temporary directory when the cache directory itself is not safe (with a warning).

``registered()`` is False where the kernel cannot be used (not CPU, no compiler, a build error:
logged once); the model then uses the reference attention. With ``ARENARL_REQUIRE_KERNEL=1``
(CI sets it where a compiler exists) a failed build raises instead, so the kernel's tests fail
rather than skip.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import pathlib
import stat
import subprocess
import tempfile

import jax

from arenarl_jax import cache_dirs
from arenarl_jax.models.cpu import isa

_HERE = pathlib.Path(__file__).resolve().parent
SOURCES = (_HERE / "cache_attention.cc", _HERE / "causal_attention.cc")
HEADERS = (_HERE / "attention_tiles.h",)
TARGET = "arenarl_cache_attention"
CAUSAL_TARGET = "arenarl_causal_attention"
BACKWARD_TARGET = "arenarl_causal_attention_backward"
ISA_SYMBOL = "ArenaKernelIsa"  # const char* (): the variant the library was compiled as
_SYMBOLS = {TARGET: "ArenaCacheAttention", CAUSAL_TARGET: "ArenaCausalAttention",
            BACKWARD_TARGET: "ArenaCausalAttentionBackward"}
CACHE_ENV = "ARENARL_KERNEL_CACHE"
REQUIRE_ENV = "ARENARL_REQUIRE_KERNEL"


ISA_ENV = "ARENARL_KERNEL_ISA"


def variant() -> str:
  """The variant to build: ``$ARENARL_KERNEL_ISA`` if set (it must be one this CPU runs), else
  the best this CPU supports. Forcing a narrower one keeps its code path tested on a wider CPU."""
  supported = isa.supported_isas()
  wanted = os.environ.get(ISA_ENV, "").strip() or "auto"
  if wanted == "auto":
    return supported[0]
  if wanted not in isa.ISAS:
    raise ValueError(f"{ISA_ENV}={wanted!r}: expected auto or one of {sorted(isa.ISAS)}")
  if wanted not in supported:
    raise ValueError(f"{ISA_ENV}={wanted!r}: this CPU supports only {list(supported)}")
  return wanted


def _flags(variant: str) -> list[str]:
  # -ffast-math lets the softmax's exp loop use glibc's vector expf.
  return ["-O3", "-ffast-math", "-fPIC", "-shared", "-std=c++20", "-w", *isa.ISAS[variant][0]]


def is_private(path: pathlib.Path) -> bool:
  """Owned by this user and not writable by group or others (so nobody else can swap it)."""
  try:
    st = os.stat(path)
  except OSError:
    return False
  return st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _sha256(path: pathlib.Path) -> str:
  return hashlib.sha256(path.read_bytes()).hexdigest()


def _verified(lib: pathlib.Path) -> bool:
  """The cached library passes the ownership, permission and recorded-hash checks."""
  digest = lib.with_suffix(".sha256")
  if not (lib.exists() and digest.exists() and is_private(lib) and is_private(digest)):
    return False
  return digest.read_text().strip() == _sha256(lib)


def _private_dir(folder: pathlib.Path) -> pathlib.Path:
  """``folder`` (created 0700 when missing) if it is safe, else a fresh private temp dir."""
  folder.parent.mkdir(parents=True, exist_ok=True)
  try:
    folder.mkdir(mode=0o700)
  except FileExistsError:
    pass
  if is_private(folder):
    return folder
  logging.warning("kernel cache %s is not private to this user (owner or permissions); "
                  "building in a temporary directory instead", folder)
  return pathlib.Path(tempfile.mkdtemp(prefix="arenarl_kernels_"))


def build() -> pathlib.Path:
  """The compiled kernel library for ``variant()``: a verified cached build, else compiled now."""
  flags = _flags(variant())
  compiler = os.environ.get("CXX", "g++")
  source = b"".join(path.read_bytes() for path in (*SOURCES, *HEADERS))
  tag = hashlib.sha256(source + " ".join([compiler, *flags, jax.__version__]).encode()).hexdigest()
  folder = _private_dir(pathlib.Path(cache_dirs.cache_dir("kernels", CACHE_ENV)))
  out = folder / f"cache_attention-{tag[:16]}.so"
  if _verified(out):
    return out
  # Compile to a private name, then rename: concurrent processes never load a partial file.
  fd, tmp = tempfile.mkstemp(suffix=".so", dir=folder)
  os.close(fd)
  try:
    cmd = [compiler, *flags, f"-I{jax.ffi.include_dir()}", *map(str, SOURCES), "-o", tmp]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode:
      raise RuntimeError(f"compiling the CPU kernels failed ({' '.join(cmd)}):\n"
                         f"{done.stderr[-2000:]}")
    os.chmod(tmp, 0o700)
    digest = _sha256(pathlib.Path(tmp))
    fd, tmp_digest = tempfile.mkstemp(suffix=".sha256", dir=folder)
    with os.fdopen(fd, "w") as f:
      f.write(digest + "\n")
    os.replace(tmp_digest, out.with_suffix(".sha256"))
    os.replace(tmp, out)
  finally:
    if os.path.exists(tmp):
      os.unlink(tmp)
  return out


def required() -> bool:
  return os.environ.get(REQUIRE_ENV, "0") not in ("", "0")


@functools.cache
def loaded_variant() -> str:
  """The instruction set the loaded kernel library was compiled for (its own answer)."""
  lib = ctypes.cdll.LoadLibrary(str(build()))
  fn = getattr(lib, ISA_SYMBOL)
  fn.restype = ctypes.c_char_p
  return fn().decode()


@functools.cache
def registered() -> bool:
  """Whether the kernels are built, loaded and registered with XLA (CPU backend only)."""
  if jax.default_backend() != "cpu":
    return False
  try:
    lib = ctypes.cdll.LoadLibrary(str(build()))
    for target, symbol in _SYMBOLS.items():
      jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(getattr(lib, symbol)), platform="cpu")
    return True
  except Exception as err:  # pylint: disable=broad-except
    if required():
      raise RuntimeError(f"{REQUIRE_ENV} is set but the CPU attention kernel could not be "
                         f"built: {err}") from err
    logging.warning("CPU attention kernel unavailable, using the reference attention: %s", err)
    return False
