"""A tool-use world small enough to learn in seconds (``arenarl_jax/testing/closed_loop.py``).

The prompt asks for the value stored under ``key0``. The value is one of four and changes with
every lookup: each ``tool_source()`` is a fresh store whose answers are drawn from the world's
seed and the store's number, so no prompt, and no memory of earlier rollouts, predicts it. The
only way to the value is to call ``lookup`` and copy what it returned. Solved: look the key up,
then answer with the value that lookup returned, alone. The real chat format, tool-call parser
and agent loop run unchanged; the word-level tokenizer makes the call and the answer one id
each:

  prompt  <|im_start|> [UNK] [UNK] <|im_end|> <|im_start|> [UNK] find read key0 <|im_end|>
          <|im_start|> [UNK]
  turn 0  <call>                      (one id: the whole <tool_call>…</tool_call> text; it ends the
                                       turn, as a stop at a closed tool call would)
  tool    <|im_start|> [UNK] [UNK] val2 [UNK] <|im_end|> <|im_start|> [UNK] <note> <|im_end|>
          <|im_start|> [UNK]          (<note>: the rollout's "answer now" turn, one id)
  turn 1  val2 <|im_end|>

``LookupEnv`` keeps the Environment protocol of ``arenarl_jax/envs/base.py``: its ``checker``
gives the rubric judge partial credit on ``RUBRIC`` (the training reward), ``verify`` is the
strict all-or-nothing verdict (the test's measure, never a reward).
"""
from __future__ import annotations

import json
from typing import Any

import numpy as np
import tokenizers
from tokenizers import models, normalizers

from arenarl_jax import types
from arenarl_jax.envs import base
from arenarl_jax.judges import rubric as rubric_lib
from arenarl_jax.rollout import settings as rollout_settings
from arenarl_jax.text import chat_format
from arenarl_jax.text import messages as msgs
from arenarl_jax.text.tokenizer import Tokenizer

KEY = "key0"
VALUES = ("val0", "val1", "val2", "val3")
FILLERS = ("fetch", "find", "give", "read")  # query words that only vary the prompt
TOOL = {"name": "lookup", "description": "The value stored under a key.",
        "parameters": {"type": "object", "properties": {"key": {"type": "string"}},
                       "required": ["key"]}}
CALL = chat_format.format_tool_call({"name": "lookup", "arguments": {"key": KEY}})
CALL = CALL.replace("\n", "")  # one line: the id's text as the rollout decodes it

# A ladder of partial credit, each rung one token decision away from the last: anything that
# does not call (1.5) < a call, then a call in the forced last turn (3.5) < a call, then any last
# turn without one (5) < that turn starting with the value, or ending on its own (6.5) < solved
# (10). "called" and "right_key" coincide here (the one call token names the one key); together
# they make a lookup worth more than the heeding that every trajectory without a call gets.
RUBRIC = rubric_lib.Rubric(
    name="lookup", prompt="Look the key up, then answer with its value alone.",
    path=(rubric_lib.Dimension("heeded", "no tool asked for after the calls ran out"),
          rubric_lib.Dimension("called", "a lookup ran"),
          rubric_lib.Dimension("right_key", "the task's key was looked up")),
    answer=(rubric_lib.Dimension("mentioned", "the last turn starts with a looked-up value"),
            rubric_lib.Dimension("answered", "a lookup ran, then an answer ended the trajectory"),
            rubric_lib.Dimension("value", "the answer is the task key's value, looked up")),
    path_weight=0.5, answer_weight=0.5)


def make_tokenizer() -> Tokenizer:
  """14 ids: the turn markers, the toy words, the call and the rollout's final note; every other
  stretch of text (a role and the prose after it, tags) is one [UNK], a blank one nothing. The
  call is the end-of-turn id (``<|im_end|>`` ends a turn too: the rollout adds it)."""
  backend = tokenizers.Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
  backend.normalizer = normalizers.Strip()
  backend.add_special_tokens([tokenizers.AddedToken(t, special=True, normalized=False)
                              for t in (chat_format.IM_START, chat_format.IM_END)])
  backend.add_tokens([tokenizers.AddedToken(t, single_word=True, normalized=False)
                      for t in (KEY, *VALUES, *FILLERS)])
  backend.add_tokens([tokenizers.AddedToken(t, normalized=False)
                      for t in (CALL, rollout_settings.FINAL_NOTE)])
  return Tokenizer(backend, eos_id=backend.token_to_id(CALL))


class LookupTools:
  """``lookup(key)`` -> the key's value, drawn anew for every call from ``rng`` (the rollout makes
  a batch's calls in a fixed order, so a seeded store answers the same batch the same way);
  anything else is an error observation."""

  def __init__(self, keys: tuple[str, ...], rng: np.random.Generator):
    self.keys, self.rng = keys, rng

  def tools(self) -> list[dict[str, Any]]:
    return [dict(TOOL)]

  async def call(self, name, arguments, *, timeout=None) -> base.ToolResult:
    del timeout
    if name != "lookup":
      return base.ToolResult(f"Error: unknown tool {name!r}", False, base.UNKNOWN_TOOL)
    args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
    if args.get("key") not in self.keys:
      return base.ToolResult("Error: no such key", False, base.NOT_FOUND)
    return base.ToolResult(VALUES[int(self.rng.integers(len(VALUES)))])


class LookupEnv:
  """The lookup world: 16 tasks, one per pair of fillers; the 4 pairs (a, b) with a + b = 0
  (mod 4) are the test split (held out: no training prompt is one of them)."""

  name = "lookup"
  rubric = "lookup"
  subtasks = ("lookup",)

  def __init__(self, seed: int = 0):
    self.seed, self._stores = seed, 0
    self._tasks = {}
    for a, first in enumerate(FILLERS):
      for b, second in enumerate(FILLERS):
        task = base.Task(id=f"lookup/{a}{b}", env=self.name, subtask="lookup",
                         query=f"{first} {second} {KEY}", constraints={"key": KEY})
        self._tasks[task.id] = ("test_lookup" if (a + b) % len(FILLERS) == 0 else "train", task)

  def tasks(self, split: str) -> list[base.Task]:
    return [t for s, t in self._tasks.values() if s == split]

  def tool_source(self) -> LookupTools:
    """A fresh store, the n-th this world made: its values follow from (seed, n)."""
    self._stores += 1
    return LookupTools((KEY,), np.random.default_rng((self.seed, self._stores)))

  def _facts(self, trajectory: types.Trajectory) -> tuple[list[str], bool, str]:
    """(the values the lookups returned, the task's key looked up, the final answer). The
    trajectory's tool results are the rollout's record of what the store answered, not text the
    policy wrote."""
    key = self._tasks[trajectory.metadata["task_id"]][1].constraints["key"]
    looked, seen = [], []
    for step in trajectory.steps:
      for call, result in zip(step.tool_calls, step.tool_results):
        if call.name == "lookup" and result in VALUES:
          looked.append(call.arguments["key"])
          seen.append(result)
    return seen, key in looked, base.final_answer(trajectory).strip()

  def checker(self, trajectory: types.Trajectory) -> dict[str, dict[str, float]]:
    seen, right_key, answer = self._facts(trajectory)
    last = trajectory.steps[-1].content.split() if trajectory.steps else []
    return {"path": {"heeded": 10.0 * (trajectory.finish_reason != "max_turns"),
                     "called": 10.0 * bool(seen), "right_key": 10.0 * right_key},
            "answer": {"mentioned": 10.0 * bool(last and last[0] in seen),
                       "answered": 10.0 * bool(seen and answer),
                       "value": 10.0 * (right_key and answer == seen[-1])}}

  def verify(self, trajectory: types.Trajectory) -> base.Verification:
    seen, right_key, answer = self._facts(trajectory)
    if not answer:
      return base.Verification(0, 3, ("finished",))
    unmet = [name for name, ok in (("lookup", right_key),
                                   ("value", bool(seen) and answer == seen[-1])) if not ok]
    return base.Verification(3 - len(unmet), 3, unmet)

  def valid(self, answer: str, task: base.Task | str | None = None) -> tuple[bool, str]:
    del task
    return (True, "") if answer.strip() else (False, "empty answer")

  def expert(self, task: base.Task, error_rate: float, rng) -> list[dict[str, Any]]:
    del error_rate
    value = VALUES[int(rng.integers(len(VALUES)))]  # what a lookup might have returned
    call = {"id": "call_0_0", "type": "function",
            "function": {"name": "lookup", "arguments": json.dumps({"key": KEY})}}
    return [{"role": "user", "content": task.query},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_0_0", "content": value},
            {"role": "assistant", "content": value}]


def warm_rows(rollout: Any, tasks: list[base.Task], tools: list[dict[str, Any]],
              rng: np.random.Generator, width: int) -> dict[str, np.ndarray]:
  """Supervised rows of the solved trajectory, one per task, as the rollout's own ids: the
  prompt it renders, the call id, the observation of a drawn value with the "answer now" note,
  then the value and ``<|im_end|>``; the loss on the three ids the policy writes. (The expert's
  messages rendered for SFT spell the call over several ids; the rollout reads it as one.)"""
  tok = rollout.tok
  end = tok.encode(chat_format.IM_END)[0]
  tokens, mask = [], []
  for task in tasks:
    value = VALUES[int(rng.integers(len(VALUES)))]
    prompt = msgs.encode_segments(tok, msgs.render_segments(
        rollout.prompt_messages(task), tools=tools, add_generation_prompt=True))[0]
    _, seen = rollout.observation([value], close_previous=False, forced=True)
    ids = [*prompt, tok.eos_id, *seen, tok.encode(value)[0], end]
    weights = [0] * len(prompt) + [1] + [0] * len(seen) + [1, 1]
    if len(ids) > width:
      raise ValueError(f"warm_rows: {len(ids)} ids do not fit width {width}")
    tokens.append(ids + [0] * (width - len(ids)))
    mask.append(weights + [0] * (width - len(ids)))
  return {"tokens_NT": np.asarray(tokens, np.int32), "loss_mask_NT": np.asarray(mask, np.float32),
          "temperature_N": np.ones(len(tasks), np.float32)}
