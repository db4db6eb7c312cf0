"""Judge throughput in matches/s: local Flax judge (logit mode) vs the HTTP judge on llama.cpp.

  .venv/bin/python benchmarks/judge.py                     # both parts
  .venv/bin/python benchmarks/judge.py --http_matches 8 --n_threads 2
  .venv/bin/python benchmarks/judge.py --http_matches 0 --flax_matches 16   # Flax only

HTTP part: llama.cpp's server (llama-cpp-python) with the SmolLM2-135M GGUF, started here on
127.0.0.1; ~300-token trajectories; the travel rubric with the compact, JSON-schema-constrained
verdict; one match = two requests, all in flight together (the server answers one at a time).
One warm-up match is excluded from the timing.

Flax part: ``FlaxJudge`` in logit mode on SmolLM2 (float32, in this process) judging the same kind
of matches in one batched call: the rubric prefix prefilled once, rows in chunks of
``--flax_max_rows``, no generation; a warm-up call compiles the programs first. Ends with one line:
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


def bench_flax(n_matches: int, max_rows: int, attention: str = "auto") -> tuple[float, dict]:
  """Matches/s of the local Flax judge (logit mode, SmolLM2 f32) and its metrics.

  The warm-up judges ``max_rows // 2`` other matches, which compiles the prefix and the
  (max_rows, bucket) program the timed call uses; the timed call must compile nothing.
  """
  from arenarl_jax.judges import flax_judge  # pylint: disable=g-import-not-at-top
  judge = flax_judge.make_flax_judge({"rubric": "travel", "flax": {
      "model": "smollm2", "max_rows": max_rows, "max_user_tokens": 2048,
      "attention": attention}})
  start = time.perf_counter()
  judge.judge(make_matches(max(1, max_rows // 2), seed=99))  # warm-up
  warmup_s = time.perf_counter() - start
  judge.metrics.reset()
  judge.counts.clear()
  matches = make_matches(n_matches)
  start = time.perf_counter()
  results = judge.judge(matches)
  wall = time.perf_counter() - start
  metrics = judge.snapshot()
  metrics["ok_matches"] = sum(r.ok for r in results)
  metrics["prefix_tokens"] = len(judge.prefix_state("pairwise")[0])
  metrics["warmup_s"] = warmup_s
  metrics["tokens_s"] = metrics["tokens"] / wall
  metrics["score_mass_p50"] = float(np.median([r.detail["score_mass"] for r in results if r.ok]))
  margins = [abs(r.score_p - r.score_q) for r in results if r.ok]
  metrics["margin_p50"] = float(np.median(margins))
  return n_matches / wall, metrics


def matmul_gflops(n: int = 1024, repeats: int = 3) -> float:
  """This process's float32 matmul rate now (the machine's load shows in it)."""
  import jax  # pylint: disable=g-import-not-at-top
  a = jax.numpy.ones((n, n), jax.numpy.float32)
  f = jax.jit(lambda x: x @ x)
  f(a).block_until_ready()
  best = math.inf
  for _ in range(repeats):
    start = time.perf_counter()
    f(a).block_until_ready()
    best = min(best, time.perf_counter() - start)
  return 2 * n ** 3 / best / 1e9


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--http_matches", type=int, default=8, help="0 skips the HTTP part")
  parser.add_argument("--flax_matches", type=int, default=64, help="0 skips the Flax part")
  parser.add_argument("--flax_max_rows", type=int, default=8, help="rows per compiled call")
  parser.add_argument("--n_threads", type=int, default=2, help="llama.cpp threads")
  parser.add_argument("--max_tokens", type=int, default=192)
  parser.add_argument("--attention", default="auto", help="model.attention of the Flax judge")
  args = parser.parse_args()
  flax_rate = http_rate = math.nan
  if args.flax_matches:
    print(f"matmul 1024^3 float32 now: {matmul_gflops():.0f} GFLOP/s")
    flax_rate, m = bench_flax(args.flax_matches, args.flax_max_rows, args.attention)
    print(f"flax: {args.flax_matches} matches ({m['rows']} prompts, {m['tokens']} prompt tokens "
          f"after the shared {m['prefix_tokens']}-token prefix): {flax_rate:.4f} matches/s, "
          f"{m['tokens_s']:.0f} tokens/s; ok={m['ok_matches']}, calls={m['calls']}, "
          f"compiles while timed={m['compiles']}, call latency p50 = {m['latency_ms_p50']:.0f} "
          f"ms, score mass p50 = {m['score_mass_p50']:.3f}, |score_p - score_q| p50 = "
          f"{m['margin_p50']:.3f}; warm-up (compiles + {args.flax_max_rows // 2} matches) "
          f"{m['warmup_s']:.0f} s")
  if args.http_matches:
    http_rate, metrics = bench_http(args.http_matches, args.n_threads, args.max_tokens)
    print(f"http: {args.http_matches} matches ({2 * args.http_matches} requests, llama.cpp "
          f"n_threads={args.n_threads}): {http_rate:.3f} matches/s; ok={metrics['ok_matches']}, "
          f"parse_failures={metrics['parse_failures']}, latency p50/p90/p99 = "
          f"{metrics['latency_ms_p50']:.0f}/{metrics['latency_ms_p90']:.0f}/"
          f"{metrics['latency_ms_p99']:.0f} ms")
  if not (math.isnan(flax_rate) or math.isnan(http_rate)):
    print(f"flax / http = {flax_rate / http_rate:.2f}x (target >= 5x)")
  print(f"RESULT flax_matches_s={flax_rate:.4g} http_matches_s={http_rate:.4g}")


if __name__ == "__main__":
  main()
