"""The retained-heap allocator settings: when the process re-executes, that a repeated call
then faults in no fresh pages while glibc's defaults fault in its buffers on every call, and that
``release_free_pages`` hands back what a sequence of growing shapes left resident."""
import os
import platform
import subprocess
import sys
import textwrap

import pytest

from arenarl_jax.models.cpu import allocator

GLIBC = sys.platform == "linux" and platform.libc_ver()[0] == "glibc"
GLIBC_VERSION = tuple(int(x) for x in platform.libc_ver()[1].split(".")[:2]) if GLIBC else ()

# Calls a program whose output (64 MB) lies above glibc's largest mmap threshold sixteen times and
# prints the minor page faults of the last six calls (the heap settles within the first few).
_SCRIPT = textwrap.dedent("""
    import os, resource
    from arenarl_jax.models.cpu import allocator
    allocator.reexec_with_retained_heap()
    import jax, jax.numpy as jnp
    f = jax.jit(lambda x: jnp.sin(x) + 1)
    x = jnp.ones((8192, 2048), jnp.float32)
    faults = []
    for _ in range(16):
      before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
      y = f(x).block_until_ready()
      del y
      faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    print("ARENA", os.environ.get("MALLOC_ARENA_MAX"), "FAULTS", *faults[-6:])
""")


def _python(script: str, **extra_env: str) -> str:
  """``script``'s stdout in a fresh CPU process without any of the allocator variables."""
  env = {k: v for k, v in os.environ.items()
         if k not in allocator.RETAINED_HEAP and k != allocator.OPT_OUT}
  env.update(JAX_PLATFORMS="cpu", XLA_FLAGS="", **extra_env)
  return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                        timeout=300, check=True).stdout


def _run(extra_env: dict[str, str]) -> tuple[str | None, list[int]]:
  out = _python(_SCRIPT, **extra_env)
  line = [x for x in out.splitlines() if x.startswith("ARENA")][-1].split()
  return (None if line[1] == "None" else line[1]), [int(x) for x in line[3:]]


@pytest.mark.skipif(not GLIBC, reason="the settings are glibc's")
def test_decision_follows_platform_opt_out_and_user_settings():
  assert allocator.wants_retained_heap({"JAX_PLATFORMS": "cpu"})
  assert allocator.wants_retained_heap({"JAX_PLATFORMS": "cpu,cuda"})
  assert not allocator.wants_retained_heap({"JAX_PLATFORMS": "cuda"})
  assert not allocator.wants_retained_heap({"JAX_PLATFORMS": "tpu,cpu"})
  assert not allocator.wants_retained_heap({"JAX_PLATFORMS": "cpu", "ARENARL_MALLOC": "default"})
  for name in allocator.RETAINED_HEAP:  # any one set by the user: theirs wins, no re-exec
    assert not allocator.wants_retained_heap({"JAX_PLATFORMS": "cpu", name: "4"})


def test_cpu_only_reads_jax_platforms_first():
  assert allocator.cpu_only({"JAX_PLATFORMS": " cpu "})
  assert not allocator.cpu_only({"JAX_PLATFORMS": "gpu"})


@pytest.mark.skipif(not GLIBC, reason="the settings are glibc's")
def test_reexec_keeps_a_repeated_call_from_faulting_in_fresh_pages():
  arena, retained_faults = _run({})
  assert arena == "1"  # the process re-executed itself with the settings
  default_arena, default_faults = _run({allocator.OPT_OUT: "default"})
  assert default_arena is None
  # glibc's defaults unmap the 64 MB block on free, so every call faults it in again (16k pages);
  # with the heap retained, once the heap has settled, a call reuses the pages an earlier call
  # freed.
  assert min(default_faults) > 16_000, default_faults
  assert min(retained_faults) < 500, retained_faults


# A buffer that grows step by step while the previous one is alive (as a sampler's cache moves to
# larger sizes) and is then dropped: the retained heap keeps its pages resident until
# release_free_pages hands them back.
_GROWING = textwrap.dedent("""
    from arenarl_jax.models.cpu import allocator
    allocator.reexec_with_retained_heap()
    import jax, jax.numpy as jnp
    def rss_mb():
      return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
    grow = jax.jit(lambda x, n: jnp.pad(x * 1.5, ((0, n - x.shape[0]), (0, 0))),
                   static_argnums=1)
    def grow_and_drop():
      x, n = jnp.ones((1024, 4096)), 1024
      while n < 8192:  # 16 MB to 128 MB, x5/4 at a time
        n = n * 5 // 4
        x = grow(x, n).block_until_ready()
      # The last buffers are freed on the runtime's thread, a little later: the release waits.
    # A first pass compiles every shape's program (memory that stays, as it should), so that
    # the second pass measures only what the growing buffers leave.
    grow_and_drop()
    allocator.release_free_pages()
    base = rss_mb()
    grow_and_drop()
    kept = rss_mb()
    ran = allocator.release_free_pages()
    print("RSS", ran, round(kept - base), round(rss_mb() - base))
""")


@pytest.mark.skipif(not GLIBC or GLIBC_VERSION < (2, 33),
                    reason="the settings are glibc's; the release waits through glibc >= 2.33's mallinfo2")
def test_release_free_pages_hands_back_what_growing_shapes_left():
  out = _python(_GROWING)
  ran, kept, after = [x for x in out.splitlines() if x.startswith("RSS")][-1].split()[1:]
  assert ran == "True"
  # Nothing is alive, yet much of the sizes it grew through (x5/4 steps from 16 MB to 128 MB:
  # 664 MB in all; measured 379-681 MB resident, as the heap coalesces and reuses some) stays
  # resident until the pages go back.
  assert int(kept) > 250, out
  # The release hands back all but what a heap's bookkeeping keeps (the programs compiled in the
  # first pass are in the base).
  assert int(after) < 0.2 * int(kept), out
  # In this process (no retained heap) it does nothing.
  assert allocator.release_free_pages() == (os.environ.get("MALLOC_MMAP_MAX_") == "0")
