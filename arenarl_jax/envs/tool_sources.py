"""The tool source a run uses, chosen by ``env.tools``: the world in this process, or over MCP.

- ``env.tools=inprocess``: ``make_environment_from_config(env).tool_source()``.
- ``env.tools=mcp``: an :class:`~arenarl_jax.envs.mcp_client.McpToolSource` configured by
  ``env.mcp``. With ``env.mcp.command=""`` it starts this package's own server for the same world
  (``python -m arenarl_jax.envs.mcp_server --env <env.name> --seed <env.seed>``); any other command
  is a foreign server, with ``env.mcp.name_map`` mapping the paper's tool names onto its names.
"""
from __future__ import annotations

import sys
from typing import Any, Mapping

from arenarl_jax.envs import base, mcp_client
from arenarl_jax.settings import settings_from_config

TOOL_SOURCES = ("inprocess", "mcp")


def server_command(env_name: str, seed: int) -> list[str]:
  """The command that serves ``env_name``'s tools over MCP with this interpreter."""
  return [sys.executable, "-m", "arenarl_jax.envs.mcp_server", "--env", env_name,
          "--seed", str(int(seed))]


def make_tool_source(env: Mapping[str, Any]) -> base.ToolSource:
  """The tool source the ``env`` config section (a ConfigDict or a mapping) names."""
  kind = env["tools"]
  if kind == "inprocess":
    return base.make_environment_from_config(env).tool_source()
  if kind == "mcp":
    mcp_config = settings_from_config(mcp_client.McpClientSettings, env["mcp"], "env.mcp")
    command = mcp_config.command or server_command(env["name"], env["seed"])
    return mcp_client.McpToolSource(command, mcp_config)
  raise ValueError(f"env.tools: unknown tool source {kind!r}; known: {list(TOOL_SOURCES)}")
