"""Does a policy read its query? The expert's first turn, scored under its own query and another's.

The expert's first assistant turn (its tool calls) names the query's city, places and dates. A
policy that reads the query finds that turn likelier after its own query than after the query of
another task of the same subtask; a policy that learned only the format and the most frequent
names scores both alike. Greedy rollouts show only that its calls fail; this tells whether it
conditions on the prompt at all, the first thing a model trained from scratch has to learn (and
what a 2-layer model's SFT learns last). Nothing here enters training or the evaluation's metrics.

Per task: the mean -log p of the first assistant turn's tokens, teacher-forced, with the task's
query (``own``) and with the next validation task's query of the same subtask (``swapped``);
``gap`` = swapped - own, with a 95% bootstrap interval over tasks (paired: one resample for both).

  python -m arenarl_jax.tools.query_reading --workdir=runs/quickstart [--per_subtask=5]
      [--checkpoint=sft|rl]

reads the run's ``config.json``, tokenizer and checkpoint, prints a table per subtask and ends with
``RESULT nll_own=... nll_swapped=... gap=... gap_ci_low=... gap_ci_high=... tasks=...``.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from arenarl_jax.data import pipeline
from arenarl_jax.eval import bootstrap
from arenarl_jax.text import messages as messages_lib

# ids [T] -> float [T-1]: log p(ids[t+1] | ids[:t+1]), teacher-forced.
LogProbs = Callable[[Sequence[int]], np.ndarray]


@dataclasses.dataclass(frozen=True)
class Reading:
  """Per task (in order): the first turn's mean NLL under its own query and a swapped one."""
  task_ids: tuple[str, ...]
  own_K: np.ndarray
  swapped_K: np.ndarray

  def summary(self, samples: int = 1000, seed: int = 0) -> dict[str, float]:
    gap_K = self.swapped_K - self.own_K
    low, high = bootstrap.mean_interval(gap_K, samples, seed)
    return {"nll_own": float(self.own_K.mean()), "nll_swapped": float(self.swapped_K.mean()),
            "gap": float(gap_K.mean()), "gap_ci_low": low, "gap_ci_high": high,
            "tasks": len(self.task_ids)}


def first_turn(mask: Sequence[int]) -> tuple[int, int]:
  """[start, end) of the first run of trained tokens (the first assistant turn)."""
  on = np.flatnonzero(np.asarray(mask) == 1)
  if not len(on):
    raise ValueError("the conversation has no assistant turn to score")
  return int(on[0]), pipeline.first_turn_end(mask)


def first_turn_nll(logprobs: LogProbs, ids: Sequence[int], mask: Sequence[int]) -> float:
  """Mean -log p of the first assistant turn's tokens given everything before them."""
  start, end = first_turn(mask)
  logp = np.asarray(logprobs(ids), np.float64)  # logp[t] scores ids[t + 1]
  return float(-logp[start - 1:end - 1].mean())


def with_query(messages: Sequence[Mapping[str, Any]], query: str) -> list[dict[str, Any]]:
  """The conversation with its first user message's content replaced by ``query``."""
  out = [dict(m) for m in messages]
  first = next((k for k, m in enumerate(out) if m.get("role") == "user"), None)
  if first is None:
    raise ValueError("the conversation has no user message to swap")
  out[first]["content"] = query
  return out


def measure(logprobs: LogProbs, tokenizer: Any, conversations: Mapping[str, Sequence[Any]],
            tools: Sequence[Mapping[str, Any]] | None = None) -> Reading:
  """``conversations``: subtask -> [(task id, query, expert messages)], two or more each; every
  task's first turn is scored after its own query and after the next task's (cyclically)."""
  ids_K, own, swapped = [], [], []
  for subtask, rows in conversations.items():
    if len(rows) < 2:
      raise ValueError(f"subtask {subtask!r}: query reading needs two tasks or more to swap")
    for k, (task_id, _, messages) in enumerate(rows):
      other_query = rows[(k + 1) % len(rows)][1]
      for convo, out in ((messages, own), (with_query(messages, other_query), swapped)):
        ids, mask = messages_lib.render_ids(tokenizer, convo, tools=tools)
        out.append(first_turn_nll(logprobs, ids, mask))
      ids_K.append(task_id)
  return Reading(tuple(ids_K), np.asarray(own), np.asarray(swapped))


def model_logprobs(model, bucket: int = 256) -> LogProbs:
  """Teacher-forced log-probs of a ``Transformer`` (``models.logprobs.token_logprobs``): one
  jitted forward per length bucket (the model is causal, so padding at the end changes nothing
  before it)."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from arenarl_jax.models import logprobs as logprobs_lib  # pylint: disable=g-import-not-at-top

  @nnx.jit
  def forward(model, tokens_1T):
    return logprobs_lib.token_logprobs(model, tokens_1T)[0]  # [T]; position 0 scores nothing

  def logprobs(ids: Sequence[int]) -> np.ndarray:
    n = len(ids)
    padded = np.zeros((1, -(-n // bucket) * bucket), np.int32)
    padded[0, :n] = ids
    return np.asarray(forward(model, jnp.asarray(padded)))[1:n]
  return logprobs


def validation_conversations(env: Any, per_subtask: int, seed: int
                             ) -> dict[str, list[tuple[str, str, list[dict[str, Any]]]]]:
  """subtask -> the first ``per_subtask`` validation tasks with the expert's conversation."""
  from arenarl_jax.data import env_examples  # pylint: disable=g-import-not-at-top
  out = {}
  for subtask in env.subtasks:
    tasks = env.tasks(f"valid_{subtask}")[:per_subtask]
    out[subtask] = [(t.id, t.query, env_examples.expert_messages(env, t, 0.0, seed))
                    for t in tasks]
  return out


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
  import argparse  # pylint: disable=g-import-not-at-top
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from arenarl_jax import pipeline as pipeline_lib  # pylint: disable=g-import-not-at-top
  from arenarl_jax import run_config  # pylint: disable=g-import-not-at-top
  from arenarl_jax.envs import base, compact_schemas  # pylint: disable=g-import-not-at-top

  parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
  parser.add_argument("--workdir", required=True, help="a run's workdir (with config.json)")
  parser.add_argument("--per_subtask", type=int, default=5)
  parser.add_argument("--checkpoint", choices=("sft", "rl"), default="sft")
  args = parser.parse_args(argv)
  config = run_config.read(args.workdir)
  env = base.make_environment_from_config(config.env)
  mesh = pipeline_lib.make_mesh(config)
  policy = pipeline_lib.starting_policy(config, args.workdir, env, mesh)
  params = nnx.to_pure_dict(nnx.state(policy.model))
  if args.checkpoint == "rl":
    params, _ = pipeline_lib.rl_params(config, args.workdir, policy.model, mesh)
    if params is None:
      raise FileNotFoundError(f"{args.workdir}/checkpoints: no RL checkpoint (--checkpoint=rl)")
  model = pipeline_lib.with_params(policy.model, params)
  tools = compact_schemas.tool_source(env, config.env.schemas).tools()
  conversations = validation_conversations(env, args.per_subtask, int(config.seed))
  reading = measure(model_logprobs(model), policy.tokenizer, conversations, tools)
  print("| subtask | tasks | NLL own query | swapped | gap |\n|---|---|---|---|---|")
  k = 0
  for subtask, rows in conversations.items():
    own, swapped = reading.own_K[k:k + len(rows)], reading.swapped_K[k:k + len(rows)]
    print(f"| {subtask} | {len(rows)} | {own.mean():.3f} | {swapped.mean():.3f} | "
          f"{swapped.mean() - own.mean():+.3f} |")
    k += len(rows)
  out = reading.summary()
  print("RESULT " + " ".join(f"{key}={value:.4f}" if isinstance(value, float) else
                             f"{key}={value}" for key, value in out.items()))
  return out


if __name__ == "__main__":
  main()
