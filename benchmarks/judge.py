"""Judge throughput in matches/s: local Flax judge (logit and generative mode) vs the HTTP judge.

  .venv/bin/python benchmarks/judge.py                     # all parts, every HTTP configuration
  .venv/bin/python benchmarks/judge.py --http_matches 8 --n_threads 2 --n_threads_batch 2
  .venv/bin/python benchmarks/judge.py --servers native:4,native:8 --server_binary /path/llama-server
  .venv/bin/python benchmarks/judge.py --http_matches 0 --flax_matches 16   # Flax only

HTTP part: OpenAI-compatible llama.cpp servers with the SmolLM2-135M GGUF, each started here on
127.0.0.1 with explicit ``n_threads`` (decode) and ``n_threads_batch`` (prompt processing) and
measured one after the other on the same matches (``--servers``, default
``python,native:1,native:4,native:8``): ``python`` is llama-cpp-python's server (one request at
a time: no slots, no continuous batching); ``native:S`` is llama.cpp's own ``llama-server`` with
S parallel slots and continuous batching (``--server_binary``, ``$LLAMA_SERVER_BIN``, PATH or
``scripts/build_llama_server.sh``'s output; skipped with the reason printed when absent). Each
server's configuration is printed; the best configuration's rate is ``http_matches_s``.
~300-token trajectories; the travel rubric with the compact verdict, constrained by its exact
grammar (``--http_format gbnf``, the same tokens as the Flax generative mode: ~120-134 per
request) or its JSON schema (``schema``); one match = two requests, all in flight together. One
warm-up match is excluded from the timing.

Flax part: ``FlaxJudge`` on SmolLM2 (float32, in this process) judging the same matches in one
batched call per mode: the rubric prefix prefilled once, rows in chunks of ``--flax_max_rows``.
Logit mode generates nothing (one teacher-forced pass reads the score distributions); generative
mode writes the same compact verdict the HTTP judge asks for, greedy, under the verdict's grammar
(``judges/flax/grammar.py``: the fixed text forced, the scores restricted to 0..10, as the
HTTP side's JSON schema constrains them), and parses it strictly. A warm-up call compiles each
mode's programs.

Work: what each side computed for the timed matches. Logit mode: the prompt tokens its calls
ran (padding included, shared beginnings once) and the score branches' tokens. ``llama-server``
(started with ``--metrics``): its own counters of prompt tokens computed and reused from its
prompt cache, generated tokens, and the slot-seconds spent on each. Its share of time in prompts
(``http_prompt_share``, measured with one slot, ``native:1``: with more, the slots' seconds
overlap) bounds what a prefill-only judge gains over it at its speed per prompt token: 1 / share.

Agreement: the fraction of matches (judged ok by both) where the two modes name the same winner
(P, Q or tie), and each backend's agreement with the ground truth: every trajectory has a known
quality, and the programmatic rubric judge with no noise gives the reference verdicts. With a
135M judge these say more about the model than about the method. Ends with one line:
``RESULT flax_logit_matches_s=... flax_generative_matches_s=... http_matches_s=...
logit_vs_generative_agreement=...`` (plus truth agreements, the best HTTP configuration, the
one-slot server's prompt share and the match set).
Timings on a shared machine are noisy.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import time

import httpx
import numpy as np

from arenarl_jax.judges import http
from arenarl_jax.judges import local_server
from arenarl_jax.models.cpu import allocator
from arenarl_jax.models.embedded import find_smollm2_gguf
from arenarl_jax.types import Match, Step, ToolCall, Trajectory

_CITIES = ["Lyon", "Paris", "Nice", "Bordeaux", "Lille", "Nantes", "Strasbourg", "Toulouse"]


def make_trajectory(rng: np.random.Generator, query: str, quality: int = 3) -> Trajectory:
  """A travel trajectory of about 300 tokens (~1,200 characters) of a known ``quality`` 0-3.

  3: two tool calls and a plan with times, prices and the return; 2: the same calls, a plan
  without prices or return; 1: the train search only and a vague plan; 0: no tool calls, a vague
  plan. ``metadata["quality"]`` carries it for the ground-truth checker.
  """
  city, other = rng.choice(_CITIES, 2, replace=False)
  hour = int(rng.integers(7, 11))
  price = int(rng.integers(20, 90))
  think = Step(reasoning=f"The user wants a day trip from {city} to {other}. I should check trains "
                         f"and the main sights, then plan the timing and the budget.")
  trains = dataclasses.replace(think, tool_calls=(ToolCall(
      "search_train_tickets", {"date": "2026-12-05", "from_city": city, "to_city": other}),),
      tool_results=(f"TGV {hour}:04 {city} -> {other} arrives {hour + 2}:10, {price} EUR; TER "
                    f"{hour + 1}:30 arrives {hour + 4}:02, {price // 2} EUR; return trains "
                    f"every hour until 21:40.",))
  sights = Step(reasoning=f"Now the sights near the station in {other}.",
                tool_calls=(ToolCall("around_search", {"location": "45.76,4.83", "radius": 3000,
                                                       "keyword": "museum"}),),
                tool_results=(f"Musee des Beaux-Arts (0.8 km, 10:00-18:00, 12 EUR); old town "
                              f"walking tour (1.2 km, free); covered market (0.5 km, closes "
                              f"14:00).",))
  answers = {
      3: (f"Take the TGV at {hour}:04 from {city} ({price} EUR), arriving {hour + 2}:10 in "
          f"{other}. Walk to the covered market before it closes at 14:00, then the Musee des "
          f"Beaux-Arts (12 EUR, open until 18:00) and the free old-town tour. Return on any "
          f"hourly train until 21:40. Total about {price * 2 + 12} EUR."),
      2: (f"Take the morning TGV from {city} to {other}. Walk to the covered market first, then "
          f"visit the Musee des Beaux-Arts and join the old-town walking tour in the afternoon. "
          f"Come back by train in the evening; the trip is comfortable and the sights are close "
          f"to the station."),
      1: (f"Take a train from {city} to {other} in the morning. There should be some museums and "
          f"a nice old town to walk around. Come back in the evening. It should be a pleasant "
          f"day; check the details before you leave."),
      0: (f"{other} is a nice city for a day trip. Trains usually run often, and there are many "
          f"things to see. Have a good trip and enjoy the local food; remember to bring "
          f"comfortable shoes."),
  }
  steps = {3: (trains, sights), 2: (trains, sights), 1: (trains, think), 0: (think,)}[quality]
  return Trajectory(query, steps + (Step(content=answers[quality]),),
                    metadata={"quality": quality})


MATCH_SETS = ("pairs", "round_robin", "anchor")


def make_matches(n: int, seed: int = 0, match_set: str = "pairs",
                 group_size: int = 8) -> list[Match]:
  """``n`` matches between trajectories of different random qualities.

  ``pairs``: independent matches, two new trajectories each (nothing shared beyond the query);
  ``round_robin`` / ``anchor``: the one round those tournaments send to the judge for groups of
  ``group_size`` trajectories (``anchor`` is also the first round of seeded single elimination;
  one query per group, qualities cycling 0-3), group after group, the last group cut at ``n``
  matches. A trajectory is then shown first in several prompts of its group, as in training.
  """
  if match_set not in MATCH_SETS:
    raise ValueError(f"match_set must be one of {MATCH_SETS}, got {match_set!r}")
  rng = np.random.default_rng(seed)
  query = "Plan a one-day train trip with sights and a budget, leaving next Saturday."
  out = []
  if match_set == "pairs":
    for k in range(n):
      qp, qq = rng.choice(4, 2, replace=False).tolist()
      out.append(Match(k, 0, 1, query, make_trajectory(rng, query, qp),
                       make_trajectory(rng, query, qq)))
    return out
  from arenarl_jax.tournament import registry  # pylint: disable=g-import-not-at-top
  group = 0
  while len(out) < n:
    q = f"{query} Group {group}."
    trajs = [make_trajectory(rng, q, int(x)) for x in rng.permutation(group_size) % 4]
    pairs = next(registry.TOPOLOGIES[match_set].play(group_size, rng))
    out += [Match(group, i, j, q, trajs[i], trajs[j]) for i, j in pairs]
    group += 1
  return out[:n]


def truth_checker(traj: Trajectory) -> dict:
  """Ground truth for the rubric judge: every dimension = 1 + 3 * quality."""
  from arenarl_jax.judges import rubric as rubric_lib  # pylint: disable=g-import-not-at-top
  x = 1 + 3 * int(traj.metadata["quality"])
  r = rubric_lib.TRAVEL
  return {s: {d.name: x for d in r.dimensions(s)} for s in rubric_lib.SECTIONS}


def winners(results) -> list[int | None]:
  """Per match: 1 (P wins), -1 (Q wins), 0 (tie), None (failed)."""
  return [None if not r.ok else int(np.sign(round(r.score_p - r.score_q, 6))) for r in results]


def agreement(a: list[int | None], b: list[int | None]) -> tuple[float, int]:
  """Fraction of matches (ok in both) with the same winner, and how many were compared."""
  pairs = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
  return (sum(x == y for x, y in pairs) / len(pairs) if pairs else math.nan), len(pairs)


def server_configs(args) -> list[tuple[str, int]]:
  """The HTTP configurations to measure: ("python", 1) and ("native", slots) entries of
  ``--servers``; native ones are dropped (with the reason printed) when no binary is found."""
  out = []
  binary = local_server.find_native_server(args.server_binary)
  for item in [x.strip() for x in args.servers.split(",") if x.strip()]:
    kind, _, slots = item.partition(":")
    if kind not in ("python", "native") or (kind == "python" and slots):
      raise SystemExit(f"--servers: {item!r} is neither 'python' nor 'native:SLOTS'")
    if kind == "native" and binary is None:
      print(f"http {item}: skipped, no llama-server binary (--server_binary, $LLAMA_SERVER_BIN, "
            f"PATH or {local_server.BUILT_SERVER}; scripts/build_llama_server.sh builds it)")
      continue
    out.append((kind, int(slots or 1)))
  return out


def make_server(kind: str, slots: int, args) -> local_server.LlamaServer:
  """llama-cpp-python's server (one request at a time) or llama.cpp's with ``slots`` slots."""
  model = find_smollm2_gguf()
  threads = dict(n_threads=args.n_threads, n_threads_batch=args.n_threads_batch)
  if kind == "native":  # --metrics: its work counters (server_work)
    return local_server.NativeLlamaServer(local_server.find_native_server(args.server_binary),
                                          model, parallel=slots, n_ctx=2048,
                                          extra_args=("--metrics",), **threads)
  return local_server.LlamaServer(model, n_ctx=2048, **threads)


SERVER_COUNTERS = ("prompt_tokens_total", "prompt_tokens_cached_total", "prompt_seconds_total",
                   "tokens_predicted_total", "tokens_predicted_seconds_total")


def server_work(server: local_server.LlamaServer) -> dict[str, float]:
  """``llama-server``'s work counters now (its Prometheus ``/metrics``; empty for a server
  without them). Seconds are summed over slots."""
  try:
    resp = httpx.get(f"http://{server.host}:{server.port}/metrics", timeout=30.0)
  except httpx.HTTPError:
    return {}
  if resp.status_code != 200:
    return {}
  out = {}
  for line in resp.text.splitlines():
    name, _, value = line.partition(" ")
    name = name.removeprefix("llamacpp:")
    if name in SERVER_COUNTERS:
      out[name] = float(value)
  return out


def bench_http(matches: list[Match], kind: str, slots: int, args) -> tuple[float, dict, list]:
  """Matches/s of the HTTP judge against one local llama.cpp server, its metrics and results.

  ``--http_format gbnf`` (default): both servers get the verdict's exact grammar (the compact
  skeleton with single spaces, scores 0..10: the tokens the Flax generative mode writes, ~120-134
  per reply); ``schema``: its JSON schema (llama.cpp's grammar then allows whitespace: SmolLM2
  writes ~175 tokens per reply), as OpenAI's ``json_schema`` form for the native server and the
  ``json_object`` + ``schema`` form that llama-cpp-python's server takes.
  """
  server = make_server(kind, slots, args)
  response_format = ("gbnf" if args.http_format == "gbnf" else
                     "json_schema" if kind == "native" else "json_object_schema")
  print(f"http server {kind}:{slots}: {type(server).__name__} {server.settings()}, "
        f"response_format={response_format}")
  with server:
    config = http.HttpJudgeSettings(base_url=server.base_url, model="smollm2",
                                  response_format=response_format,
                                  max_tokens=args.max_tokens,
                                  max_concurrency=2 * len(matches), timeout_s=900.0,
                                  parse_retries=0)
    judge = http.HttpJudge(config, "travel", compact=True)
    judge.judge(make_matches(1, seed=99))  # warm-up
    judge.metrics.reset()
    before = server_work(server)
    start = time.perf_counter()
    results = judge.judge(matches)
    wall = time.perf_counter() - start
    after = server_work(server)
  metrics = judge.metrics.snapshot()
  metrics["server"] = {k: after[k] - before[k] for k in after if k in before}
  metrics["ok_matches"] = sum(r.ok for r in results)
  return len(matches) / wall, metrics, results


def bench_flax(matches: list[Match], max_rows: int, mode: str = "logit",
               max_new_tokens: int = 192, attention: str = "auto") -> tuple[float, dict, list]:
  """Matches/s of the local Flax judge (SmolLM2 f32) in ``mode``, its metrics and results.

  The warm-up judges the same matches once, which compiles the prefix and every (rows, bucket)
  program the timed call uses (the trajectories' lengths vary with their quality, so a smaller
  warm-up set misses buckets); the timed call must compile nothing.
  Generative mode asks for the compact verdict (the HTTP side's tokens).
  """
  from arenarl_jax.judges.flax import make_flax_judge  # pylint: disable=g-import-not-at-top
  flax = {"model": "smollm2", "max_rows": max_rows, "max_user_tokens": 2048, "mode": mode,
          "attention": attention}
  if mode == "generative":
    flax["max_new_tokens"] = max_new_tokens
  judge = make_flax_judge({"rubric": "travel", "compact": mode == "generative", "flax": flax})
  start = time.perf_counter()
  judge.judge(matches)  # warm-up: the same programs as the timed call
  warmup_s = time.perf_counter() - start
  judge.metrics.reset()
  judge.counts.clear()
  start = time.perf_counter()
  results = judge.judge(matches)
  wall = time.perf_counter() - start
  metrics = judge.snapshot()
  metrics["ok_matches"] = sum(r.ok for r in results)
  metrics["prefix_tokens"] = len(judge.prefix_state("pairwise")[0])
  metrics["warmup_s"] = warmup_s
  metrics["tokens_s"] = metrics["tokens"] / wall
  if mode == "logit":
    metrics["score_mass_p50"] = float(np.median([r.detail["score_mass"] for r in results
                                                 if r.ok]))
  errors = [r.error for r in results if not r.ok]
  metrics["first_error"] = (errors[0] or "")[:160] if errors else ""
  margins = [abs(r.score_p - r.score_q) for r in results if r.ok]
  metrics["margin_p50"] = float(np.median(margins)) if margins else math.nan
  return len(matches) / wall, metrics, results


def truth(matches: list[Match]) -> list[int | None]:
  """The noise-free rubric judge's winners (the ground truth)."""
  from arenarl_jax.judges import rubric_judge  # pylint: disable=g-import-not-at-top
  return winners(rubric_judge.RubricJudge(truth_checker, "travel").judge(matches))


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
  parser.add_argument("--flax_matches", type=int, default=64, help="0 skips the Flax parts")
  parser.add_argument("--generative_matches", type=int, default=16,
                      help="Flax generative-mode matches (the first of the Flax ones); 0 skips")
  parser.add_argument("--flax_max_rows", type=int, default=8, help="rows per compiled call")
  parser.add_argument("--match_set", choices=MATCH_SETS, default="pairs",
                      help="independent pairs, or the matches of a tournament's round")
  parser.add_argument("--group_size", type=int, default=8, help="trajectories per tournament group")
  parser.add_argument("--servers", default="python,native:1,native:4,native:8",
                      help="HTTP configurations, measured one after the other: 'python' and/or "
                           "'native:SLOTS'; the best is http_matches_s")
  parser.add_argument("--server_binary", default="", help="llama.cpp's llama-server")
  parser.add_argument("--http_format", choices=("gbnf", "schema"), default="gbnf",
                      help="the HTTP side's constraint: the verdict's grammar or JSON schema")
  parser.add_argument("--n_threads", type=int, default=2, help="llama.cpp decode threads")
  parser.add_argument("--n_threads_batch", type=int, default=2,
                      help="llama.cpp prompt-processing threads")
  parser.add_argument("--max_tokens", type=int, default=192)
  parser.add_argument("--attention", default="auto", help="model.attention of the Flax judge")
  args = parser.parse_args()
  allocator.reexec_with_retained_heap()  # as the CLI does (models/cpu/allocator.py)
  n_all = max(args.flax_matches, args.http_matches, args.generative_matches)
  matches = make_matches(n_all, match_set=args.match_set, group_size=args.group_size)
  print(f"match set: {args.match_set}" + ("" if args.match_set == "pairs" else
                                          f" (groups of {args.group_size})"))
  reference = truth(matches)
  rate = {"logit": math.nan, "generative": math.nan, "http": math.nan}
  verdicts: dict[str, list] = {}
  if args.flax_matches:
    print(f"matmul 1024^3 float32 now: {matmul_gflops():.0f} GFLOP/s")
    rate["logit"], m, res = bench_flax(matches[:args.flax_matches], args.flax_max_rows,
                                        attention=args.attention)
    verdicts["logit"] = winners(res)
    print(f"flax logit: {args.flax_matches} matches ({m['rows']} prompts, {m['tokens']} prompt "
          f"tokens after the shared {m['prefix_tokens']}-token prefix): {rate['logit']:.4f} "
          f"matches/s, {m['tokens_s']:.0f} tokens/s; ok={m['ok_matches']}, calls={m['calls']}, "
          f"compiles while timed={m['compiles']}, call latency p50 = {m['latency_ms_p50']:.0f} "
          f"ms, score mass p50 = {m['score_mass_p50']:.3f}, |score_p - score_q| p50 = "
          f"{m['margin_p50']:.3f}, order flips = {m['order_flip_rate']:.3f}; warm-up "
          f"{m['warmup_s']:.0f} s")
    print(f"  work: {m['padded_tokens']} prompt tokens run with padding "
          f"({m['tokens'] - m['shared_tokens']} real, shared beginnings once), "
          f"{m['branch_tokens']} branch tokens")
  if args.flax_matches and args.generative_matches:
    n = min(args.generative_matches, args.flax_matches)
    rate["generative"], m, res = bench_flax(matches[:n], args.flax_max_rows, "generative",
                                            args.max_tokens, attention=args.attention)
    verdicts["generative"] = winners(res)
    print(f"flax generative: {n} matches ({m['rows']} prompts, compact verdict under its grammar, "
          f"{m['generated_tokens'] / max(m['rows'], 1):.0f} tokens per verdict, greedy): "
          f"{rate['generative']:.4f} matches/s; "
          f"ok={m['ok_matches']}, parse_failures={m['parse_failures']}, calls={m['calls']}, "
          f"order flips = {m['order_flip_rate']:.3f}; warm-up {m['warmup_s']:.0f} s"
          + (f"; first error: {m['first_error']}" if m["first_error"] else ""))
  best_config, prompt_share = "none", math.nan
  if args.http_matches:
    for kind, slots in server_configs(args):
      name = "python" if kind == "python" else f"native_np{slots}"
      r, m, res = bench_http(matches[:args.http_matches], kind, slots, args)
      a, n = agreement(winners(res), reference)
      print(f"http {name}: {args.http_matches} matches ({m['requests']} requests): {r:.4f} "
            f"matches/s; ok={m['ok_matches']}, parse_failures={m['parse_failures']}, "
            f"format_fallbacks={m['format_fallbacks']}, order flips = "
            f"{m['order_flip_rate']:.3f}, latency p50/p90/p99 = {m['latency_ms_p50']:.0f}/"
            f"{m['latency_ms_p90']:.0f}/{m['latency_ms_p99']:.0f} ms; vs ground truth {a:.3f} "
            f"of {n}")
      work = m["server"]
      if work:
        print(f"  work: {work['prompt_tokens_total']:.0f} prompt tokens computed "
              f"({work.get('prompt_tokens_cached_total', math.nan):.0f} reused from its cache) "
              f"in {work['prompt_seconds_total']:.0f} slot-s, "
              f"{work['tokens_predicted_total']:.0f} tokens generated in "
              f"{work['tokens_predicted_seconds_total']:.0f} slot-s")
        busy = work["prompt_seconds_total"] + work["tokens_predicted_seconds_total"]
        if slots == 1 and busy:  # with more slots their seconds overlap
          prompt_share = work["prompt_seconds_total"] / busy
          print(f"  prompts take {prompt_share:.3f} of its time: a prefill-only judge at its "
                f"speed per prompt token would be {1 / prompt_share:.2f}x faster")
      if math.isnan(rate["http"]) or r > rate["http"]:
        rate["http"], verdicts["http"], best_config = r, winners(res), name
    print(f"http best: {best_config} at {rate['http']:.4f} matches/s")
  lg, n_lg = agreement(verdicts.get("logit", []), verdicts.get("generative", []))
  print(f"logit vs generative: same winner on {lg:.3f} of {n_lg} matches judged ok by both")
  truth_keys = []
  for name, v in verdicts.items():
    a, n = agreement(v, reference)
    print(f"{name} vs ground truth (noise-free rubric judge): {a:.3f} of {n} matches")
    truth_keys.append(f"{name}_truth_agreement={a:.4g}")
  if not (math.isnan(rate["logit"]) or math.isnan(rate["http"])):
    print(f"flax logit / best http ({best_config}) = {rate['logit'] / rate['http']:.2f}x "
          f"(target >= 5x)")
  print(f"RESULT flax_logit_matches_s={rate['logit']:.4g} "
        f"flax_generative_matches_s={rate['generative']:.4g} http_matches_s={rate['http']:.4g} "
        f"logit_vs_generative_agreement={lg:.4g} " + " ".join(truth_keys)
        + f" http_best_config={best_config} http_prompt_share={prompt_share:.4g}"
        f" match_set={args.match_set}")


if __name__ == "__main__":
  main()
