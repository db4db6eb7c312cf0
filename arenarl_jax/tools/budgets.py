"""Does a config's sampling hold the expert? Its limits beside what the expert's conversations need.

``data/budgets.py`` measures, per subtask, the expert's 99th-percentile turn, its tool turns and
its longest conversation; this measures them in a config's own environment, tokenizer, tool
schemas and system prompt, and sets them beside its ``sampling.*`` limits.

  python -m arenarl_jax.tools.budgets --config=configs/quickstart.py [--per_subtask=N]

prints a table per subtask, then what of the limits is too small (or that every limit fits), and
ends with ``RESULT fits=... turn_p99=... tool_turns=... conversation=...``.
"""
from __future__ import annotations

import argparse
from typing import Any, Mapping, Sequence

from arenarl_jax import config_tree
from arenarl_jax.data import budgets as budgets_lib
from arenarl_jax.envs import base
from arenarl_jax.models.settings import ModelSettings


def measure_config(config: Any, *, per_subtask: int | None = None) -> list[budgets_lib.Budget]:
  """``data.budgets.measure`` in ``config``'s environment, tokenizer, tool schemas and system
  prompt."""
  from arenarl_jax.sft import policy  # pylint: disable=g-import-not-at-top  (pulls in jax)
  env = base.make_environment_from_config(config.env)
  tokenizer = policy.make_tokenizer(ModelSettings.from_config(config.model), env,
                                    schemas=config.env.schemas)
  return budgets_lib.measure(env, tokenizer, schemas=config.env.schemas,
                             system=config.rollout.system, per_subtask=per_subtask)


def format_table(budgets: Sequence[budgets_lib.Budget], sampling: Mapping[str, Any]) -> str:
  rows = ["| subtask | tasks | turn p99 (max) | tool turns | conversation |",
          "|---|---|---|---|---|"]
  rows += [f"| {b.subtask} | {b.conversations} | {b.turn_p99} ({b.turn_max}) | "
           f"{b.max_tool_turns} | {b.max_conversation} |" for b in budgets]
  rows.append(f"| limits | | max_new_tokens={sampling['max_new_tokens']} | "
              f"max_turns={sampling['max_turns']} | cache_len={sampling['cache_len']} |")
  return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> None:
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
