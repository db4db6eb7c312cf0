"""Reference-format messages <-> ``Trajectory.steps`` (ARCHITECTURE.md, "Messages").

The reference format is a list of plain dicts::

  {"role": "system" | "user" | "assistant" | "tool", "content": str,
   "reasoning_content": str,                      # assistant, optional
   "tool_calls": [{"id": str, "type": "function",
                   "function": {"name": str, "arguments": <JSON string>}}],  # assistant, optional
   "tool_call_id": str}                           # tool

A :class:`~arenarl_jax.types.Step` is one assistant message plus the tool messages that answer it,
in call order. The conversion is lossless for what both hold: reasoning, content, tool names and
arguments (as parsed JSON objects), and tool results. Tool-call ids are not kept in steps;
:func:`messages_from_steps` writes deterministic ones (``call_<turn>_<k>``).

Every other module converts through this one; nothing else keeps its own converter. The last part
renders a conversation to ids and a loss mask (SFT), with the segment rules the rollout shares.
"""
from __future__ import annotations

import json
from typing import Any, Callable, Mapping, Sequence

from arenarl_jax import types
from arenarl_jax.text import chat_format
from arenarl_jax.text import tool_calls as tc

ROLES = ("system", "user", "assistant", "tool")
# What the SFT pipeline calls to render a conversation: (messages, tokenizer, tools) -> (ids, mask).
RenderFn = Callable[[Sequence[Mapping[str, Any]], Any, Sequence[Mapping[str, Any]] | None],
                    tuple[list[int], list[int]]]


class MessageError(ValueError):
  """A malformed message; the text names the message index and the field."""


def _fail(k: int, field: str, why: str) -> MessageError:
  return MessageError(f"messages[{k}].{field}: {why}")


def parse_tool_call(k: int, j: int, call: Any) -> types.ToolCall:
  """A ``ToolCall`` from one reference-format ``tool_calls`` entry of message ``k``."""
  where = f"tool_calls[{j}]"
  if not isinstance(call, Mapping):
    raise _fail(k, where, f"must be an object, got {type(call).__name__}")
  fn = call.get("function", call)
  if not isinstance(fn, Mapping):
    raise _fail(k, f"{where}.function", "must be an object")
  name = fn.get("name")
  if not isinstance(name, str) or not name.strip():
    raise _fail(k, f"{where}.function.name", "missing or empty")
  args, problem = tc.parse_arguments(fn.get("arguments", {}))
  if args is None:
    raise _fail(k, f"{where}.function.arguments", problem)
  return types.ToolCall(name=name.strip(), arguments=args)


def check_message(k: int, message: Any) -> Mapping[str, Any]:
  """Validates one reference-format message, naming its index and field on error."""
  if not isinstance(message, Mapping):
    raise MessageError(f"messages[{k}]: must be an object, got {type(message).__name__}")
  role = message.get("role")
  if role not in ROLES:
    raise _fail(k, "role", f"{role!r} is not one of {ROLES}")
  for field in ("content", "reasoning_content", "tool_call_id"):
    value = message.get(field)
    if value is not None and not isinstance(value, str):
      raise _fail(k, field, f"must be a string, got {type(value).__name__}")
  if role != "assistant" and (message.get("tool_calls") or message.get("reasoning_content")):
    raise _fail(k, "tool_calls", "only assistant messages carry tool_calls/reasoning_content")
  calls = message.get("tool_calls") or []
  if not isinstance(calls, (list, tuple)):
    raise _fail(k, "tool_calls", "must be a list")
  for j, call in enumerate(calls):
    parse_tool_call(k, j, call)
  return message


def query_of(messages: Sequence[Mapping[str, Any]]) -> str:
  """The task's query: the content of the first user message ("" when there is none)."""
  for m in messages:
    if m.get("role") == "user":
      return m.get("content") or ""
  return ""


def steps_from_messages(messages: Sequence[Mapping[str, Any]]) -> tuple[types.Step, ...]:
  """Steps from a reference-format conversation (system/user messages before the first assistant
  message are the prompt; tool messages attach to the assistant message before them)."""
  steps: list[dict[str, Any]] = []
  for k, m in enumerate(messages):
    check_message(k, m)
    role = m["role"]
    if role == "assistant":
      calls = tuple(parse_tool_call(k, j, c) for j, c in enumerate(m.get("tool_calls") or ()))
      steps.append({"reasoning": m.get("reasoning_content") or "",
                    "content": m.get("content") or "", "tool_calls": calls,
                    "tool_results": []})
    elif role == "tool":
      if not steps:
        raise _fail(k, "role", "a tool message before any assistant message")
      steps[-1]["tool_results"].append(m.get("content") or "")
    elif steps:
      raise _fail(k, "role", f"a {role} message after the conversation started is not supported")
  return tuple(types.Step(reasoning=s["reasoning"], content=s["content"],
                          tool_calls=s["tool_calls"], tool_results=tuple(s["tool_results"]))
               for s in steps)


def messages_from_steps(query: str, steps: Sequence[types.Step], *,
                        system: str | None = None) -> list[dict[str, Any]]:
  """The reference-format conversation for a query and its steps (the inverse of the above)."""
  out: list[dict[str, Any]] = []
  if system is not None:
    out.append({"role": "system", "content": system})
  out.append({"role": "user", "content": query})
  for turn, step in enumerate(steps):
    msg: dict[str, Any] = {"role": "assistant", "content": step.content}
    if step.reasoning:
      msg["reasoning_content"] = step.reasoning
    ids = [f"call_{turn}_{k}" for k in range(len(step.tool_calls))]
    if step.tool_calls:
      msg["tool_calls"] = [
          {"id": i, "type": "function",
           "function": {"name": c.name,
                        "arguments": json.dumps(dict(c.arguments), ensure_ascii=False)}}
          for i, c in zip(ids, step.tool_calls)]
    out.append(msg)
    for k, result in enumerate(step.tool_results):
      # Results beyond the valid calls answer malformed calls: they still get an id of their own.
      call_id = ids[k] if k < len(ids) else f"call_{turn}_{k}"
      out.append({"role": "tool", "tool_call_id": call_id, "content": result})
  return out


def trajectory_from_messages(messages: Sequence[Mapping[str, Any]],
                             **fields: Any) -> types.Trajectory:
  """A ``Trajectory`` (query, steps, messages) from a conversation; ``fields`` set the rest."""
  return types.Trajectory(query=query_of(messages), steps=steps_from_messages(messages),
                          messages=tuple(dict(m) for m in messages), **fields)


# ------------------------------------------------------------------------- messages -> ids + mask
# Segments (text, kind, trained) are chat_format's: one definition of the format.
CONTROL, PLAIN, Segment = chat_format.CONTROL, chat_format.PLAIN, chat_format.Segment


def to_chat(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
  """Reference-format messages as ``chat_format`` dicts (``reasoning_content`` -> ``reasoning``,
  tool calls parsed to ``ToolCall``), validated."""
  out = []
  for k, m in enumerate(messages):
    check_message(k, m)
    msg: dict[str, Any] = {"role": m["role"], "content": m.get("content") or ""}
    if m["role"] == "assistant":
      if m.get("reasoning_content"):
        msg["reasoning"] = m["reasoning_content"]
      calls = [parse_tool_call(k, j, c) for j, c in enumerate(m.get("tool_calls") or ())]
      if calls:
        msg["tool_calls"] = calls
    out.append(msg)
  return out


def observation_segments(results: Sequence[str], *, close_previous: bool,
                         notes: Sequence[str] = (), add_generation_prompt: bool = True
                         ) -> list[Segment]:
  """What the rollout appends after a sampled assistant turn: its ``<|im_end|>`` when it was not
  sampled, the newline, the tool-response turn, optional ``user`` note turns, the next header."""
  segs: list[Segment] = [(chat_format.IM_END, CONTROL, False)] if close_previous else []
  segs.append(("\n", CONTROL, False))
  segs += chat_format.turn_segments(chat_format.TOOL_RESPONSE_ROLE,
                                    chat_format.render_tool_responses(results))
  for note in notes:
    segs += chat_format.turn_segments("user", note)
  return segs + (chat_format.generation_segments() if add_generation_prompt else [])


def render_segments(messages: Sequence[Mapping[str, Any]], *,
                    tools: Sequence[Mapping[str, Any]] | None = None,
                    add_generation_prompt: bool = False,
                    default_system: str | None = chat_format.DEFAULT_SYSTEM) -> list[Segment]:
  """The whole conversation (reference format) as ``chat_format`` segments."""
  return chat_format.message_segments(to_chat(messages), tools=tools,
                                      add_generation_prompt=add_generation_prompt,
                                      default_system=default_system)


def encode_plain(tokenizer, text: str) -> list[int]:
  """Ids of ``text`` with every control-token string in it (``<|im_end|>``) as plain text."""
  return tokenizer.plain_backend.encode(text, add_special_tokens=False).ids if text else []


def encode_segments(tokenizer, segments: Sequence[Segment]) -> tuple[list[int], list[int]]:
  """(ids, loss mask) of segments: control segments with the tokenizer's own encode (each is
  whole turn-frame text, so it splits at its control tokens), plain ones with ``encode_plain``."""
  ids: list[int] = []
  mask: list[int] = []
  for text, kind, trained in segments:
    if not text:
      continue
    seg = tokenizer.encode(text) if kind == CONTROL else encode_plain(tokenizer, text)
    ids += seg
    mask += [int(trained)] * len(seg)
  return ids, mask


def render_ids(tokenizer, messages: Sequence[Mapping[str, Any]], *,
               tools: Sequence[Mapping[str, Any]] | None = None,
               add_generation_prompt: bool = False,
               default_system: str | None = chat_format.DEFAULT_SYSTEM
               ) -> tuple[list[int], list[int]]:
  """SFT ids and loss mask of a whole conversation rendered with its tools: 1 on every assistant
  body and its ``<|im_end|>`` (what the policy writes), 0 on the system prompt, user and tool
  turns and the role headers. Never render a message alone: the tools, the system prompt and
  every turn's reasoning are part of what the model is trained on."""
  return encode_segments(tokenizer, render_segments(
      messages, tools=tools, add_generation_prompt=add_generation_prompt,
      default_system=default_system))


def render_sft(messages: Sequence[Mapping[str, Any]], tokenizer,
               tools: Sequence[Mapping[str, Any]] | None = None) -> tuple[list[int], list[int]]:
  """``render_ids`` in the argument order of ``RenderFn`` (what the SFT data pipeline calls)."""
  return render_ids(tokenizer, messages, tools=tools)
