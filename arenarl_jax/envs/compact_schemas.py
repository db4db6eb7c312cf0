"""A tool source whose schemas are cut to names, argument names, types, enums and required lists.

The travel tools' full JSON schemas (descriptions, length limits) render to ~1,100 tokens in every
system prompt, more than a whole expert conversation's assistant turns. A model trained from
scratch learns the tools from the expert's calls, not from the prose, so the quickstart shows it
the compact form (``env.schemas="compact"``) in SFT and in rollouts alike; calls still run on the
wrapped source unchanged (it checks arguments against its full schemas).
"""
from __future__ import annotations

from typing import Any, Mapping

from arenarl_jax.envs import base

SCHEMAS = ("full", "compact", "none")
_KEEP = ("type", "enum", "items", "properties", "required")


def compact_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
  """A JSON schema (or sub-schema) with only the keys in ``_KEEP``, recursively."""
  out: dict[str, Any] = {}
  for key in _KEEP:
    if key not in schema:
      continue
    value = schema[key]
    if key == "properties":
      value = {name: compact_schema(sub) for name, sub in value.items()}
    elif key == "items" and isinstance(value, Mapping):
      value = compact_schema(value)
    out[key] = value
  return out


def compact_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
  """An OpenAI function schema (wrapped or bare) as ``{"name", "parameters"}`` (compact)."""
  fn = tool.get("function", tool)
  return {"name": fn["name"], "parameters": compact_schema(fn.get("parameters") or {})}


class CompactSchemas:
  """``source`` with ``tools()`` compacted (or none listed); ``call`` passes straight through."""

  def __init__(self, source: base.ToolSource, listed: bool = True):
    self.source = source
    self._tools = [compact_tool(t) for t in source.tools()] if listed else []

  def tools(self) -> list[dict[str, Any]]:
    return [dict(t) for t in self._tools]

  async def call(self, name: str, arguments: Mapping[str, Any] | str, *,
                 timeout: float) -> base.ToolResult:
    return await self.source.call(name, arguments, timeout=timeout)


def tool_source(env: Any, schemas: str = "full") -> base.ToolSource:
  """``env.tool_source()``, compacted when ``schemas == "compact"``, listing no tools when
  ``"none"`` (``env.schemas``)."""
  if schemas not in SCHEMAS:
    raise ValueError(f"env.schemas: {schemas!r} is not one of {SCHEMAS}")
  source = env.tool_source()
  return source if schemas == "full" else CompactSchemas(source, listed=schemas == "compact")
