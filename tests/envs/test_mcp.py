"""MCP both sides: our stdio server against the in-process source, and the client's guarantees.

Every server here is a subprocess on stdio (no sockets). The equality and kill tests run on every
registered environment: ``mcp_fake`` (arenarl_jax/testing/mcp_fakes.py) always, travel and
research once they exist.
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import pathlib
import shlex
import signal
import sys
import time

import psutil
import pytest

from arenarl_jax import config_tree
from arenarl_jax.envs import base, inprocess, mcp_client, mcp_server, tool_sources
from arenarl_jax.testing import mcp_fakes  # registers the "mcp_fake" environment

FAKES = mcp_fakes.__name__  # what the server imports: arenarl_jax.testing.mcp_fakes
ROOT = pathlib.Path(__file__).resolve().parents[2]
SERVER_ENV = {"PYTHONPATH": str(ROOT)}
ENVS = ["mcp_fake"] + [n for n in ("travel", "research") if n in base.registered()]
SLOW_ARGV = [sys.executable, "-m", "arenarl_jax.envs.mcp_server",
             "--source", f"{FAKES}:slow_source"]


def server_argv(env_name: str) -> list[str]:
  return [sys.executable, "-m", "arenarl_jax.envs.mcp_server", "--import", FAKES,
          "--env", env_name, "--seed", "0"]


def client(argv, **settings) -> mcp_client.McpToolSource:
  settings.setdefault("backoff_s", 0.01)
  return mcp_client.McpToolSource(argv, mcp_client.McpClientSettings(**settings), env=SERVER_ENV)


def server_pids() -> list[int]:
  """Our own MCP server children (by pid; nothing else is ever signalled)."""
  pids = []
  for child in psutil.Process().children():
    try:
      if "arenarl_jax.envs.mcp_server" in " ".join(child.cmdline()) and child.status() != "zombie":
        pids.append(child.pid)
    except psutil.Error:
      pass
  return pids


def wait_no_servers(deadline_s: float = 10.0) -> list[int]:
  end = time.monotonic() + deadline_s
  while (pids := server_pids()) and time.monotonic() < end:
    time.sleep(0.05)
  return pids


def reference_calls(env) -> list[tuple[str, object]]:
  """Valid calls (the expert's) and bad ones of every kind the source must answer identically."""
  if env.name == "mcp_fake":
    return list(mcp_fakes.CALLS)
  calls = []
  for task in env.tasks("train")[:3]:
    for message in env.expert(task, 0.0, 0):
      for call in message.get("tool_calls") or ():
        calls.append((call["function"]["name"], call["function"]["arguments"]))
  for schema in env.tool_source().tools():
    calls += [(schema["name"], {}), (schema["name"], {"no_such_argument": 1})]
  return calls + [("no_such_tool", {}), (calls[0][0], "{not json")]


def outcome(result: base.ToolResult) -> tuple:
  return result.text, result.ok, result.error_kind


@pytest.mark.parametrize("env_name", ENVS)
def test_tools_and_calls_equal_inprocess(env_name):
  env = base.make_environment(env_name, 0)
  ref = env.tool_source()
  calls = reference_calls(env)
  src = client(server_argv(env_name), cache_size=0)
  assert src.tools() == ref.tools()  # sync, before any loop: listed through a short-lived server

  async def run(part, close):
    out = await asyncio.gather(*(src.call(n, a) for n, a in part))
    if close:
      await src.aclose()
    return out

  # On fake, two loops, as when each rollout step runs its own asyncio.run: the second loop starts a
  # new server (a client property; the other environments use one loop to save a server start).
  half = len(calls) // 2 if env_name == "mcp_fake" else 0
  got = (asyncio.run(run(calls[:half], close=False)) if half else []) + asyncio.run(
      run(calls[half:], close=True))
  want = asyncio.run(run_inprocess(ref, calls))
  for (name, args), g, w in zip(calls, got, want):
    assert outcome(g) == outcome(w), (name, args)
  kinds = {r.error_kind for r in want}
  assert {None, base.BAD_ARGUMENTS, base.UNKNOWN_TOOL} <= kinds
  if env_name == "mcp_fake":
    assert base.NOT_FOUND in kinds and any(inprocess.TRUNCATION_NOTE[:16] in r.text for r in got)
  assert src.stats.connects == (3 if half else 2) and src.stats.transport_errors == 0
  assert wait_no_servers() == []


async def run_inprocess(ref, calls):
  return [await ref.call(n, a) for n, a in calls]


@pytest.mark.parametrize("env_name", ENVS)
def test_server_killed_mid_batch_then_reconnects(env_name):
  env = base.make_environment(env_name, 0)
  ref = env.tool_source()
  valid = [(n, a) for n, a in reference_calls(env)
           if asyncio.run(ref.call(n, a)).ok]
  batch = [valid[k % len(valid)] for k in range(512)]
  src = client(server_argv(env_name), cache_size=0, concurrency=64)

  before = set(server_pids())

  async def main():
    await src.start()
    (pid,) = set(server_pids()) - before
    finished = 0

    async def one(name, args):
      nonlocal finished
      result = await src.call(name, args)
      finished += 1
      if finished == 32:  # mid-batch: 32 answered, the window of 64 full of sent calls
        os.kill(pid, signal.SIGKILL)
      return result

    results = await asyncio.gather(*(one(n, a) for n, a in batch))
    after = await src.call(*valid[0])
    new_pids = server_pids()
    await src.aclose()
    return pid, results, after, new_pids

  pid, results, after, new_pids = asyncio.run(main())
  want = asyncio.run(run_inprocess(ref, batch))
  lost = [r for r in results if not r.ok]
  assert lost and all(r.error_kind == base.TRANSPORT for r in lost)
  assert all(outcome(r) == outcome(w) for r, w in zip(results, want) if r.ok)
  assert outcome(after) == outcome(want[0])
  assert len(new_pids) == 1 and new_pids[0] != pid and src.stats.connects >= 2
  assert src.stats.transport_errors == len(lost)
  assert wait_no_servers() == []


def test_in_flight_calls_fail_when_server_dies_then_fresh_server():
  src = client(SLOW_ARGV, cache_size=0)

  async def stats(k):
    return json.loads((await src.call("stats", {"poll": k})).text)

  async def main():
    await src.start()
    sleepers = [asyncio.ensure_future(src.call("wait", {"tag": k, "delay_s": 30}))
                for k in range(8)]
    k = 0
    while (s := await stats(k))["in_flight"] < 8:  # all eight are inside the server
      k += 1
      await asyncio.sleep(0.01)
    os.kill(s["pid"], signal.SIGKILL)
    results = await asyncio.gather(*sleepers)
    fresh = await stats(-1)
    await src.aclose()
    return s["pid"], results, fresh

  pid, results, fresh = asyncio.run(main())
  assert [r.error_kind for r in results] == [base.TRANSPORT] * 8
  assert all(r.text.startswith("Error: wait: ") for r in results)
  assert fresh["pid"] != pid and fresh["served"] == 0 and src.stats.connects == 2


def test_cache_concurrency_limit_name_map_and_timeout_on_a_slow_server():
  src = client(SLOW_ARGV, concurrency=3, name_map=json.dumps({"pause": "wait"}))

  async def main():
    await src.start()
    assert sorted(t["name"] for t in src.tools()) == ["pause", "stats"]
    server = lambda k: src.call("stats", {"poll": k})  # distinct arguments: never cached
    limited = await asyncio.gather(*(src.call("pause", {"tag": k, "delay_s": 0.2})
                                     for k in range(9)))
    peak = json.loads((await server(0)).text)["peak"]
    sent, hits = src.stats.sent, src.stats.cache_hits
    first = await src.call("pause", {"tag": "a", "delay_s": 0})
    again = await src.call("pause", '{"delay_s": 0, "tag": "a"}')  # same object, other spelling
    served = json.loads((await server(1)).text)["served"]
    errors = [await src.call("nope", {}), await src.call("nope", {})]
    late = await src.call("pause", {"tag": "late", "delay_s": 0.4}, timeout=0.1)
    await asyncio.sleep(0.6)  # its reply arrives for a request nobody waits for any more
    alive = await src.call("pause", {"tag": "after", "delay_s": 0})
    await src.aclose()
    return limited, peak, sent, hits, first, again, served, errors, late, alive

  limited, peak, sent, hits, first, again, served, errors, late, alive = asyncio.run(main())
  assert all(r.ok for r in limited) and src.stats.max_in_flight == 3 and 1 <= peak <= 3
  assert again == dataclasses.replace(first, latency_s=again.latency_s) and first.ok
  assert src.stats.cache_hits == hits + 1 and served == 10  # the repeat was not sent
  assert [r.error_kind for r in errors] == [base.UNKNOWN_TOOL] * 2
  # first, stats, the two (uncached) errors, late, alive
  assert src.stats.sent == sent + 1 + 1 + 2 + 1 + 1
  assert late.error_kind == base.TIMEOUT and src.stats.timeouts == 1
  assert alive.ok and src.stats.connects == 1
  # Without a limit the server runs calls side by side (eight at once in the test above), so the
  # peak of at most 3 here comes from the client's limit.


def test_unreachable_server_gives_transport_errors_after_retries():
  missing = client(["/nonexistent/mcp-server"], retries=2)
  results = asyncio.run(run_inprocess(missing, [("search_poi", {}), ("search_poi", {})]))
  assert [r.error_kind for r in results] == [base.TRANSPORT] * 2
  assert "failed 3 time(s)" in results[0].text and missing.stats.connect_failures == 6
  with pytest.raises(mcp_client.TransportError):
    missing.tools()
  # A server that exits before answering initialize is a transport failure too.
  broken = client([sys.executable, "-c", "import sys; sys.exit(3)"], retries=0)
  (result,) = asyncio.run(run_inprocess(broken, [("search_poi", {})]))
  assert result.error_kind == base.TRANSPORT and broken.stats.connect_failures == 1


def test_make_tool_source_from_config(monkeypatch):
  config = config_tree.make_base_config()
  fields = set(mcp_client.McpClientSettings.__dataclass_fields__)
  assert set(config.env.mcp.keys()) == fields  # config and settings class cannot drift
  config.env.name = "mcp_fake"
  source = tool_sources.make_tool_source(config.env)
  assert isinstance(source, inprocess.InProcessToolSource)
  assert source.tools() == mcp_fakes.fake_source().tools()

  config.env.tools = "mcp"
  config.env.seed = 3
  default = tool_sources.make_tool_source(config.env)
  assert default.command == tool_sources.server_command("mcp_fake", 3)
  assert default.command[1:] == ["-m", "arenarl_jax.envs.mcp_server", "--env", "mcp_fake", "--seed",
                                 "3"]
  config.env.mcp.name_map = '{"search_poi": "maps_text_search"}'
  assert tool_sources.make_tool_source(config.env).name_map == {"search_poi": "maps_text_search"}
  config.env.mcp.name_map = "{oops"
  with pytest.raises(ValueError, match="env.mcp.name_map"):
    tool_sources.make_tool_source(config.env)
  config.env.mcp.name_map = '{"a": "x", "b": "x"}'
  with pytest.raises(ValueError, match="same server tool"):
    tool_sources.make_tool_source(config.env)
  config.env.tools = "grpc"
  with pytest.raises(ValueError, match="env.tools"):
    tool_sources.make_tool_source(config.env)

  # The full path: env.tools=mcp with a command, PYTHONPATH passed on through env.mcp.inherit_env.
  monkeypatch.setenv("PYTHONPATH", SERVER_ENV["PYTHONPATH"])
  config.env.tools = "mcp"
  config.env.mcp.name_map = '{"find_places": "search_poi"}'
  config.env.mcp.command = shlex.join(server_argv("mcp_fake"))
  source = tool_sources.make_tool_source(config.env)

  async def main():
    async with source:
      return await source.call("find_places", {"city": "Alpha", "keyword": "cafe"})

  result = asyncio.run(main())
  assert outcome(result) == outcome(mcp_fakes.fake_source().call_sync(
      "search_poi", {"city": "Alpha", "keyword": "cafe"}))
  assert "find_places" in [t["name"] for t in source.tools()]


def test_server_pieces_without_a_subprocess():
  from mcp.shared.memory import create_connected_server_and_client_session

  class Raising:
    def tools(self):
      return [{"name": "boom", "description": "", "parameters": {"type": "object"}}]

    async def call(self, name, arguments=None, *, timeout=None):
      raise RuntimeError("secret detail")

  async def main():
    async with create_connected_server_and_client_session(
        mcp_server.build_server(Raising())) as session:
      return await session.call_tool("boom", {})

  reply = asyncio.run(main())
  assert reply.isError and reply.meta == {mcp_server.ERROR_KIND_META: base.TOOL_ERROR}
  assert reply.content[0].text == "Error: boom failed (RuntimeError)"
  ok = mcp_server.call_result(base.ToolResult(text="fine"))
  assert not ok.isError and ok.meta is None
  with pytest.raises(ValueError, match="--source"):
    mcp_server.load_source(FAKES)
  with pytest.raises(ValueError, match="no attribute"):
    mcp_server.load_source(f"{FAKES}:nothing_here")
  assert isinstance(mcp_server.load_source(f"{FAKES}:slow_source"), mcp_fakes.SlowSource)


def test_name_map_renames_and_hides_shadowed_server_tools():
  src = mcp_client.McpToolSource(["unused"], mcp_client.McpClientSettings(
      name_map={"stats": "wait"}))
  wait, _ = mcp_fakes.SlowSource().tools()
  src._set_schemas([mcp_server.mcp_tool(s) for s in mcp_fakes.SlowSource().tools()])
  # The server's "wait" is offered as "stats"; its own "stats" is unreachable, so it is hidden.
  assert src.tools() == [{**wait, "name": "stats"}]
