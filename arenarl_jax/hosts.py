"""The hosts of a run: joining them (``jax.distributed``), values agreed by all, and one step's
rollout statistics combined from every host's share.

On one process every function here is the identity or a plain call, so single-host code reads the
same as pod code.
"""
from __future__ import annotations

import json
from typing import Any, Callable, Mapping, TypeVar

import jax
import numpy as np

T = TypeVar("T")


def initialize_distributed(section: Mapping[str, Any]) -> None:
  """``jax.distributed.initialize`` from ``config.distributed`` (call before touching devices;
  a second call is a no-op)."""
  if not section["initialize"] or jax.distributed.is_initialized():
    return
  if section["cpu_collectives"]:
    jax.config.update("jax_cpu_collectives_implementation", section["cpu_collectives"])
  jax.distributed.initialize(coordinator_address=section["coordinator_address"] or None,
                             num_processes=section["num_processes"] or None,
                             process_id=None if section["process_id"] < 0 else section["process_id"])


def global_max(value: int) -> int:
  if jax.process_count() == 1:
    return value
  from jax.experimental import multihost_utils
  return int(np.max(multihost_utils.process_allgather(np.asarray([value]))))


def process_0_first(fn: Callable[[], T], name: str) -> T:
  """``fn()`` on process 0, then on the others: they read what it wrote when the storage is
  shared, or make the same thing themselves (``fn`` is deterministic) when it is not."""
  if jax.process_count() == 1:
    return fn()
  from jax.experimental import multihost_utils  # pylint: disable=import-outside-toplevel
  out = fn() if jax.process_index() == 0 else None
  multihost_utils.sync_global_devices(name)
  return out if jax.process_index() == 0 else fn()


def host_copy(tree: Any) -> Any:
  """Every array of ``tree`` whole, as numpy, on every host (a multi-host array is gathered by
  one collective every process joins): what a host writes to disk, e.g. an export."""
  if jax.process_count() == 1:
    return jax.device_get(tree)
  from jax.experimental import multihost_utils  # pylint: disable=import-outside-toplevel
  return multihost_utils.process_allgather(tree, tiled=True)


# How one step's rollout stats of several hosts (each over its own equal share of the groups)
# become one value: counts add up (every judge/ counter, tool errors by kind and these), times take
# the slowest host, extremes their extreme, the rest (means over trajectories or groups) the mean
# over hosts; a count a host lacks is 0 there. The order-flip rate is recomputed from the sums.
_SUMMED = ("tokens_per_s", "rollout/judge_cache_hits", "rollout/errors")


def combine_host_stats(per_host: list[Mapping[str, float]]) -> dict[str, float]:
  """One step's stats from every host's (see ``_SUMMED``); exact for counts, times, extremes and
  means, the mean of the hosts' values for spreads and correlations."""
  out = {}
  for key in sorted({k for h in per_host for k in h}):
    summed = (key in _SUMMED or "/tool_errors/" in key
              or (key.startswith("judge/") and not key.endswith("_rate")))
    values = [float(h.get(key, 0.0)) for h in per_host if summed or key in h]
    if summed:
      out[key] = float(np.sum(values))
    elif key.startswith("time/") or key.endswith("_max"):
      out[key] = float(np.max(values))
    elif key.endswith("_min"):
      out[key] = float(np.min(values))
    else:
      out[key] = float(np.mean(values))
  if out.get("judge/both_orders", 0) > 0:
    out["judge/order_flip_rate"] = out["judge/order_flips"] / out["judge/both_orders"]
  return out


def gather_stats(stats: Mapping[str, float]) -> dict[str, float]:
  """Every host's rollout stats combined (``combine_host_stats``); one host: unchanged."""
  if jax.process_count() == 1:
    return dict(stats)
  from jax.experimental import multihost_utils  # pylint: disable=import-outside-toplevel
  blob = np.frombuffer(json.dumps({k: float(v) for k, v in stats.items()}).encode(), np.uint8)
  width = global_max(len(blob))
  rows = multihost_utils.process_allgather(np.pad(blob, (0, width - len(blob))))
  return combine_host_stats([json.loads(bytes(r).rstrip(b"\0")) for r in np.asarray(rows)])


