"""The XLA flags of every process the suite runs: ``tests/conftest.py`` sets them for pytest (and
so for every subprocess that inherits its environment); tests that start a process with its own
device count take them from ``with_devices``.

The suite compiles hundreds of small programs and runs each a few times, so it compiles for speed
of compilation: LLVM's optimisation passes off (``--xla_backend_optimization_level=0``) and XLA
CPU's classic fusion emitters instead of the MLIR ones (``--xla_cpu_use_fusion_emitters=false``).
Both are code-generation choices: the programs compute the same operations in the same order,
only less optimised. float32 results agree; bfloat16 ones round differently (intermediate
conversions kept or folded), so bfloat16 tests bound what training reads, not single logits. Measured on the 2-core development machine, they cut the suite's compile
time by about half (``tests/README.md``). The main job, the benchmarks and users' runs compile
with XLA's defaults (``tests/testing/test_xla_flags.py`` checks a model's forward pass both ways).
"""

FAST_COMPILE = "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"


def with_devices(devices: int) -> str:
  """``XLA_FLAGS`` for a process with ``devices`` fake CPU devices, compiled as the suite is."""
  return f"--xla_force_host_platform_device_count={devices} {FAST_COMPILE}"
