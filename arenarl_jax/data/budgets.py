"""Token budgets from the data: what a config's sampling limits must hold for the expert to fit.

A limit that cuts the expert's own conversations teaches the policy to stop where the expert
would still be talking: SFT shows whole turns, the sampler then ends them at
``sampling.max_new_tokens`` (``finish="length"``), and every such trajectory fails. So the limits
are measured, per subtask, on the expert's conversations (error rate 0) in the config's own
tokenizer and chat rendering, exactly as the rollout encodes them:

- ``turn_p99``: the 99th-percentile assistant turn, in generated tokens (the body and its
  ``<|im_end|>``), against ``sampling.max_new_tokens``;
- ``max_tool_turns``: the most turns with tool calls, against ``sampling.max_turns`` (the turns
  before the forced final answer);
- ``max_conversation``: the longest whole conversation (system prompt with the tools, query, every
  turn and tool result), against ``sampling.cache_len``.

``python -m arenarl_jax.tools.budgets --config=configs/quickstart.py`` prints them against a
config's limits.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

import numpy as np

from arenarl_jax.data import env_examples
from arenarl_jax.envs import base
from arenarl_jax.envs import compact_schemas
from arenarl_jax.text import messages as msgs


@dataclasses.dataclass(frozen=True)
class Budget:
  """The expert's needs on one subtask (``conversations`` measured)."""
  subtask: str
  conversations: int
  turn_p99: int
  turn_max: int
  max_tool_turns: int
  max_conversation: int

  def misfits(self, sampling: Mapping[str, Any]) -> list[str]:
    """What of ``sampling`` (``max_new_tokens``, ``max_turns``, ``cache_len``) is too small."""
    out = []
    if self.turn_p99 > sampling["max_new_tokens"]:
      out.append(f"{self.subtask}: the expert's 99th-percentile turn is {self.turn_p99} tokens > "
                 f"sampling.max_new_tokens={sampling['max_new_tokens']}")
    if self.max_tool_turns > sampling["max_turns"]:
      out.append(f"{self.subtask}: the expert calls tools in {self.max_tool_turns} turns > "
                 f"sampling.max_turns={sampling['max_turns']}")
    if self.max_conversation > sampling["cache_len"]:
      out.append(f"{self.subtask}: the expert's longest conversation is {self.max_conversation} "
                 f"tokens > sampling.cache_len={sampling['cache_len']}")
    return out


def conversation_counts(tokenizer: Any, conversation: Sequence[Mapping[str, Any]],
                        tools: Sequence[Mapping[str, Any]], system: str = ""
                        ) -> tuple[list[int], int, int]:
  """(generated tokens per assistant turn, turns with tool calls, whole length) of one
  reference-format conversation, rendered as the rollout renders it."""
  head = [{"role": "system", "content": system}] if system else []
  ids, mask = msgs.encode_segments(tokenizer, msgs.render_segments(head + list(conversation),
                                                                    tools=tools))
  turns, run = [], 0
  for m in mask + [0]:  # a turn is a maximal run of trained tokens (body and <|im_end|>)
    if m:
      run += 1
    elif run:
      turns.append(run)
      run = 0
  tool_turns = sum(1 for m in conversation if m["role"] == "assistant" and m.get("tool_calls"))
  return turns, tool_turns, len(ids)


def measure(env: base.Environment, tokenizer: Any, *, split_prefix: str = "valid_",
            schemas: str = "full", system: str = "", per_subtask: int | None = None,
            subtasks: Sequence[str] | None = None) -> list[Budget]:
  """Each subtask's :class:`Budget` over the expert's conversations on ``<split_prefix><subtask>``
  (the validation tasks by default: budgets are settings, chosen on validation)."""
  tools = compact_schemas.tool_source(env, schemas).tools()
  out = []
  for subtask in subtasks or env.subtasks:
    tasks = env.tasks(split_prefix + subtask)[:per_subtask]
    if not tasks:
      raise ValueError(f"environment {env.name!r}: no tasks in split {split_prefix + subtask!r}")
    turns: list[int] = []
    tool_turns = longest = 0
    for task in tasks:
      convo = env_examples.expert_messages(env, task, 0.0, env.seed)
      t, k, n = conversation_counts(tokenizer, convo, tools, system)
      turns += t
      tool_turns, longest = max(tool_turns, k), max(longest, n)
    out.append(Budget(subtask, len(tasks), int(np.ceil(np.percentile(turns, 99))), max(turns),
                      tool_turns, longest))
  return out
