"""SFT rendering at read time: reference-format messages -> token ids + loss mask.

The pipeline takes any ``render(messages, tokenizer, tools) -> (ids, loss_mask)``. The one the
project keeps is ``messages.render_sft`` (owned by the rollout issue); :func:`resolve` prefers it
when it exists. Until then :func:`render_sft_chatml` stands in: the conversation rendered once by
``chat_format.render_messages`` (ChatML + the Hermes tool prompt), tokenised once, and loss on the
tokens that start inside an assistant body or its ``<|im_end|>`` (the header, the system, user and
tool turns are context, not targets).
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from arenarl_jax import chat_format
from arenarl_jax import messages as messages_lib

RenderFn = Callable[[Sequence[Mapping[str, Any]], Any, Sequence[Mapping[str, Any]] | None],
                    tuple[list[int], list[int]]]


def _chat_message(m: Mapping[str, Any]) -> dict[str, Any]:
  """A reference-format message as ``chat_format`` takes it (``reasoning`` for the think block)."""
  out = {"role": m["role"], "content": m.get("content") or ""}
  if m["role"] == "assistant":
    if m.get("reasoning_content"):
      out["reasoning"] = m["reasoning_content"]
    if m.get("tool_calls"):
      out["tool_calls"] = list(m["tool_calls"])
  return out


def assistant_spans(messages: Sequence[Mapping[str, Any]],
                    tools: Sequence[Mapping[str, Any]] | None = None
                    ) -> tuple[str, list[tuple[int, int]]]:
  """The rendered text and the [start, end) character span of each assistant body + its close."""
  chat = [_chat_message(messages_lib.check_message(k, m)) for k, m in enumerate(messages)]
  text = chat_format.render_messages(chat, tools=tools)
  spans = []
  for k, m in enumerate(chat):
    if m["role"] != "assistant":
      continue
    head = chat_format.render_messages(chat[:k], tools=tools) + chat_format.generation_prompt()
    turn = chat_format.render_messages(chat[:k + 1], tools=tools)
    if not (text.startswith(head) and text.startswith(turn) and turn.endswith("\n")):
      raise ValueError(f"messages[{k}]: the rendering of the conversation up to this message is "
                       f"not a prefix of the whole (chat_format changed?)")
    spans.append((len(head), len(turn) - 1))  # the trailing "\n" after <|im_end|> is context
  return text, spans


def render_sft_chatml(messages: Sequence[Mapping[str, Any]], tokenizer: Any,
                      tools: Sequence[Mapping[str, Any]] | None = None
                      ) -> tuple[list[int], list[int]]:
  """Ids and loss mask of a conversation with an ``arenarl_jax.tokenizer.Tokenizer``.

  Stand-in for ``messages.render_sft`` (see the module doc): replaced by it once it exists.
  """
  text, spans = assistant_spans(messages, tools)
  encoding = tokenizer.backend.encode(text, add_special_tokens=False)
  mask, s = [], 0
  for start, _ in encoding.offsets:  # offsets ascend, so one pass over the spans suffices
    while s < len(spans) and start >= spans[s][1]:
      s += 1
    mask.append(int(s < len(spans) and spans[s][0] <= start))
  return list(encoding.ids), mask


def resolve(render: RenderFn | None = None) -> RenderFn:
  """``render`` if given, else ``messages.render_sft`` where it exists, else the stand-in."""
  if render is not None:
    return render
  return getattr(messages_lib, "render_sft", None) or render_sft_chatml
