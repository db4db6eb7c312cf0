"""Timing and memory helpers shared by the benchmark scripts (run as `python benchmarks/<x>.py`)."""
import resource
import statistics
import time


def median_time(fn, repeats: int) -> float:
  """Median wall seconds of ``repeats`` calls (``fn`` must block until its work is done)."""
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def peak_rss_gb() -> float:
  """This process's peak resident memory so far (Linux reports ru_maxrss in KiB)."""
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
