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

``python -m arenarl_jax.data.budgets --config=configs/quickstart.py`` prints the table.
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


def measure_config(config: Any, *, per_subtask: int | None = None) -> list[Budget]:
  """:func:`measure` in ``config``'s environment, tokenizer, tool schemas and system prompt."""
  from arenarl_jax.sft import policy  # pylint: disable=g-import-not-at-top  (pulls in jax)
  env = base.make_environment_from_config(config.env)
  tokenizer = policy.make_tokenizer(config, env)
  return measure(env, tokenizer, schemas=config.env.schemas, system=config.rollout.system,
                 per_subtask=per_subtask)


def format_table(budgets: Sequence[Budget], sampling: Mapping[str, Any]) -> str:
  rows = ["| subtask | tasks | turn p99 (max) | tool turns | conversation |", "|---|---|---|---|---|"]
  rows += [f"| {b.subtask} | {b.conversations} | {b.turn_p99} ({b.turn_max}) | "
           f"{b.max_tool_turns} | {b.max_conversation} |" for b in budgets]
  rows.append(f"| limits | | max_new_tokens={sampling['max_new_tokens']} | "
              f"max_turns={sampling['max_turns']} | cache_len={sampling['cache_len']} |")
  return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> None:
  import argparse  # pylint: disable=g-import-not-at-top
  from arenarl_jax import config_tree  # pylint: disable=g-import-not-at-top
  parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
  parser.add_argument("--config", required=True, help="a config file, e.g. configs/quickstart.py")
  parser.add_argument("--per_subtask", type=int, default=None)
  args = parser.parse_args(argv)
  config = config_tree.load_config_file(args.config)
  budgets = measure_config(config, per_subtask=args.per_subtask)
  print(format_table(budgets, config.sampling))
  misfits = [m for b in budgets for m in b.misfits(config.sampling)]
  print("\n".join(misfits) if misfits else "every limit fits the expert")
  print(f"RESULT fits={int(not misfits)} turn_p99={max(b.turn_p99 for b in budgets)} "
        f"tool_turns={max(b.max_tool_turns for b in budgets)} "
        f"conversation={max(b.max_conversation for b in budgets)}")


if __name__ == "__main__":
  main()
