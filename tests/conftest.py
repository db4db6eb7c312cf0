"""Test-wide setup: 8 fake CPU devices (sharding tests), deterministic single-threaded torch."""
import os

# Must happen before jax is imported anywhere: unsharded code still runs on device 0.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
# torch with 2 threads collapses when another process is busy (PLATFORM.md).
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
