"""Does a policy copy what its tool results say? The expert's answer turn, teacher-forced, by kind.

A travel answer is a template ("Morning: ..., rating ..., ticket ...") filled with names and
figures that only the tool results, hundreds of tokens up, give. A policy that learned the
template but does not read predicts the template's tokens and misses the names and figures; the
verifier's content requirements need exactly those. This tells the two apart without a rollout:
each token of the expert's final answer is scored after the whole conversation before it, and
counted under its kind:

  figure    a token holding a digit (prices, ratings, distances, times)
  name      a token inside a name of the environment's world (places, cities), by characters,
            so a multi-token name counts every piece
  template  every other token

Per kind and subtask: ``acc``, the share of tokens the policy gives probability above one half
(the greedy choice for sure), and ``nll``, the mean -log p. Nothing here enters training.

  python -m arenarl_jax.tools.answer_reading --workdir=RUN [--per_subtask=6] [--checkpoint=sft|rl]
  python -m arenarl_jax.tools.answer_reading --config=configs/smollm2_travel.py [--per_subtask=6]
      [--set=KEY=VALUE ...]

``--workdir``: the run's SFT (or pinned) start, or its newest RL checkpoint; ``--config``: that
config's model before any SFT (a pretrained model zero-shot, or the pinned start it loads). The
conversations are the first validation tasks of each subtask, rendered as the config's SFT rows
(``env.schemas``, ``sft.reasoning``). Prints a table and ends with ``RESULT template_acc=...
name_acc=... figure_acc=... template_nll=... name_nll=... figure_nll=... tokens=...``.
"""
from __future__ import annotations

import math
import re
from typing import Any, Mapping, Sequence

import numpy as np

from arenarl_jax.data import pipeline as data_pipeline
from arenarl_jax.text import messages as messages_lib
from arenarl_jax.tools import query_reading

KINDS = ("template", "name", "figure")


def token_kinds(pieces: Sequence[str], names: Sequence[str]) -> list[str]:
  """The kind of each decoded piece of one text (``KINDS``); names matched longest first."""
  text = "".join(pieces)
  spans = []
  if names:
    pattern = "|".join(re.escape(n) for n in sorted(set(names), key=len, reverse=True))
    spans = [(m.start(), m.end()) for m in re.finditer(pattern, text)]
  kinds, pos = [], 0
  for piece in pieces:
    start, pos = pos, pos + len(piece)
    if re.search(r"\d", piece):
      kinds.append("figure")
    elif piece.strip() and any(start < e and pos > s for s, e in spans):
      kinds.append("name")
    else:
      kinds.append("template")
  return kinds


def answer_turn(mask: Sequence[int]) -> tuple[int, int]:
  """[start, end) of the last run of trained tokens (the final answer turn)."""
  on = np.flatnonzero(np.asarray(mask) == 1)
  if not len(on):
    raise ValueError("the conversation has no assistant turn to score")
  breaks = np.flatnonzero(np.diff(on) > 1)
  return int(on[breaks[-1] + 1] if len(breaks) else on[0]), int(on[-1]) + 1


def measure(logprobs: query_reading.LogProbs, tokenizer: Any,
            conversations: Mapping[str, Sequence[Any]], names: Sequence[str], *,
            tools: Sequence[Mapping[str, Any]] | None = None, reasoning: str = "all"
            ) -> dict[tuple[str, str], np.ndarray]:
  """(kind, subtask) -> the answer tokens' NLLs; ``conversations`` as ``query_reading``'s."""
  out: dict[tuple[str, str], list[float]] = {}
  for subtask, rows in conversations.items():
    for _, _, messages in rows:
      ids, mask = messages_lib.render_ids(tokenizer, data_pipeline.sft_messages(messages, reasoning), tools=tools)
      start, end = answer_turn(mask)
      nll = -np.asarray(logprobs(ids), np.float64)  # nll[t] scores ids[t + 1]
      pieces = [tokenizer.decode([int(i)]) for i in ids[start:end]]
      for t, kind in zip(range(start, end), token_kinds(pieces, names)):
        out.setdefault((kind, subtask), []).append(float(nll[t - 1]))
  return {k: np.asarray(v) for k, v in out.items()}


def summary(nll: Mapping[tuple[str, str], np.ndarray], subtask: str | None = None
            ) -> dict[str, float]:
  """Per kind, over every subtask (or one): ``<kind>_acc`` and ``<kind>_nll``; ``tokens``."""
  out: dict[str, float] = {}
  tokens = 0
  for kind in KINDS:
    v = np.concatenate([a for (k, s), a in nll.items()
                        if k == kind and subtask in (None, s)] or [np.zeros(0)])
    tokens += len(v)
    out[f"{kind}_acc"] = float(np.mean(v < math.log(2))) if len(v) else float("nan")
    out[f"{kind}_nll"] = float(v.mean()) if len(v) else float("nan")
  out["tokens"] = tokens
  return out


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
  import argparse  # pylint: disable=g-import-not-at-top
  from arenarl_jax import pipeline  # pylint: disable=g-import-not-at-top
  from arenarl_jax.envs import base, compact_schemas  # pylint: disable=g-import-not-at-top
  from arenarl_jax.tools import headroom  # pylint: disable=g-import-not-at-top

  parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
  parser.add_argument("--workdir", default="", help="a run's workdir (config.json, checkpoints)")
  parser.add_argument("--config", default="", help="a config file (path[:arg]): its model "
                      "before any SFT")
  parser.add_argument("--per_subtask", type=int, default=6)
  parser.add_argument("--checkpoint", choices=("sft", "rl"), default="sft")
  parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                      help="change a config key (e.g. env.schemas=none), as headroom's --set")
  args = parser.parse_args(argv)
  if bool(args.workdir) == bool(args.config):
    parser.error("give one of --workdir (a run) and --config (a config's model before SFT)")
  config = headroom.load_config(args.workdir, args.config)
  for item in args.set:
    headroom.set_key(config, item)
  env = base.make_environment_from_config(config.env)
  mesh = pipeline.make_mesh(config)
  if args.workdir:
    policy = pipeline.starting_policy(config, args.workdir, env, mesh)
    if args.checkpoint == "rl":
      params, _ = pipeline.rl_params(config, args.workdir, policy.model, mesh)
      if params is None:
        raise FileNotFoundError(f"{args.workdir}/checkpoints: no RL checkpoint (--checkpoint=rl)")
      policy.model = pipeline.with_params(policy.model, params)
  else:
    import tempfile  # pylint: disable=g-import-not-at-top
    policy = pipeline.make_policy(config, tempfile.mkdtemp(prefix="answer_reading_"), env, mesh)
  tools = compact_schemas.tool_source(env, config.env.schemas).tools()
  conversations = query_reading.validation_conversations(env, args.per_subtask, int(config.seed))
  nll = measure(query_reading.model_logprobs(policy.model), policy.tokenizer, conversations,
                tuple(getattr(env, "names", tuple)()), tools=tools, reasoning=str(config.sft.reasoning))
  print("| subtask | " + " | ".join(f"{k} acc / nll" for k in KINDS) + " |\n|---|---|---|---|")
  for subtask in [*conversations, None]:
    s = summary(nll, subtask)
    print(f"| {subtask or 'overall'} | " + " | ".join(
        f"{s[f'{k}_acc']:.2f} / {s[f'{k}_nll']:.2f}" for k in KINDS) + " |")
  out = summary(nll)
  print("RESULT " + " ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}"
                             for k, v in out.items()))
  return out


if __name__ == "__main__":
  main()
