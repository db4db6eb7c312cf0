"""Serves any environment's tool source over MCP (stdio), with the official ``mcp`` SDK.

  python -m arenarl_jax.envs.mcp_server --env travel --seed 0
  python -m arenarl_jax.envs.mcp_server --import my_pkg.my_env --env my_env   # registers itself
  python -m arenarl_jax.envs.mcp_server --source my_module:make_source        # any ToolSource

The tool list is the source's schemas exactly (``parameters`` becomes ``inputSchema``) and every
call answers with the source's own text: the SDK's input validation is off, so a bad argument gets
the in-process error text, flagged ``isError`` with the error kind in the result's
``_meta["arenarl-jax/error_kind"]`` (which :mod:`arenarl_jax.envs.mcp_client` reads back).

Tool code never writes into the protocol stream: ``sys.stdout`` is pointed at stderr before the
source is built, and the server writes to the original stdout. The server exits when its stdin
closes (the client went away).
"""
from __future__ import annotations

import argparse
import importlib
import io
import logging
import sys
from typing import Any, Sequence

import anyio
import mcp.types as mcp_types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from arenarl_jax.envs import base

# The CallToolResult._meta key that carries ToolResult.error_kind.
ERROR_KIND_META = "arenarl-jax/error_kind"
SERVER_NAME = "arenarl_jax"


def mcp_tool(schema: dict[str, Any]) -> mcp_types.Tool:
  """An MCP tool from an OpenAI function schema (``name``, ``description``, ``parameters``)."""
  return mcp_types.Tool(name=schema["name"], description=schema.get("description", ""),
                        inputSchema=schema.get("parameters") or {"type": "object"})


def call_result(result: base.ToolResult) -> mcp_types.CallToolResult:
  """The MCP result of one tool call: its text, ``isError`` and the error kind in ``_meta``."""
  meta = {ERROR_KIND_META: result.error_kind} if not result.ok and result.error_kind else None
  return mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text=result.text)],
                                  isError=not result.ok, _meta=meta)


def build_server(source: base.ToolSource, name: str = SERVER_NAME) -> Server:
  """A low-level MCP server whose ``tools/list`` and ``tools/call`` are ``source``'s."""
  server: Server = Server(name)
  tools = [mcp_tool(s) for s in source.tools()]

  @server.list_tools()
  async def list_tools() -> list[mcp_types.Tool]:
    return tools

  # The source validates arguments itself; the SDK's check would answer with other words.
  @server.call_tool(validate_input=False)
  async def call_tool(tool_name: str, arguments: dict[str, Any]) -> mcp_types.CallToolResult:
    try:
      result = await source.call(tool_name, arguments)
    except Exception as e:  # a source must not raise; if one does, the client still gets text
      result = base.ToolResult(text=f"Error: {tool_name} failed ({type(e).__name__})", ok=False,
                               error_kind=base.TOOL_ERROR)
    return call_result(result)

  return server


async def serve_stdio(source: base.ToolSource, stdout: io.TextIOBase | None = None) -> None:
  """Runs the server for ``source`` on this process's stdin/stdout until stdin closes."""
  server = build_server(source)
  out = anyio.wrap_file(stdout) if stdout is not None else None
  async with stdio_server(stdout=out) as (read_stream, write_stream):
    await server.run(read_stream, write_stream, server.create_initialization_options())


def load_source(spec: str) -> base.ToolSource:
  """``module:attr`` -> the tool source it names (an object, or a callable that returns one)."""
  module_name, colon, attr = spec.partition(":")
  if not colon or not module_name or not attr:
    raise ValueError(f"--source: expected module:attr, got {spec!r}")
  obj = getattr(importlib.import_module(module_name), attr, None)
  if obj is None:
    raise ValueError(f"--source: module {module_name!r} has no attribute {attr!r}")
  source = obj if isinstance(obj, base.ToolSource) else obj()
  if not isinstance(source, base.ToolSource):
    raise ValueError(f"--source: {spec!r} is not a tool source (needs tools() and call())")
  return source


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(prog="python -m arenarl_jax.envs.mcp_server",
                                   description="Serve an environment's tools over MCP (stdio).")
  parser.add_argument("--env", help="environment name (env.name), e.g. travel or research")
  parser.add_argument("--seed", type=int, default=0, help="environment seed (env.seed)")
  parser.add_argument("--source", help="module:attr naming a ToolSource (or a factory of one)")
  parser.add_argument("--import", dest="imports", action="append", default=[],
                      help="module to import first (environments register themselves)")
  args = parser.parse_args(argv)
  if (args.env is None) == (args.source is None):
    parser.error("give exactly one of --env and --source")

  # Anything tools print goes to stderr; the protocol keeps the real stdout to itself.
  protocol_out = io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8")
  sys.stdout = sys.stderr
  logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
  logging.getLogger("mcp").setLevel(logging.ERROR)  # e.g. one warning per unknown tool name
  for module in args.imports:
    importlib.import_module(module)
  if args.source is not None:
    source = load_source(args.source)
  else:
    source = base.make_environment(args.env, args.seed).tool_source()
  anyio.run(serve_stdio, source, protocol_out)


if __name__ == "__main__":
  main()
