"""Counters and latency percentiles of a judge backend (host-side, cheap, resettable)."""
from __future__ import annotations

import threading

import numpy as np

COUNTERS = (
    "matches",  # matches judged (pairwise) or trajectories scored (pointwise)
    "requests",  # HTTP requests sent, retries included
    "cache_hits",  # judge requests answered from the on-disk cache
    "retries",  # re-sends after 429 / 5xx / timeout / connection errors
    "parse_failures",  # replies rejected by the strict parser (then re-asked)
    "failures",  # judge requests given up on
    "failed_matches",  # matches (or pointwise scores) recorded as failed
    "format_fallbacks",  # response_format downgrades after a server rejected the stronger one
    "both_orders",  # matches whose two orders were both judged (the order-flip denominator)
    "order_flips",  # ... whose two orders disagree on the winner (position bias)
    "mismatches",  # the judge's own overall/combined/winner disagreeing with the recomputation
    "truncations",  # prompt fields cut to their budget
    "repairs",  # invalid code points / control characters replaced in prompts
)


class JudgeMetrics:
  """Running totals; ``snapshot()`` adds latency p50/p90/p99 in milliseconds."""

  def __init__(self):
    self._lock = threading.Lock()
    self.reset()

  def reset(self) -> None:
    with self._lock:
      self._counts = dict.fromkeys(COUNTERS, 0)
      self._latencies_s: list[float] = []
      self._in_flight = 0
      self.max_in_flight = 0

  def add(self, name: str, n: int = 1) -> None:
    if name not in self._counts:
      raise KeyError(f"unknown judge metric {name!r}; known: {COUNTERS}")
    with self._lock:
      self._counts[name] += int(n)

  def __getitem__(self, name: str) -> int:
    return self._counts[name]

  def orders(self, forward: tuple[float, float], backward: tuple[float, float]) -> bool:
    """Counts one match judged in both orders; True when the orders disagree on the winner.

    ``forward`` is (Agent_A, Agent_B) with A = P, ``backward`` with A = Q. Each order names a
    winner (P, Q or a tie); a flip is any disagreement: the position bias that bidirectional
    judging exists to cancel.
    """
    def side(p: float, q: float) -> int:
      return 0 if abs(p - q) <= 1e-9 else 1 if p > q else -1

    flip = side(forward[0], forward[1]) != side(backward[1], backward[0])
    with self._lock:
      self._counts["both_orders"] += 1
      self._counts["order_flips"] += int(flip)
    return flip

  def latency(self, seconds: float) -> None:
    with self._lock:
      self._latencies_s.append(float(seconds))

  def enter(self) -> None:
    """A request went in flight."""
    with self._lock:
      self._in_flight += 1
      self.max_in_flight = max(self.max_in_flight, self._in_flight)

  def leave(self) -> None:
    with self._lock:
      self._in_flight -= 1

  def snapshot(self) -> dict[str, float]:
    """All counters, ``order_flip_rate`` (order_flips / both_orders, NaN before the first) and
    ``latency_ms_p50/p90/p99`` (NaN before the first answered request)."""
    with self._lock:
      out: dict[str, float] = dict(self._counts)
      both = self._counts["both_orders"]
      out["order_flip_rate"] = self._counts["order_flips"] / both if both else float("nan")
      lat = np.asarray(self._latencies_s, np.float64) * 1000
      out["max_in_flight"] = self.max_in_flight
    for q in (50, 90, 99):
      out[f"latency_ms_p{q}"] = float(np.percentile(lat, q)) if lat.size else float("nan")
    return out
