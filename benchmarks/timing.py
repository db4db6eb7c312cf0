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


def interleaved_medians(runs: dict, repeats: int) -> tuple[dict, dict]:
  """Times every contender once per round for ``repeats`` rounds, so a change in the machine's
  load hits all of them alike; returns (median seconds by name, every round's seconds by name)."""
  times = {name: [] for name in runs}
  for _ in range(repeats):
    for name, run in runs.items():
      times[name].append(median_time(run, 1))
  return {name: statistics.median(ts) for name, ts in times.items()}, times


def cpu_kind() -> str:
  """The instruction sets behind a row, for the RESULT line's ``cpu=`` key: ``avx512``, ``avx2``
  or the machine's name, ``+amx`` where the CPU has AMX tiles (``avx512+amx``)."""
  from arenarl_jax.models import backend  # pylint: disable=g-import-not-at-top
  return backend.cpu_kind(amx=True)


def peak_rss_gb() -> float:
  """This process's peak resident memory so far (Linux reports ru_maxrss in KiB)."""
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
