"""Records from an environment: its tasks and its expert's trajectories (deterministic from a seed).

- ``train``: one prompt record per ``env.tasks("train")`` task.
- ``sft``: ``env.tasks("sft")`` with the expert's conversation at error rate 0 in ``messages``
  (which tasks belong there, e.g. travel leaving M-Day out, is the environment's business).
- ``test_<subtask>``: ``env.tasks("test_<subtask>")`` with the expert's conversation at
  ``error_rate`` as the ``reference``.

Expert conversations are stored whole: a user message with the task's query is put first when the
expert leaves the prompt out.

Each expert call gets its own generator seeded by (seed, task id), so a record does not depend on
which other tasks were built before it.
"""
from __future__ import annotations

from typing import Any, Iterator, Sequence

from arenarl_jax.text import chat_format
from arenarl_jax.text import messages as messages_lib
from arenarl_jax.data import records
from arenarl_jax.envs import base


def expert_messages(env: base.Environment, task: base.Task, error_rate: float,
                    seed: int) -> list[dict[str, Any]]:
  """The expert's whole conversation on ``task`` (canonical messages, the query first)."""
  convo = env.expert(task, error_rate, records.task_rng(seed, task.id))
  try:
    convo = records.canonical_messages(convo)
  except messages_lib.MessageError as e:
    raise ValueError(f"environment {env.name!r}: expert conversation of task {task.id!r}: "
                     f"{e}") from e
  return records.with_prompt([{"role": "user", "content": task.query}], convo)


def test_subtasks(env: base.Environment) -> dict[str, str]:
  """Split name -> subtask for the environment's test splits."""
  names = records.splits_for(env.subtasks)[2:]
  return dict(zip(names, env.subtasks))


def split_records(env: base.Environment, split: str, *, seed: int,
                  error_rate: float) -> Iterator[dict[str, str]]:
  """The records of one split, in the environment's task order."""
  tests = test_subtasks(env)
  if split == records.TRAIN:
    tasks: Sequence[base.Task] = env.tasks(records.TRAIN)
  elif split == records.SFT:
    tasks = env.tasks(records.SFT)
  elif split in tests:
    tasks = env.tasks(records.TEST_PREFIX + tests[split])
  else:
    raise ValueError(f"split {split!r}: not one of {records.splits_for(env.subtasks)}")
  seen: set[str] = set()
  for task in tasks:
    if task.id in seen:
      raise ValueError(f"environment {env.name!r}, split {split!r}: task id {task.id!r} repeats")
    seen.add(task.id)
    convo = reference = None
    if split == records.SFT:
      convo = expert_messages(env, task, 0.0, seed)
    elif split != records.TRAIN:
      reference = expert_messages(env, task, error_rate, seed)
    yield records.make_record(task_id=task.id, env=task.env, subtask=task.subtask,
                              query=task.query, messages=convo, reference=reference)


def tokenizer_corpus(env: Any, *, sft_tasks: int = 300, queries: int = 2000,
                     tools: Sequence[Any] | None = None) -> Iterator[str]:
  """Text of ``env`` to train a task tokenizer on (``text/task_tokenizer.train_bpe``): its
  rendered system prompt with ``tools`` (default: the tool source's),
  ``sft_tasks`` expert conversations (error rate 0, with their tool outputs) and the queries of
  the first ``queries`` train tasks."""
  tools = env.tool_source().tools() if tools is None else tools
  yield chat_format.render_messages([], tools=tools)
  for task in env.tasks(records.SFT)[:sft_tasks]:
    convo = env.expert(task, 0.0, records.task_rng(env.seed, task.id))
    convo = records.with_prompt([{"role": "user", "content": task.query}],
                                records.canonical_messages(convo))
    yield chat_format.render_messages(messages_lib.to_chat(convo), default_system=None)
  for task in env.tasks(records.TRAIN)[:queries]:
    yield task.query
