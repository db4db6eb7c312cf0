"""The C allocator's settings for CPU runs: memory a call frees stays mapped for the next call.

XLA:CPU allocates a program's temporaries when a call starts and frees them when it returns. Under
glibc's defaults the freed blocks go back to the kernel (blocks above the mmap threshold are
unmapped, a worker thread's heap is deleted once empty, the main heap's free top is trimmed), so
every call faults its temporaries in again as fresh zeroed pages: kernel time on every call in
proportion to the program's temporaries (gigabytes for a training step), and far more on a
virtual machine whose host is short of free memory (see benchmarks/README.md, Train step).
``RETAINED_HEAP`` keeps the pages: one arena (so XLA's worker threads allocate from the main
heap), no mmap'd blocks and no trimming. After the first call a call faults in nothing; the
process keeps its peak resident memory, which a training process reaches on every step anyway.

glibc reads these settings only when a process starts, so ``reexec_with_retained_heap`` runs the
current command again, once, with them in its environment. The CLI and the benchmarks call it
first thing. It acts only on Linux with glibc and a CPU-only JAX (``JAX_PLATFORMS`` starting with
``cpu``, or no accelerator plugin installed), never when any of the variables is already set (the
user's own choice wins), and not at all with ``ARENARL_MALLOC=default``. Setting the variables
yourself (for example before starting a notebook server) has the same effect.

The retained heap grows with every new shape, though: a freed block serves only a request that
fits in it, so a rollout whose caches grow through larger sizes, wave after wave, keeps every
size it ever used resident (an evaluation of SmolLM2-135M on 250 travel tasks in waves of 20 rows
grew by 2-4 GB a wave, past 23 GB). ``release_free_pages`` hands the free blocks' pages back
(glibc's ``malloc_trim(0)``; the address space stays) where a shape sequence ends: after each
evaluation wave and when a sampler's cache moves to a larger size.
"""
from __future__ import annotations

import ctypes
import functools
import importlib.metadata
import os
import platform
import sys
import time

RETAINED_HEAP = {
    "MALLOC_ARENA_MAX": "1",
    "MALLOC_MMAP_MAX_": "0",
    "MALLOC_TRIM_THRESHOLD_": str(1 << 40),
}
OPT_OUT = "ARENARL_MALLOC"  # =default: keep glibc's defaults
_ACCELERATOR_PLUGINS = ("jax-cuda", "jax_cuda", "jax-rocm", "jax_rocm", "libtpu")


def _glibc_linux() -> bool:
  return sys.platform == "linux" and platform.libc_ver()[0] == "glibc"


def _accelerator_plugin_installed() -> bool:
  names = (dist.metadata["Name"] or "" for dist in importlib.metadata.distributions())
  return any(name.lower().startswith(_ACCELERATOR_PLUGINS) for name in names)


def cpu_only(environ=None) -> bool:
  """Whether JAX will run on the CPU: ``JAX_PLATFORMS`` names cpu first, or, unset, no
  accelerator plugin is installed. Initialises no backend (a re-executed process must not have
  opened a device)."""
  environ = os.environ if environ is None else environ
  platforms = environ.get("JAX_PLATFORMS", "").strip()
  if platforms:
    return platforms.split(",")[0].strip() == "cpu"
  return not _accelerator_plugin_installed()


def wants_retained_heap(environ=None) -> bool:
  """Whether ``reexec_with_retained_heap`` would re-execute this process (see the module doc)."""
  environ = os.environ if environ is None else environ
  if environ.get(OPT_OUT, "") == "default":
    return False
  if not _glibc_linux():
    return False
  if any(name in environ for name in RETAINED_HEAP):
    return False
  return cpu_only(environ)


def reexec_with_retained_heap() -> None:
  """Re-executes the current command with ``RETAINED_HEAP`` in its environment when
  ``wants_retained_heap()``; returns without doing anything otherwise. Call it before anything
  starts threads or opens files it relies on (the process image is replaced)."""
  if not wants_retained_heap():
    return
  sys.stdout.flush()
  sys.stderr.flush()
  os.execve(sys.executable, list(sys.orig_argv), {**os.environ, **RETAINED_HEAP})


@functools.lru_cache(maxsize=1)
def _malloc_trim():
  """glibc's ``malloc_trim`` where this process runs with ``RETAINED_HEAP``, else None."""
  if not _glibc_linux():
    return None
  if os.environ.get("MALLOC_MMAP_MAX_") != RETAINED_HEAP["MALLOC_MMAP_MAX_"]:
    return None  # glibc's own trimming and mmap'd blocks already return freed memory
  try:
    trim = ctypes.CDLL("libc.so.6").malloc_trim
  except (OSError, AttributeError):
    return None
  trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
  return trim


class _MallInfo2(ctypes.Structure):
  _fields_ = [(name, ctypes.c_size_t) for name in
              "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]


@functools.lru_cache(maxsize=1)
def _heap_in_use():
  """A function giving the heap's bytes in use (glibc >= 2.33's ``mallinfo2``), else None."""
  try:
    info = ctypes.CDLL("libc.so.6").mallinfo2
  except (OSError, AttributeError):
    return None
  info.restype = _MallInfo2
  return lambda: info().uordblks


def settle(timeout_s: float = 0.5, poll_s: float = 0.02) -> None:
  """Waits until the heap's bytes in use stop changing (at most ``timeout_s``). The runtime
  frees a dropped array's buffer on its own thread, some milliseconds later: a release at once
  would miss the largest buffers a wave or a step just let go (measured: 268 MB in one run of
  four of ``tests/models/test_allocator.py``'s growing shapes)."""
  in_use = _heap_in_use()
  if in_use is None:
    return
  before, deadline = in_use(), time.monotonic() + timeout_s
  while time.monotonic() < deadline:
    time.sleep(poll_s)
    now = in_use()
    if now == before:
      return
    before = now


def release_free_pages() -> bool:
  """Returns the retained heap's free pages to the kernel (see the module doc), once what was
  just dropped has been freed (``settle``); whether it ran. A no-op without the retained heap.
  The next call faults in what it touches again."""
  trim = _malloc_trim()
  if trim is None:
    return False
  settle()
  trim(0)
  return True
