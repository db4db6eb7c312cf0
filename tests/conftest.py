"""Test-wide setup: 8 fake CPU devices (sharding tests), deterministic single-threaded torch."""
import os

# Must happen before jax is imported anywhere: unsharded code still runs on device 0.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
# torch with 2 threads collapses when another process is busy (PLATFORM.md).
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import shutil  # noqa: E402
import tempfile  # noqa: E402

import jax  # noqa: E402,F401  (imported before the cache variables below: this process keeps none)

# One persistent compilation cache per test run, for the subprocesses only (pipelines, config
# smoke runs, multi-process and fresh-interpreter tests): they compile the same small programs,
# and each finds what an earlier one compiled. This process has already read its jax config, so
# its compile counts stay exact. The run creates the directory and removes it at the end.
_COMPILE_CACHE = tempfile.mkdtemp(prefix="arenarl_test_jax_cache_")
os.environ["JAX_COMPILATION_CACHE_DIR"] = _COMPILE_CACHE
os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"


def pytest_sessionfinish(session, exitstatus):
  del session, exitstatus
  shutil.rmtree(_COMPILE_CACHE, ignore_errors=True)
