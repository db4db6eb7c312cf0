"""The host CPU's instruction sets, as the CPU kernels and the records of a run need them.

``ISAS`` lists the variants the C++ kernels are built for (best first) with the compiler flags
each needs and the ``/proc/cpuinfo`` flags that must all be present: never ``-march=native``,
since some virtual machines report instructions they cannot run, and these flags are exactly
what the tiles use. ``cpu_kind`` names the machine for a result's record: XLA:CPU compiles for
the host's instruction set, so float sums, and from them greedy decoding, can differ between
an AVX2 and an AVX-512 machine (AMX is named where the caller asks, for speed tables).
"""
from __future__ import annotations

import pathlib
import platform

ISAS = {"avx512": (("-mavx512f", "-mavx2", "-mfma"), ("avx512f", "avx2", "fma")),
        "avx2": (("-mavx2", "-mfma"), ("avx2", "fma")),
        "portable": ((), ())}


def cpu_flags() -> frozenset[str]:
  """The instruction-set flags /proc/cpuinfo reports (empty where it cannot be read)."""
  if platform.machine() not in ("x86_64", "AMD64"):
    return frozenset()
  try:
    return frozenset(pathlib.Path("/proc/cpuinfo").read_text().split())
  except OSError:
    return frozenset()


def supported_isas(flags: frozenset[str] | None = None) -> tuple[str, ...]:
  """The kernel variants this CPU can run, best first (``portable`` always)."""
  flags = cpu_flags() if flags is None else flags
  return tuple(name for name, (_, needs) in ISAS.items() if all(f in flags for f in needs))


def cpu_kind(amx: bool = False, flags: frozenset[str] | None = None) -> str:
  """``avx512``, ``avx2`` or the machine's name (``x86_64`` without AVX2 + FMA, ``aarch64``);
  with ``amx``, ``+amx`` where the CPU has AMX tiles (``avx512+amx``)."""
  flags = cpu_flags() if flags is None else flags
  best = supported_isas(flags)[0]
  name = platform.machine() if best == "portable" else best
  return name + ("+amx" if amx and "amx_tile" in flags else "")
