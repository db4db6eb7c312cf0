"""InProcessToolSource: argument parsing and schema checks, error observations, truncation."""
from __future__ import annotations

import asyncio

import pytest

from arenarl_jax.envs import base
from arenarl_jax.envs import inprocess

SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["city", "n"],
    "properties": {
        "city": {"type": "string", "minLength": 1, "maxLength": 10},
        "n": {"type": "integer", "minimum": 1, "maximum": 5},
        "x": {"type": "number"},
        "flag": {"type": "boolean"},
        "mode": {"type": "string", "enum": ["a", "b"]},
        "stops": {"type": "array", "minItems": 2, "maxItems": 3, "items": {"type": "string"}},
        "opts": {"type": "object", "required": ["k"], "properties": {"k": {"type": "integer"}}},
    },
}


def _echo(city, n, **rest):
  if city == "nowhere":
    raise inprocess.ToolError(base.NOT_FOUND, "no such city")
  if city == "boom":
    raise KeyError("internal")
  return f"{city}:{n}:" + "x" * (n * 10)


@pytest.fixture
def source():
  return inprocess.InProcessToolSource([inprocess.Tool("echo", "Echo.", SCHEMA, _echo)],
                                       max_chars=40)


@pytest.mark.parametrize("args, needle", [
    ({"n": 1}, "missing required argument(s): 'city'"),
    ({"city": "a", "n": 1, "zzz": 2}, "'zzz' not accepted"),
    ({"city": 3, "n": 1}, "'city' must be string"),
    ({"city": "a", "n": True}, "'n' must be integer"),
    ({"city": "a", "n": 1.5}, "'n' must be integer"),
    ({"city": "a", "n": 0}, "'n' must be >= 1"),
    ({"city": "a", "n": 6}, "'n' must be <= 5"),
    ({"city": "", "n": 1}, "'city' must not be empty"),
    ({"city": "a" * 11, "n": 1}, "'city' is longer than 10"),
    ({"city": "a", "n": 1, "x": "1"}, "'x' must be number"),
    ({"city": "a", "n": 1, "flag": 1}, "'flag' must be boolean"),
    ({"city": "a", "n": 1, "mode": "c"}, "'mode' must be one of ['a', 'b']"),
    ({"city": "a", "n": 1, "stops": ["p"]}, "'stops' needs at least 2 items"),
    ({"city": "a", "n": 1, "stops": ["p", "q", "r", "s"]}, "'stops' allows at most 3 items"),
    ({"city": "a", "n": 1, "stops": ["p", 2]}, "'stops[1]' must be string"),
    ({"city": "a", "n": 1, "opts": {}}, "missing required argument(s): 'opts.k'"),
    ({"city": "a", "n": 1, "opts": {"k": "v"}}, "'opts.k' must be integer"),
])
def test_bad_arguments_are_named(source, args, needle):
  r = source.call_sync("echo", args)
  assert not r.ok and r.error_kind == base.BAD_ARGUMENTS
  assert r.text.startswith("Error: echo: ") and needle in r.text, r.text


def test_json_strings_and_bad_json(source):
  ok = source.call_sync("echo", '{"city": "a", "n": 1, "x": 2}')
  assert ok.ok and ok.text == "a:1:" + "x" * 10 and ok.error_kind is None
  for raw, needle in (('{"city": ', "not valid JSON"), ("[1, 2]", "must be a JSON object")):
    r = source.call_sync("echo", raw)
    assert not r.ok and r.error_kind == base.BAD_ARGUMENTS and needle in r.text
  empty = source.call_sync("echo", "")  # no arguments at all: the required ones are missing
  assert empty.error_kind == base.BAD_ARGUMENTS and "'city', 'n'" in empty.text


def test_unknown_tool_tool_errors_and_exceptions(source):
  r = source.call_sync("nope", {})
  assert r.error_kind == base.UNKNOWN_TOOL and "available tools: echo" in r.text
  r = source.call_sync("echo", {"city": "nowhere", "n": 1})
  assert r.error_kind == base.NOT_FOUND and r.text == "Error: echo: no such city"
  r = source.call_sync("echo", {"city": "boom", "n": 1})
  assert r.error_kind == base.TOOL_ERROR and "KeyError" in r.text and "internal" not in r.text


def test_truncation_and_async_call(source):
  r = asyncio.run(source.call("echo", {"city": "abc", "n": 5}, timeout=1.0))
  full = "abc:5:" + "x" * 50
  assert r.ok and r.text == full[:40] + "\n...[truncated: 16 more characters]"
  assert inprocess.truncate("short", 40) == "short" and inprocess.truncate("abc", 0) == "abc"


def test_schemas_and_unique_names():
  tool = inprocess.Tool("echo", "Echo.", SCHEMA, _echo)
  src = inprocess.InProcessToolSource([tool])
  (schema,) = src.tools()
  assert schema == {"name": "echo", "description": "Echo.", "parameters": SCHEMA}
  schema["parameters"]["required"].append("zzz")  # a copy: the tool's schema is unchanged
  assert SCHEMA["required"] == ["city", "n"]
  assert isinstance(src, base.ToolSource)
  with pytest.raises(ValueError, match="unique"):
    inprocess.InProcessToolSource([tool, tool])
