"""The record every dataset split holds, and its JSON encoding (ARCHITECTURE.md, "Datasets").

A record is six strings: ``task_id, env, subtask, query, messages, reference``. Records store
messages, not token ids (a model's tokenizer may not exist when data is built):

- ``messages``: a JSON list of reference-format messages. In ``sft`` it is the whole expert
  conversation; in ``train`` and ``test_*`` it is "" unless the prompt was given as a list of
  messages (imported data), in which case it holds that prompt conversation.
- ``reference``: in ``test_*`` splits, a JSON list holding the whole reference conversation (the
  prompt, then the strong model's or the expert's messages), "" elsewhere; so
  ``messages.trajectory_from_messages(reference)`` gives its query and steps.

Splits are ``train`` (RL prompts), ``sft`` (expert trajectories) and one ``test_<subtask>`` per
subtask. JSON is written compactly with keys in insertion order, so the same messages always give
the same bytes.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from typing import Any, Mapping, Sequence

import numpy as np

from arenarl_jax.text import messages as messages_lib

FIELDS = ("task_id", "env", "subtask", "query", "messages", "reference")
TRAIN, SFT, TEST_PREFIX = "train", "sft", "test_"


def test_split(subtask: str) -> str:
  """``test_<subtask>``; characters TFDS split names cannot hold (``[\\w-]``) become ``_``."""
  if not subtask:
    raise ValueError("a subtask name must not be empty")
  return TEST_PREFIX + re.sub(r"[^\w-]", "_", subtask)


def splits_for(subtasks: Sequence[str]) -> tuple[str, ...]:
  """All split names of a dataset with these subtasks (distinct after sanitising)."""
  tests = [test_split(s) for s in subtasks]
  if len(set(tests)) != len(tests):
    raise ValueError(f"subtasks {list(subtasks)} collide as split names {tests}")
  return (TRAIN, SFT, *tests)


def task_rng(seed: int, task_id: str) -> np.random.Generator:
  """A generator that depends only on ``seed`` and the task id (not on build order)."""
  digest = int.from_bytes(hashlib.sha256(task_id.encode("utf-8")).digest()[:8], "little")
  return np.random.default_rng([int(seed), digest])


def canonical_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
  """Validated copies of reference-format messages with tool-call arguments as JSON strings.

  Raises ``messages.MessageError`` naming ``messages[k].field`` on the first bad message.
  """
  out = []
  for k, m in enumerate(messages):
    messages_lib.check_message(k, m)
    m = dict(m)
    if m.get("tool_calls"):
      calls = []
      for j, call in enumerate(m["tool_calls"]):
        parsed = messages_lib.parse_tool_call(k, j, call)
        call = dict(call)
        fn = dict(call.get("function", call))
        fn["name"] = parsed.name
        fn["arguments"] = (fn["arguments"] if isinstance(fn.get("arguments"), str)
                           else json.dumps(dict(parsed.arguments), ensure_ascii=False))
        calls.append({"id": call.get("id") or f"call_{k}_{j}", "type": "function",
                      "function": fn})
      m["tool_calls"] = calls
    out.append(m)
  return out


def with_prompt(prompt: Sequence[Mapping[str, Any]],
                convo: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
  """``convo`` as a whole conversation: the prompt is put first unless it already opens with a
  system or user message (reference files list the assistant side only)."""
  if convo and convo[0].get("role") in ("system", "user"):
    return [dict(m) for m in convo]
  return [dict(m) for m in prompt] + [dict(m) for m in convo]


def encode_messages(messages: Sequence[Mapping[str, Any]] | None) -> str:
  """Compact JSON of a message list; "" for none."""
  if not messages:
    return ""
  return json.dumps(list(messages), ensure_ascii=False, separators=(",", ":"))


def decode_messages(text: str | bytes) -> list[dict[str, Any]]:
  """The message list of a record field ("" -> [])."""
  if isinstance(text, bytes):
    text = text.decode("utf-8")
  return json.loads(text) if text else []


def make_record(*, task_id: str, env: str, subtask: str, query: str,
                messages: Sequence[Mapping[str, Any]] | None = None,
                reference: Sequence[Mapping[str, Any]] | None = None) -> dict[str, str]:
  """A record with its message lists encoded; every field is a str."""
  record = {"task_id": task_id, "env": env, "subtask": subtask, "query": query,
            "messages": encode_messages(messages), "reference": encode_messages(reference)}
  for field in FIELDS[:4]:
    if not isinstance(record[field], str):
      raise TypeError(f"record {task_id!r}: {field} must be a str, got "
                      f"{type(record[field]).__name__}")
  return record


@dataclasses.dataclass(frozen=True)
class Example:
  """A decoded record: what the pipelines hand to the trainer."""

  task_id: str
  env: str
  subtask: str
  query: str
  messages: tuple[dict[str, Any], ...] = ()
  reference: tuple[dict[str, Any], ...] = ()

  @classmethod
  def from_record(cls, raw: Mapping[str, Any]) -> Example:
    """From a record as a data source returns it (Text features come back as bytes)."""
    text = {f: raw[f].decode("utf-8") if isinstance(raw[f], bytes) else str(raw[f])
            for f in FIELDS}
    return cls(task_id=text["task_id"], env=text["env"], subtask=text["subtask"],
               query=text["query"], messages=tuple(decode_messages(text["messages"])),
               reference=tuple(decode_messages(text["reference"])))

  def prompt_messages(self) -> list[dict[str, Any]]:
    """The conversation the policy starts from: the messages before the first assistant one,
    or a single user message holding the query."""
    prompt = []
    for m in self.messages:
      if m.get("role") == "assistant":
        break
      prompt.append(dict(m))
    return prompt or [{"role": "user", "content": self.query}]
