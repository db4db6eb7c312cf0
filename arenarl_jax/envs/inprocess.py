"""Tools that run in this process: schema-checked arguments, error observations, truncation.

An environment defines each tool as a :class:`Tool` (an OpenAI function schema plus a plain Python
function of the validated arguments that returns text). :class:`InProcessToolSource` turns them into
a tool source: it parses JSON-string arguments, checks them against the schema (missing, extra,
wrongly typed, out of range or not in an enum: each named in the error text), runs the function,
truncates the text, and converts every failure into an ``ok=False`` :class:`ToolResult`.

A tool function signals "valid arguments, but nothing by that name" by raising :class:`ToolError`
with ``base.NOT_FOUND`` (or ``base.BAD_ARGUMENTS`` for checks a schema cannot express, such as a
date outside the timetable), so the model sees why, and never a silent empty result.
"""
from __future__ import annotations

import dataclasses
import json
import time
from typing import Any, Callable, Mapping, Sequence

from arenarl_jax.envs import base
from arenarl_jax.envs.settings import DEFAULT_MAX_CHARS  # noqa: F401 (re-exported)
from arenarl_jax.text import tool_calls as tc

TRUNCATION_NOTE = "\n...[truncated: {n} more characters]"


class ToolError(Exception):
  """Raised by a tool function for a failure the model should read; ``kind`` is an error kind."""

  def __init__(self, kind: str, message: str):
    super().__init__(message)
    self.kind = kind


@dataclasses.dataclass(frozen=True)
class Tool:
  """One tool: its schema fields and the function that answers it (``fn(**arguments) -> str``)."""

  name: str
  description: str
  parameters: Mapping[str, Any]  # a JSON schema of type "object"
  fn: Callable[..., str]

  def schema(self) -> dict[str, Any]:
    return {"name": self.name, "description": self.description,
            "parameters": json.loads(json.dumps(self.parameters))}


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
    "array": (list, tuple), "object": (dict,),
}


def _check_value(path: str, value: Any, schema: Mapping[str, Any]) -> str | None:
  """The first problem with ``value`` against a schema subset, or None."""
  kind = schema.get("type")
  if kind is not None:
    allowed = _JSON_TYPES[kind]
    # bool is an int subclass in Python; JSON keeps them apart.
    if not isinstance(value, allowed) or (kind in ("integer", "number")
                                          and isinstance(value, bool)):
      return f"argument {path!r} must be {kind}, got {type(value).__name__} {value!r}"[:300]
  if "enum" in schema and value not in schema["enum"]:
    return f"argument {path!r} must be one of {list(schema['enum'])}, got {value!r}"
  if isinstance(value, (int, float)) and not isinstance(value, bool):
    if "minimum" in schema and value < schema["minimum"]:
      return f"argument {path!r} must be >= {schema['minimum']}, got {value!r}"
    if "maximum" in schema and value > schema["maximum"]:
      return f"argument {path!r} must be <= {schema['maximum']}, got {value!r}"
  if isinstance(value, str):
    if len(value) < schema.get("minLength", 0):
      return f"argument {path!r} must not be empty" if not value else (
          f"argument {path!r} is shorter than {schema['minLength']} characters")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
      return f"argument {path!r} is longer than {schema['maxLength']} characters"
  if isinstance(value, (list, tuple)):
    if len(value) < schema.get("minItems", 0):
      return f"argument {path!r} needs at least {schema['minItems']} items, got {len(value)}"
    if "maxItems" in schema and len(value) > schema["maxItems"]:
      return f"argument {path!r} allows at most {schema['maxItems']} items, got {len(value)}"
    for k, item in enumerate(value):
      if (problem := _check_value(f"{path}[{k}]", item, schema.get("items", {}))):
        return problem
  if isinstance(value, dict) and kind == "object":
    return check_arguments(value, schema, prefix=f"{path}.")
  return None


def check_arguments(arguments: Mapping[str, Any], schema: Mapping[str, Any],
                    prefix: str = "") -> str | None:
  """Checks an arguments object against an object schema; returns the first problem or None.

  Supports the subset tool schemas use: type, properties, required, additionalProperties (extra
  arguments are rejected unless it is true), enum, minimum/maximum, minLength/maxLength,
  items/minItems/maxItems.
  """
  properties = schema.get("properties", {})
  missing = [k for k in schema.get("required", ()) if k not in arguments]
  if missing:
    return "missing required argument(s): " + ", ".join(repr(prefix + k) for k in missing)
  if schema.get("additionalProperties", False) is not True:
    extra = sorted(k for k in arguments if k not in properties)
    if extra:
      return (", ".join(repr(prefix + k) for k in extra) + " not accepted; arguments are: "
              + ", ".join(sorted(properties)))
  for key, value in arguments.items():
    if key in properties and (problem := _check_value(prefix + key, value, properties[key])):
      return problem
  return None


def call_arguments(arguments: Mapping[str, Any] | str | None) -> tuple[dict[str, Any] | None, str]:
  """A tool source's arguments as a dict, or (None, why) worded for the tool's error result: the
  one parser (``tool_calls.parse_arguments``), with None meaning no arguments in this API."""
  args, problem = tc.parse_arguments({} if arguments is None else arguments)
  return (args, "") if args is not None else (None, f"arguments {problem}")


def truncate(text: str, max_chars: int) -> str:
  """``text`` cut to ``max_chars`` characters, with a note saying how much was left out."""
  if max_chars <= 0 or len(text) <= max_chars:
    return text
  return text[:max_chars] + TRUNCATION_NOTE.format(n=len(text) - max_chars)


def error_result(kind: str, message: str, start: float) -> base.ToolResult:
  return base.ToolResult(text=f"Error: {message}", ok=False, error_kind=kind,
                         latency_s=time.perf_counter() - start)


class InProcessToolSource:
  """A tool source over :class:`Tool` definitions, run in this process (pure, read-only worlds)."""

  def __init__(self, tools: Sequence[Tool], max_chars: int = DEFAULT_MAX_CHARS):
    self._tools = {t.name: t for t in tools}
    if len(self._tools) != len(tools):
      raise ValueError("tool names must be unique")
    self.max_chars = max_chars

  def tools(self) -> list[dict[str, Any]]:
    return [t.schema() for t in self._tools.values()]

  def call_sync(self, name: str, arguments: Mapping[str, Any] | str | None) -> base.ToolResult:
    """The call itself; synchronous because in-process tools are pure and fast."""
    start = time.perf_counter()
    tool = self._tools.get(name)
    if tool is None:
      return error_result(base.UNKNOWN_TOOL, f"unknown tool {name!r}; available tools: "
                          + ", ".join(sorted(self._tools)), start)
    args, why = call_arguments(arguments)
    if args is None:
      return error_result(base.BAD_ARGUMENTS, f"{name}: {why}", start)
    if (problem := check_arguments(args, tool.parameters)):
      return error_result(base.BAD_ARGUMENTS, f"{name}: {problem}", start)
    try:
      text = tool.fn(**args)
    except ToolError as e:
      return error_result(e.kind, f"{name}: {e}", start)
    except Exception as e:  # a bug in a tool must not crash a rollout: report it to the model
      return error_result(base.TOOL_ERROR, f"{name} failed ({type(e).__name__})", start)
    return base.ToolResult(text=truncate(text, self.max_chars), ok=True,
                           latency_s=time.perf_counter() - start)

  async def call(self, name: str, arguments: Mapping[str, Any] | str | None = None, *,
                 timeout: float | None = None) -> base.ToolResult:
    del timeout  # in-process calls are pure and bounded; nothing to interrupt
    return self.call_sync(name, arguments)
