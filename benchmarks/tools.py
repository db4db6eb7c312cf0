"""Tool-call throughput: the in-process tool source and the same tools over MCP (stdio).

Run: PYTHONPATH=$PWD .venv/bin/python benchmarks/tools.py [--env travel] [--calls 4000]
     [--concurrency 32] [--quick]

The call mix is realistic: the tool calls the environment's expert makes on its first training
tasks (all subtasks), cycled to ``--calls`` calls. In-process = ``await source.call`` one after the
other on one event loop (what a rollout's tool phase does per call). MCP = the same calls through
:class:`~arenarl_jax.envs.mcp_client.McpToolSource` (cache off) to ``python -m
arenarl_jax.envs.mcp_server`` serving the same world, ``--concurrency`` calls in flight; also shown:
one call at a time, and a 128-call batch (one rollout turn of 128 rows) as wall seconds. Server
start-up and a warm-up batch are not timed. If the travel world is not importable, the fake world
of arenarl_jax/testing/mcp_fakes.py (the same six tool names) stands in, and the output says so.
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import pathlib
import time

from arenarl_jax.envs import base, mcp_client, tool_sources

ROOT = pathlib.Path(__file__).resolve().parent.parent


def load_environment(name: str, seed: int) -> tuple[base.Environment, list[str]]:
  """The environment and the extra server arguments that make the server find it."""
  if name in base.registered():
    return base.make_environment(name, seed), []
  print(f"environment {name!r} is not importable; falling back to the fake environment "
        f"(arenarl_jax/testing/mcp_fakes.py: the same six tool names over a two-city world)")
  from arenarl_jax.testing import mcp_fakes  # pylint: disable=import-outside-toplevel
  # Importing it registers "mcp_fake"; the server imports it by the same name.
  return base.make_environment("mcp_fake", seed), ["--import", mcp_fakes.__name__]


def call_mix(env: base.Environment, tasks: int) -> list[tuple[str, str]]:
  """(name, JSON arguments) of every tool call the expert makes on the first training tasks."""
  by_subtask = collections.defaultdict(list)
  for task in env.tasks("train"):
    by_subtask[task.subtask].append(task)
  chosen = [t for group in by_subtask.values() for t in group[:max(1, tasks // len(by_subtask))]]
  calls = []
  for task in chosen:
    for message in env.expert(task, 0.0, 0):
      for call in message.get("tool_calls") or ():
        calls.append((call["function"]["name"], call["function"]["arguments"]))
  if not calls:
    raise SystemExit(f"the {env.name} expert made no tool calls on {len(chosen)} tasks")
  return calls


async def inprocess_rate(source: base.ToolSource, calls) -> tuple[float, int]:
  start = time.perf_counter()
  errors = 0
  for name, args in calls:
    errors += not (await source.call(name, args)).ok
  return len(calls) / (time.perf_counter() - start), errors


async def mcp_rates(source: mcp_client.McpToolSource, calls, concurrency: int) -> dict[str, float]:
  await source.start()
  await asyncio.gather(*(source.call(n, a) for n, a in calls[:200]))  # warm-up, not timed
  start = time.perf_counter()
  results = await asyncio.gather(*(source.call(n, a) for n, a in calls))
  concurrent = len(calls) / (time.perf_counter() - start)
  sequential_calls = calls[:max(50, len(calls) // 10)]
  start = time.perf_counter()
  for name, args in sequential_calls:
    await source.call(name, args)
  sequential = len(sequential_calls) / (time.perf_counter() - start)
  turn = [calls[k % len(calls)] for k in range(128)]
  start = time.perf_counter()
  await asyncio.gather(*(source.call(n, a) for n, a in turn))
  turn_s = time.perf_counter() - start
  await source.aclose()
  return {"concurrent": concurrent, "sequential": sequential, "turn128_s": turn_s,
          "errors": sum(not r.ok for r in results)}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--env", default="travel")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--calls", type=int, default=4000)
  parser.add_argument("--tasks", type=int, default=25, help="expert tasks the mix comes from")
  parser.add_argument("--concurrency", type=int, default=32)
  parser.add_argument("--quick", action="store_true", help="a few hundred calls: proves it runs")
  args = parser.parse_args()
  if args.quick:
    args.calls, args.tasks = 400, 5

  env, server_extra = load_environment(args.env, args.seed)
  mix = call_mix(env, args.tasks)
  calls = [mix[k % len(mix)] for k in range(args.calls)]
  counts = collections.Counter(name for name, _ in mix)
  print(f"env={env.name} mix of {len(mix)} expert calls: "
        f"{json.dumps(dict(sorted(counts.items())))}")

  inproc, inproc_errors = asyncio.run(inprocess_rate(env.tool_source(), calls))
  print(f"in-process: {inproc:,.0f} calls/s ({inproc_errors} error results of {len(calls)})")

  os.environ["PYTHONPATH"] = os.pathsep.join(
      [str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
  command = tool_sources.server_command(env.name, args.seed) + server_extra
  source = mcp_client.McpToolSource(command, mcp_client.McpClientSettings(
      concurrency=args.concurrency, cache_size=0))
  rates = asyncio.run(mcp_rates(source, calls, args.concurrency))
  print(f"MCP stdio, {args.concurrency} in flight: {rates['concurrent']:,.0f} calls/s "
        f"({rates['errors']} error results); one at a time: {rates['sequential']:,.0f} calls/s; "
        f"128-call turn: {rates['turn128_s']:.3f} s")
  print(f"RESULT inproc_calls_s={inproc:.0f} mcp_calls_s={rates['concurrent']:.0f}")


if __name__ == "__main__":
  main()
