"""Judge throughput in matches/s: local Flax judge (logit mode) vs the HTTP judge on llama.cpp.

  .venv/bin/python benchmarks/judge.py                     # both parts (Flax: nan until it lands)
  .venv/bin/python benchmarks/judge.py --http_matches 8 --n_threads 2

HTTP part: llama.cpp's server (llama-cpp-python) with the SmolLM2-135M GGUF, started here on
127.0.0.1; ~300-token trajectories; the travel rubric with the compact, JSON-schema-constrained
verdict; one match = two requests, all in flight together (the server answers one at a time).
One warm-up match is excluded from the timing. Ends with one line:
``RESULT flax_matches_s=... http_matches_s=...``. Timings on a shared machine are noisy.
"""
from __future__ import annotations

import argparse
import math
import time

import numpy as np

from arenarl_jax.judges import http
from arenarl_jax.judges import local_server
from arenarl_jax.models.embedded import find_smollm2_gguf
from arenarl_jax.types import Match, Step, ToolCall, Trajectory

_CITIES = ["Lyon", "Paris", "Nice", "Bordeaux", "Lille", "Nantes", "Strasbourg", "Toulouse"]


def make_trajectory(rng: np.random.Generator, query: str) -> Trajectory:
  """A two-tool-call travel trajectory of about 300 tokens (~1,200 characters)."""
  city, other = rng.choice(_CITIES, 2, replace=False)
  hour = int(rng.integers(7, 11))
  price = int(rng.integers(20, 90))
  steps = (
      Step(reasoning=f"The user wants a day trip from {city} to {other}. I should check trains "
                     f"and the main sights, then plan the timing and the budget.",
           tool_calls=(ToolCall("search_train_tickets",
                                {"date": "2026-12-05", "from_city": city, "to_city": other}),),
           tool_results=(f"TGV {hour}:04 {city} -> {other} arrives {hour + 2}:10, {price} EUR; "
                         f"TER {hour + 1}:30 arrives {hour + 4}:02, {price // 2} EUR; return "
                         f"trains every hour until 21:40.",)),
      Step(reasoning=f"Now the sights near the station in {other}.",
           tool_calls=(ToolCall("around_search", {"location": "45.76,4.83", "radius": 3000,
                                                  "keyword": "museum"}),),
           tool_results=(f"Musee des Beaux-Arts (0.8 km, 10:00-18:00, 12 EUR); old town walking "
                         f"tour (1.2 km, free); covered market (0.5 km, closes 14:00).",)),
      Step(content=f"Take the TGV at {hour}:04 from {city} ({price} EUR), arriving {hour + 2}:10 "
                   f"in {other}. Walk to the covered market before it closes at 14:00, then the "
                   f"Musee des Beaux-Arts (12 EUR, open until 18:00) and the free old-town tour. "
                   f"Return on any hourly train until 21:40. Total about {price * 2 + 12} EUR."),
  )
  return Trajectory(query, steps)


def make_matches(n: int, seed: int = 0) -> list[Match]:
  rng = np.random.default_rng(seed)
  query = "Plan a one-day train trip with sights and a budget, leaving next Saturday."
  return [Match(k, 0, 1, query, make_trajectory(rng, query), make_trajectory(rng, query))
          for k in range(n)]


def bench_http(n_matches: int, n_threads: int, max_tokens: int) -> tuple[float, dict]:
  """Matches/s of the HTTP judge against a local llama.cpp server, and the judge's metrics."""
  with local_server.LlamaServer(find_smollm2_gguf(), n_ctx=2048, n_threads=n_threads) as server:
    config = http.HttpJudgeConfig(base_url=server.base_url, model="smollm2",
                                  response_format="json_object_schema", max_tokens=max_tokens,
                                  max_concurrency=2 * n_matches, timeout_s=600.0,
                                  parse_retries=0)
    judge = http.HttpJudge(config, "travel", compact=True)
    judge.judge(make_matches(1, seed=99))  # warm-up
    judge.metrics.reset()
    matches = make_matches(n_matches)
    start = time.perf_counter()
    results = judge.judge(matches)
    wall = time.perf_counter() - start
  metrics = judge.metrics.snapshot()
  metrics["ok_matches"] = sum(r.ok for r in results)
  return n_matches / wall, metrics


def bench_flax(n_matches: int) -> float:
  """FLAX HOOK: matches/s of the local Flax judge in logit mode on SmolLM2 (added by the lead).

  Build it on ``make_matches(n_matches)``, with the same rubric ("travel") and the compact
  verdict skeleton (``verdict.verdict_skeleton``); time one batched ``judge(matches)`` after a
  warm-up call (compilation excluded) and return ``n_matches / wall_seconds``.
  """
  del n_matches
  return math.nan


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--http_matches", type=int, default=8)
  parser.add_argument("--flax_matches", type=int, default=64)
  parser.add_argument("--n_threads", type=int, default=2, help="llama.cpp threads")
  parser.add_argument("--max_tokens", type=int, default=192)
  args = parser.parse_args()
  flax_rate = bench_flax(args.flax_matches)
  print(f"flax: {args.flax_matches} matches: {flax_rate:.3f} matches/s")
  http_rate, metrics = bench_http(args.http_matches, args.n_threads, args.max_tokens)
  print(f"http: {args.http_matches} matches ({2 * args.http_matches} requests, llama.cpp "
        f"n_threads={args.n_threads}): {http_rate:.3f} matches/s; ok={metrics['ok_matches']}, "
        f"parse_failures={metrics['parse_failures']}, latency p50/p90/p99 = "
        f"{metrics['latency_ms_p50']:.0f}/{metrics['latency_ms_p90']:.0f}/"
        f"{metrics['latency_ms_p99']:.0f} ms")
  if not math.isnan(flax_rate):
    print(f"flax / http = {flax_rate / http_rate:.2f}x (target >= 5x)")
  print(f"RESULT flax_matches_s={flax_rate:.4g} http_matches_s={http_rate:.4g}")


if __name__ == "__main__":
  main()
