"""What logit mode reads: one JSON key-path branch per score, the score tokens after it, and how
the expected scores combine into each agent's score (see ``judge`` for the design)."""
from __future__ import annotations

import json
from typing import Sequence

import numpy as np

from arenarl_jax.judges import rubric as rubric_lib
from arenarl_jax.judges.flax import programs


def slots(rubric: rubric_lib.Rubric, verdict_mode: str) -> list[tuple[str, str, str]]:
  """(agent, section, dimension) of every score, in verdict order (agent "" when pointwise)."""
  agents = rubric_lib.AGENTS if verdict_mode == "pairwise" else ("",)
  return [(a, s, d.name) for a in agents for s in rubric_lib.SECTIONS
          for d in rubric.dimensions(s)]


def branch_texts(rubric: rubric_lib.Rubric, verdict_mode: str) -> list[str]:
  """Each score's JSON key path, e.g. ``{"Agent_A": {"path": {"breadth": ``."""
  out = []
  for agent, section, dim in slots(rubric, verdict_mode):
    keys = ([agent] if agent else []) + [section, dim]
    out.append("".join("{" + json.dumps(k) + ": " for k in keys))
  return out


def score_tokens(tokenizer, texts: Sequence[str]) -> tuple[tuple[int, ...], int]:
  """(ids of "0".."9", id of a single-token "10" or -1 when it is "1" + "0") after every text.

  Raises ValueError when a score does not tokenize as those tokens right after a branch text
  (the reads would then not be the model's probability of writing that score).
  """
  digits, ten = None, None
  for text in texts:
    base = tokenizer.encode(text)
    tails = []
    for s in range(11):
      ids = tokenizer.encode(text + str(s))
      if ids[:len(base)] != base:
        raise ValueError(f"logit mode: the tokenizer re-tokenizes {text!r} when the score {s} "
                         "follows it; the score cannot be read as the next token")
      tails.append(tuple(ids[len(base):]))
    if any(len(t) != 1 for t in tails[:10]):
      raise ValueError(f"logit mode: the scores 0-9 after {text!r} are not single tokens: "
                       f"{tails[:10]}")
    this_digits = tuple(t[0] for t in tails[:10])
    if tails[10] == (this_digits[1], this_digits[0]):
      this_ten = -1
    elif len(tails[10]) == 1:
      this_ten = tails[10][0]
    else:
      raise ValueError(f"logit mode: the score 10 after {text!r} is {tails[10]}, neither one "
                       "token nor the tokens of '1' and '0'")
    if digits is not None and (this_digits, this_ten) != (digits, ten):
      raise ValueError(f"logit mode: score tokens differ between branches (after {text!r})")
    digits, ten = this_digits, this_ten
  return digits, ten


def branch_layout(tokenizer, texts: Sequence[str]) -> programs.BranchLayout:
  """The static branch layout of ``texts`` for ``tokenizer``."""
  digits, ten = score_tokens(tokenizer, texts)
  return programs.BranchLayout.build([tokenizer.encode(t) for t in texts], digits, ten)


def combine_agents(rubric: rubric_lib.Rubric, verdict_mode: str,
                   expected: np.ndarray) -> tuple[float, ...]:
  """Per agent: w_path * mean(path expectations) + w_answer * mean(answer expectations)."""
  by_key = dict(zip(slots(rubric, verdict_mode), expected.tolist()))
  agents = rubric_lib.AGENTS if verdict_mode == "pairwise" else ("",)
  out = []
  for a in agents:
    path = np.mean([by_key[a, "path", d.name] for d in rubric.path])
    answer = np.mean([by_key[a, "answer", d.name] for d in rubric.answer])
    out.append(float(rubric.path_weight * path + rubric.answer_weight * answer))
  return tuple(out)
