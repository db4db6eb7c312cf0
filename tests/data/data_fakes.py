"""A small deterministic environment (``fake``) and jsonl writers for the data tests.

Importing this module registers ``fake`` in the environment registry. Its tasks depend on the seed;
its expert writes a reference-format conversation with one tool call, its result and an answer, and
with probability ``error_rate`` looks up the wrong key first (a nested error to recover from).
"""
from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from arenarl_jax.envs import base, inprocess

SUBTASKS = ("alpha", "beta-2")
SIZES = {"train": 12, "sft": 6, "test": 3}
_WORDS = ("red", "blue", "green", "amber", "violet", "teal", "coral", "ivory")


def _lookup(key: str) -> str:
  return f"value-of-{key}"


class FakeEnvironment:
  """Implements ``envs.base.Environment`` for tests (tools, checker and validity are trivial)."""

  name = "fake"
  rubric = "travel"
  subtasks = SUBTASKS

  def __init__(self, seed: int = 0, tool_max_chars: int = 5000,
               reference_error_rate: float = 0.3):  # envs/base.py COMMON_KEYS
    self.seed = seed
    self._source = inprocess.InProcessToolSource([inprocess.Tool(
        name="lookup", description="Looks a key up.",
        parameters={"type": "object", "properties": {"key": {"type": "string"}},
                    "required": ["key"]},
        fn=_lookup)])

  def tasks(self, split: str) -> list[base.Task]:
    if split in ("train", "sft"):
      subtasks, n = SUBTASKS, SIZES[split]
    elif split.startswith("test_") and split[5:] in SUBTASKS:
      subtasks, n = (split[5:],), SIZES["test"]
    else:
      raise ValueError(f"fake: unknown split {split!r}")
    rng = np.random.default_rng([self.seed, len(split), n])
    out = []
    for k in range(n):
      subtask = subtasks[k % len(subtasks)]
      words = rng.choice(_WORDS, size=2)
      out.append(base.Task(id=f"fake/{split}/{subtask}/{k:06d}", env="fake", subtask=subtask,
                           query=f"Find the {words[0]} {words[1]} value ({subtask} #{k}).",
                           constraints={"key": f"{words[0]}-{words[1]}"}))
    return out

  def tool_source(self) -> inprocess.InProcessToolSource:
    return self._source

  def checker(self, trajectory) -> dict[str, dict[str, float]]:
    return {"path": {"tools": 10.0}, "answer": {"correct": 10.0}}

  def valid(self, answer: str) -> tuple[bool, str]:
    return (bool(answer.strip()), "" if answer.strip() else "empty answer")

  def expert(self, task: base.Task, error_rate: float,
             rng: np.random.Generator | int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(rng)
    key = task.constraints["key"]
    out: list[dict[str, Any]] = [{"role": "user", "content": task.query}]
    turn = 0
    if rng.random() < error_rate:
      wrong = f"{key}-{int(rng.integers(1000))}"
      out += [_call(turn, wrong, "Looking it up."), _result(turn, _lookup(wrong))]
      turn += 1
    out += [_call(turn, key, f"The key is {key}."), _result(turn, _lookup(key)),
            {"role": "assistant", "content": f"The answer is {_lookup(key)}."}]
    return out


def _call(turn: int, key: str, reasoning: str) -> dict[str, Any]:
  return {"role": "assistant", "content": "", "reasoning_content": reasoning,
          "tool_calls": [{"id": f"call_{turn}", "type": "function",
                          "function": {"name": "lookup",
                                       "arguments": json.dumps({"key": key})}}]}


def _result(turn: int, text: str) -> dict[str, Any]:
  return {"role": "tool", "tool_call_id": f"call_{turn}", "content": text}


base.register("fake")(FakeEnvironment)


def write_jsonl(path: str, rows: list[Any]) -> str:
  """Writes rows (objects as JSON, strings verbatim) one per line."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    for row in rows:
      f.write((row if isinstance(row, str) else json.dumps(row)) + "\n")
  return path


def write_reference_layout(root: str, env: FakeEnvironment | None = None) -> dict[str, list]:
  """The reference jsonl layout of ``env``'s tasks (string queries for alpha, message-list queries
  for beta-2); returns the rows written per file."""
  env = env or FakeEnvironment(0)
  written: dict[str, list] = {}
  for subtask in SUBTASKS:
    train = [t for t in env.tasks("train") if t.subtask == subtask]
    as_list = subtask == "beta-2"
    rows = [{"query": [{"role": "system", "content": "Be brief."},
                       {"role": "user", "content": t.query}] if as_list else t.query,
             "metadata": {"k": k}} for k, t in enumerate(train)]
    written[f"train/{subtask}.jsonl"] = rows
    write_jsonl(os.path.join(root, "train", f"{subtask}.jsonl"), rows)
    tests = env.tasks(f"test_{subtask}")
    rows = [{"query": t.query, "reference": env.expert(t, 0.5, k)[1:]}
            for k, t in enumerate(tests)]
    written[f"test/{subtask}.jsonl"] = rows
    write_jsonl(os.path.join(root, "test", f"{subtask}.jsonl"), rows)
  return written
