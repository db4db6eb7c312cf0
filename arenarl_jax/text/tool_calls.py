"""Parse one generated assistant turn into reasoning, content and Hermes-style tool calls.

The turn format (written by ``chat_format``)::

  <think>
  reasoning
  </think>
  content
  <tool_call>
  {"name": "search_poi", "arguments": {"query": "museum"}}
  </tool_call>

Model output is untrusted, so ``parse_turn`` never raises on it. Its rules:
- Every ``<think>…</think>`` block is reasoning (blocks joined by a newline). A ``</think>`` with no
  ``<think>`` before it closes reasoning that began in the prompt. An unclosed ``<think>`` runs to
  the first ``<tool_call>`` after it (so a call still runs) or to the end of the turn.
- Each ``<tool_call>`` body outside reasoning must be one JSON object (whitespace and a Markdown
  code fence around it are allowed) with a non-empty string ``"name"`` and an ``"arguments"``
  object, or a string holding a JSON object, or no ``"arguments"`` at all (= ``{}``); other keys
  are ignored. A ``"name"`` is stripped of surrounding whitespace.
  A call without ``</tool_call>`` ends at the next ``<tool_call>`` or the end of the turn and is
  accepted when its body is valid.
- A call that breaks a rule is dropped and described in ``errors`` ("tool call K: ...", K counting
  the turn's ``<tool_call>`` tags from 1), so the environment can answer it with an error
  observation.
- Content is the text outside reasoning and calls: its pieces, stripped, joined by a newline.
- A trailing ``<|im_end|>`` / ``<|endoftext|>`` (the stop token, if decoded) is dropped first.
"""
from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Mapping, Sequence

from arenarl_jax import types

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
RESPONSE_OPEN, RESPONSE_CLOSE = "<tool_response>", "</tool_response>"
END_TOKENS = ("<|im_end|>", "<|endoftext|>")

_FENCE = re.compile(r"\A```[\w+.-]*[ \t]*\n?(.*?)\n?[ \t]*```\Z", re.DOTALL)
_JSON_TYPES = {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
               int: "a number", float: "a number", type(None): "null"}


@dataclasses.dataclass(frozen=True)
class ParsedTurn:
  """One assistant turn, split. ``errors`` describes calls that were dropped as malformed."""

  reasoning: str = ""
  content: str = ""
  tool_calls: tuple[types.ToolCall, ...] = ()
  errors: tuple[str, ...] = ()

  @property
  def is_final(self) -> bool:
    """True when the turn asks for nothing: no valid and no malformed tool call (the answer)."""
    return not self.tool_calls and not self.errors


def parse_turn(text: str, *, end_tokens: Sequence[str] = END_TOKENS) -> ParsedTurn:
  """Splits a generated assistant turn (decoded text, without its role header); never raises."""
  text = _strip_end_tokens(text, end_tokens)
  reasoning, outside = _split_reasoning(text)
  content, calls, errors = [], [], []
  tag_count = 0
  for segment in outside:
    tag_count = _split_calls(segment, tag_count, content, calls, errors)
  return ParsedTurn(reasoning=_join(reasoning), content=_join(content), tool_calls=tuple(calls),
                    errors=tuple(errors))


def to_step(parsed: ParsedTurn, tool_results: Sequence[str] = ()) -> types.Step:
  """The ``Step`` for a parsed turn and the observations its calls (and errors) produced."""
  for k, r in enumerate(tool_results):
    if not isinstance(r, str):
      raise TypeError(f"tool_results[{k}] is a {type(r).__name__}, not a str")
  return types.Step(reasoning=parsed.reasoning, content=parsed.content,
                    tool_calls=parsed.tool_calls, tool_results=tuple(tool_results))


def _strip_end_tokens(text: str, end_tokens: Sequence[str]) -> str:
  """Drops trailing stop tokens (and the whitespace around them)."""
  text = text.rstrip()
  stripped = True
  while stripped:
    stripped = False
    for tok in end_tokens:
      if tok and text.endswith(tok):
        text = text[:-len(tok)].rstrip()
        stripped = True
  return text


def _split_reasoning(text: str) -> tuple[list[str], list[str]]:
  """Reasoning blocks and the segments of text outside them."""
  reasoning, outside = [], []
  pos = 0
  first_close, first_open = text.find(THINK_CLOSE), text.find(THINK_OPEN)
  if first_close != -1 and (first_open == -1 or first_close < first_open):
    reasoning.append(text[:first_close])  # the <think> was in the prompt.
    pos = first_close + len(THINK_CLOSE)
  while True:
    start = text.find(THINK_OPEN, pos)
    if start == -1:
      outside.append(text[pos:])
      return reasoning, outside
    outside.append(text[pos:start])
    body = start + len(THINK_OPEN)
    end = text.find(THINK_CLOSE, body)
    if end == -1:
      call = text.find(CALL_OPEN, body)
      end = len(text) if call == -1 else call
      reasoning.append(text[body:end])
      outside.append(text[end:])
      return reasoning, outside
    reasoning.append(text[body:end])
    pos = end + len(THINK_CLOSE)


def _split_calls(segment: str, tag_count: int, content: list[str], calls: list[types.ToolCall],
                 errors: list[str]) -> int:
  """Appends the segment's content pieces, calls and errors; returns the updated tag count."""
  pos = 0
  while True:
    start = segment.find(CALL_OPEN, pos)
    if start == -1:
      content.append(segment[pos:])
      return tag_count
    content.append(segment[pos:start])
    tag_count += 1
    body = start + len(CALL_OPEN)
    close, reopen = segment.find(CALL_CLOSE, body), segment.find(CALL_OPEN, body)
    if close != -1 and (reopen == -1 or close < reopen):
      end, pos, closed = close, close + len(CALL_CLOSE), True
    else:
      end = len(segment) if reopen == -1 else reopen
      pos, closed = end, False
    call, problem = parse_call(segment[body:end])
    if call is not None:
      calls.append(call)
    else:
      suffix = "" if closed else f" (and no {CALL_CLOSE})"
      errors.append(f"tool call {tag_count}: {problem}{suffix}")


def parse_call(body: str) -> tuple[types.ToolCall | None, str]:
  """One ``<tool_call>`` body -> (call, "") or (None, what is wrong with it)."""
  s = body.strip()
  fenced = _FENCE.match(s)
  if fenced:
    s = fenced.group(1).strip()
  if not s:
    return None, "empty call"
  try:
    obj = json.loads(s)
  except json.JSONDecodeError as e:
    return None, f"invalid JSON: {e.msg} (line {e.lineno}, column {e.colno}) in {_snippet(s)}"
  except RecursionError:
    return None, "invalid JSON: nested too deeply"
  if not isinstance(obj, dict):
    return None, f"expected a JSON object, got {_json_type(obj)}"
  if "name" not in obj:
    return None, f"missing \"name\" in {_snippet(s)}"
  name = obj["name"]
  if not isinstance(name, str) or not name.strip():
    return None, f"\"name\" must be a non-empty string, got {_json_type(name)} in {_snippet(s)}"
  name = name.strip()
  args, problem = parse_arguments(obj.get("arguments", {}))
  if args is None:
    return None, f"\"arguments\" of {name!r} {problem}"
  return types.ToolCall(name=name, arguments=args), ""


def parse_arguments(arguments: Any) -> tuple[dict[str, Any] | None, str]:
  """A tool call's arguments -> (dict, "") or (None, what is wrong, worded to follow a subject).

  Arguments are a JSON object, given as a mapping or as a string holding one ("" or whitespace
  = ``{}``). Every reader of tool calls (model output, reference data, tool sources) parses them
  here, so they all accept the same things. None (JSON ``null``) is not an object: a caller whose
  API uses None for "no arguments" maps it to ``{}`` itself.
  """
  if isinstance(arguments, str):
    try:
      arguments = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError as e:
      return None, f"is a string that is not valid JSON: {e.msg}"
    except RecursionError:
      return None, "is a string that is not valid JSON: nested too deeply"
  if not isinstance(arguments, Mapping):
    return None, f"must be a JSON object, got {_json_type(arguments)}"
  return dict(arguments), ""


def _json_type(value: Any) -> str:
  return _JSON_TYPES.get(type(value), type(value).__name__)


def _snippet(s: str, limit: int = 60) -> str:
  return repr(s if len(s) <= limit else s[:limit] + "...")


def _join(pieces: Sequence[str]) -> str:
  return "\n".join(p.strip() for p in pieces if p.strip())
