"""ChatML rendering with tools, for models whose own chat template ignores them (SmolLM2).

Each turn is ``<|im_start|>{role}\\n{body}<|im_end|>\\n``. Messages are dicts:

  {"role": "system" | "user" | "assistant" | "tool",
   "content": str,                       # may be "" / None / absent for an assistant turn
   "reasoning": str,                     # optional, assistant only: rendered in <think>…</think>
   "tool_calls": [ToolCall | {"name": str, "arguments": dict | JSON str}
                  | {"function": {"name": ..., "arguments": ...}}, ...]}  # optional, assistant

- Tools (JSON schemas, ``{"type": "function", "function": {...}}`` or the bare function dict) are
  listed in the system turn inside ``<tools></tools>``, one per line, with instructions to answer
  with ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (Hermes style). The system text
  is the first message's when it is a system message, else ``default_system``.
- An assistant body is ``<think>\\n{reasoning}\\n</think>``, the content and one
  ``<tool_call>\\n{json}\\n</tool_call>`` per call, joined by newlines (empty parts left out).
  Reasoning is kept in every past turn: a trajectory is trained as the one sequence it was
  sampled as.
- Tool observations are ``tool`` messages. A run of consecutive ones becomes ONE ``user`` turn (the
  roles SmolLM2 knows are system/user/assistant) holding ``<tool_response>\\n{result}\\n
  </tool_response>`` blocks joined by newlines, in call order.

``render_tool_turn`` is the text the multi-turn sampler appends after a generated turn, so that
``render_messages(history + [assistant, *tools], add_generation_prompt=True)`` equals
``render_messages(history, add_generation_prompt=True) + render_assistant(...)
+ render_tool_turn(...)``.
"""
from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from arenarl_jax.text import tool_calls as tc
from arenarl_jax import types

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
TOOL_RESPONSE_ROLE = "user"
ROLES = ("system", "user", "assistant", "tool")
# SmolLM2's template inserts this system turn when the conversation has none.
DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

TOOLS_INSTRUCTIONS = (
    "# Tools\n\n"
    "You can call the functions whose JSON schemas are listed, one per line, inside "
    "<tools></tools>:\n<tools>\n{tools}\n</tools>\n\n"
    "To call a function, write a JSON object with its name and arguments inside "
    "<tool_call></tool_call> tags:\n"
    "<tool_call>\n"
    "{{\"name\": \"<function-name>\", \"arguments\": {{\"<argument-name>\": <value>}}}}\n"
    "</tool_call>\n"
    "You may call several functions in one reply, and think first inside <think></think>. "
    "Results come back inside <tool_response></tool_response>. When you need no more calls, "
    "answer without any <tool_call>.")


def render_turn(role: str, body: str) -> str:
  """One whole ChatML turn."""
  return f"{IM_START}{role}\n{body}{IM_END}\n"


def generation_prompt() -> str:
  """The header that opens the assistant turn the model writes next."""
  return f"{IM_START}assistant\n"


def as_tool_call(call: types.ToolCall | Mapping[str, Any]) -> types.ToolCall:
  """A ToolCall from a ToolCall, ``{"name", "arguments"}`` or OpenAI's ``{"function": {...}}``."""
  if isinstance(call, types.ToolCall):
    return call
  if not isinstance(call, Mapping):
    raise TypeError(f"a tool call must be a ToolCall or a dict, got {type(call).__name__}")
  fn = call.get("function", call)
  name, args = fn.get("name"), fn.get("arguments", {})
  if not isinstance(name, str) or not name:
    raise ValueError(f"tool call {dict(call)!r} has no \"name\" string")
  args, problem = tc.parse_arguments(args)
  if args is None:
    raise ValueError(f"tool call {name!r}: \"arguments\" {problem}")
  return types.ToolCall(name=name, arguments=args)


def format_tool_call(call: types.ToolCall | Mapping[str, Any]) -> str:
  """``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``."""
  call = as_tool_call(call)
  payload = json.dumps({"name": call.name, "arguments": dict(call.arguments)},
                       ensure_ascii=False)
  return f"{tc.CALL_OPEN}\n{payload}\n{tc.CALL_CLOSE}"


def render_assistant(reasoning: str = "", content: str = "",
                     tool_calls: Sequence[types.ToolCall | Mapping[str, Any]] = ()) -> str:
  """An assistant body (no header, no ``<|im_end|>``): think block, content, calls."""
  parts = []
  if reasoning:
    parts.append(f"{tc.THINK_OPEN}\n{reasoning}\n{tc.THINK_CLOSE}")
  if content:
    parts.append(content)
  parts.extend(format_tool_call(c) for c in tool_calls)
  return "\n".join(parts)


def render_tool_responses(results: Sequence[str]) -> str:
  """The body of the turn that returns tool observations (one block per result, in order)."""
  if not results:
    raise ValueError("render_tool_responses needs at least one tool result")
  for k, r in enumerate(results):
    if not isinstance(r, str):
      raise TypeError(f"tool result {k} is a {type(r).__name__}, not a str")
  return "\n".join(f"{tc.RESPONSE_OPEN}\n{r}\n{tc.RESPONSE_CLOSE}" for r in results)


def render_tool_turn(results: Sequence[str], *, close_previous: bool = True,
                     add_generation_prompt: bool = True) -> str:
  """Text to append after a generated assistant body: its close, the observations, a new header.

  ``close_previous=False`` when the generated tokens already end with ``<|im_end|>``.
  """
  close = IM_END if close_previous else ""
  text = f"{close}\n" + render_turn(TOOL_RESPONSE_ROLE, render_tool_responses(results))
  return text + (generation_prompt() if add_generation_prompt else "")


def render_tools_prompt(tools: Sequence[Mapping[str, Any]]) -> str:
  """The system-prompt block that lists the tools and explains the call format."""
  lines = []
  for k, tool in enumerate(tools):
    if not isinstance(tool, Mapping):
      raise TypeError(f"tools[{k}] must be a dict (a JSON schema), got {type(tool).__name__}")
    fn = tool.get("function", tool)
    if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
      raise ValueError(f"tools[{k}] has no function \"name\": {dict(tool)!r}")
    if "function" not in tool:
      tool = {"type": "function", "function": dict(tool)}
    lines.append(json.dumps(tool, ensure_ascii=False))
  return TOOLS_INSTRUCTIONS.format(tools="\n".join(lines))


# A rendered conversation is a list of segments (text, kind, trained). ``kind`` is CONTROL for the
# ChatML frame (role headers, ``<|im_end|>``: control tokens map to their ids) or PLAIN for every
# message body (tool results, queries, assistant text: control-token text in them encodes as plain
# text, so no tool or user can close a turn or open one). ``trained`` marks what the policy writes:
# an assistant body and its ``<|im_end|>``. Joined, the texts are ``render_messages``.
CONTROL, PLAIN = "control", "plain"
Segment = tuple[str, str, bool]


def turn_segments(role: str, body: str, *, trained: bool = False) -> list[Segment]:
  """One whole ChatML turn as segments: header, body, ``<|im_end|>``, newline."""
  return [(f"{IM_START}{role}\n", CONTROL, False), (body, PLAIN, trained),
          (IM_END, CONTROL, trained), ("\n", CONTROL, False)]


def generation_segments() -> list[Segment]:
  return [(generation_prompt(), CONTROL, False)]


def message_segments(messages: Sequence[Mapping[str, Any]], *,
                     tools: Sequence[Mapping[str, Any]] | None = None,
                     add_generation_prompt: bool = False,
                     default_system: str | None = DEFAULT_SYSTEM) -> list[Segment]:
  """The whole conversation as segments (see above and the module docstring for the format)."""
  messages = [_checked(k, m) for k, m in enumerate(messages)]
  segs: list[Segment] = []
  first_is_system = bool(messages) and messages[0]["role"] == "system"
  if first_is_system or tools or default_system is not None:
    if first_is_system:
      system = messages[0].get("content") or ""
    else:
      system = default_system or ""
    if tools:
      tools_block = render_tools_prompt(tools)
      system = f"{system}\n\n{tools_block}" if system else tools_block
    segs += turn_segments("system", system)
    messages = messages[1:] if first_is_system else messages
  k = 0
  while k < len(messages):
    m = messages[k]
    if m["role"] == "tool":
      run = []
      while k < len(messages) and messages[k]["role"] == "tool":
        run.append(messages[k].get("content") or "")
        k += 1
      segs += turn_segments(TOOL_RESPONSE_ROLE, render_tool_responses(run))
      continue
    if m["role"] == "assistant":
      body = render_assistant(m.get("reasoning") or "", m.get("content") or "",
                              m.get("tool_calls") or ())
      segs += turn_segments("assistant", body, trained=True)
    else:
      segs += turn_segments(m["role"], m.get("content") or "")
    k += 1
  if add_generation_prompt:
    segs += generation_segments()
  return segs


def render_messages(messages: Sequence[Mapping[str, Any]], *,
                    tools: Sequence[Mapping[str, Any]] | None = None,
                    add_generation_prompt: bool = False,
                    default_system: str | None = DEFAULT_SYSTEM) -> str:
  """The whole conversation as ChatML text (see the module docstring for the format).

  Without tools, reasoning and tool calls this equals SmolLM2's own chat template.
  """
  return "".join(text for text, _, _ in message_segments(
      messages, tools=tools, add_generation_prompt=add_generation_prompt,
      default_system=default_system))


def _checked(k: int, message: Mapping[str, Any]) -> Mapping[str, Any]:
  """Validates one message dict, naming its index on error."""
  if not isinstance(message, Mapping):
    raise TypeError(f"messages[{k}] must be a dict, got {type(message).__name__}")
  role = message.get("role")
  if role not in ROLES:
    raise ValueError(f"messages[{k}]: role {role!r} is not one of {ROLES}")
  content = message.get("content")
  if content is not None and not isinstance(content, str):
    raise TypeError(f"messages[{k}]: content must be a str, got {type(content).__name__}")
  if role != "assistant" and (message.get("tool_calls") or message.get("reasoning")):
    raise ValueError(f"messages[{k}]: only assistant messages carry tool_calls/reasoning")
  return message
