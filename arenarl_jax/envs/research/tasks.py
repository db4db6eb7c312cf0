"""Research tasks of the paper's three kinds, generated from the corpus.

Kinds (subtasks): ``technical_writing`` (a guide with the sections Overview, Usage, Caveats),
``ideation`` (at least three ideas that build on the documented tools) and ``explanation``
(explain and compare, ending with a Summary section). Each task names two or three pages of one
module and carries, in ``constraints``, the pages a good answer draws on and the key facts it
should state: sentences from the visible part of each page (what ``open_page`` shows), each with
the few distinctive terms that mark it as covered.

Splits are disjoint: modules are partitioned by the seed into training and test modules, and no
(kind, pages) combination appears twice across ``train``, ``sft``, ``test_<kind>`` and
``valid_<kind>`` (validation tasks, from the test modules, for choosing settings). Ids are
``research/<kind>/<6 digits>``, numbered per kind across splits in that order.
"""
from __future__ import annotations

import hashlib
import math
import re
from typing import Any, Mapping, Sequence

import numpy as np

from arenarl_jax.envs import base
from arenarl_jax.envs.research import corpus as corpus_lib
from arenarl_jax.envs.research import search

ENV_NAME = "research"
KINDS = ("technical_writing", "ideation", "explanation")
SPLIT_SIZES = {"train": 200, "sft": 100, "test": 40, "valid": 40}  # per kind
TEST_MODULE_SHARE = 0.25
WRITING_SECTIONS = ("Overview", "Usage", "Caveats")
MIN_IDEAS = 3
FACTS_PER_PAGE = 2
FACT_TERMS = 3

_TEMPLATES = {
    "technical_writing": (
        "Write a technical guide for Python developers on {names} from the {module} module. "
        "Organise it under the headings Overview, Usage and Caveats.",
        "Draft developer documentation explaining how to use {names} ({module}). Use the sections "
        "Overview, Usage and Caveats.",
        "Prepare a short technical write-up about {names}: what they do, how to call them and what "
        "to watch out for. Required sections: Overview, Usage, Caveats.",
        "Our team is adopting the {module} module. Write an internal guide covering {names}, with "
        "an Overview, a Usage section and a Caveats section.",
        "Produce reference-style notes on {names} in Python's {module} module, structured as "
        "Overview, Usage and Caveats.",
        "Write documentation a code reviewer could rely on for {names}. Cover behaviour and "
        "signatures, under the headings Overview, Usage and Caveats.",
    ),
    "ideation": (
        "Propose at least three ideas for utilities that combine {names} from the {module} "
        "module, grounding each idea in what the documentation says they do.",
        "Brainstorm ways a developer could extend or combine {names} ({module}). List at least "
        "three concrete ideas and say which documented behaviour each relies on.",
        "I maintain a small Python tool. Suggest at least three features I could build on "
        "{names} from {module}, based on their documented behaviour.",
        "What could be built on top of {names}? Give at least three ideas, each tied to facts "
        "from the {module} documentation.",
        "Generate at least three project ideas that make use of {names} in the {module} module, "
        "and back each one with how the functions behave.",
        "Research {names} ({module}) and expand on them: at least three ideas for new uses, "
        "justified by the documentation.",
    ),
    "explanation": (
        "Explain what {names} do and how they differ, then summarise the key points in a "
        "Summary section.",
        "Summarise the documentation of {names} from the {module} module for a newcomer, and "
        "finish with a Summary section.",
        "How do {names} work? Explain them from the {module} documentation and end with a Summary.",
        "Give an explanation of {names} ({module}) that a junior developer can follow, comparing "
        "them, with a closing Summary section.",
        "Read up on {names} in the {module} module and explain their purpose and behaviour; close "
        "with a short Summary.",
        "Compare and explain {names} from Python's {module} module, and end with a Summary.",
    ),
}

_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z`(])")


def sentences(text: str) -> list[str]:
  """Prose sentences of a page body (no list items, tables, examples or headings)."""
  out = []
  for para in text.split("\n\n"):
    para = para.strip()
    if not para or para[0] in "-*|+>=:" or ">>>" in para or para.startswith("Methods of "):
      continue
    flat = " ".join(para.split())
    for s in _SENTENCE_SPLIT.split(flat):
      s = s.strip()
      if 40 <= len(s) <= 300 and s[-1] in ".!?" and s[0].isupper():
        out.append(s)
  return out


class FactIndex:
  """Key facts of pages: sentences with distinctive terms (rare in the corpus)."""

  def __init__(self, corpus: corpus_lib.Corpus):
    self.corpus = corpus
    df: dict[str, int] = {}
    for p in corpus.pages:
      for t in set(search.tokenize(p.text)):
        df[t] = df.get(t, 0) + 1
    self._df = df

  def facts(self, page: corpus_lib.Page, exclude: set[str]) -> list[dict[str, Any]]:
    """Up to FACTS_PER_PAGE facts: ``{"page", "text", "terms"}`` in page order."""
    body = search.visible_text(page)
    if page.signature:
      body = body[len(page.signature):]
    out = []
    for s in sentences(body):
      words = [t for t in dict.fromkeys(search.tokenize(s)) if t not in exclude and not t.isdigit()]
      if len(words) < FACT_TERMS:
        continue
      terms = sorted(words, key=lambda t: (self._df.get(t, 0), t))[:FACT_TERMS]
      out.append({"page": page.id, "text": s, "terms": sorted(terms)})
      if len(out) == FACTS_PER_PAGE:
        break
    return out


def _stable_unit(seed: int, text: str) -> float:
  digest = hashlib.sha256(f"{seed}:{text}".encode()).digest()
  return int.from_bytes(digest[:8], "big") / 2.0**64


def test_modules(corpus: corpus_lib.Corpus, seed: int) -> frozenset[str]:
  """The modules whose pages only test tasks use (about TEST_MODULE_SHARE of them)."""
  modules = sorted({p.module for p in corpus.pages}, key=lambda m: (_stable_unit(seed, m), m))
  return frozenset(modules[:math.ceil(len(modules) * TEST_MODULE_SHARE)])


def format_names(ids: Sequence[str]) -> str:
  quoted = [f"`{i}`" for i in ids]
  return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def _candidates(corpus: corpus_lib.Corpus, facts: FactIndex,
                modules: frozenset[str] | None, exclude_modules: frozenset[str]
                ) -> dict[str, list[corpus_lib.Page]]:
  """Per module, the class/function pages that yield at least one fact."""
  out: dict[str, list[corpus_lib.Page]] = {}
  for p in corpus.pages:
    if p.kind == "module" or p.module in exclude_modules:
      continue
    if modules is not None and p.module not in modules:
      continue
    if facts.facts(p, set(search.tokenize(p.id))):
      out.setdefault(p.module, []).append(p)
  return {m: ps for m, ps in out.items() if len(ps) >= 2}


def make_task(kind: str, number: int, pages: Sequence[corpus_lib.Page], template: int,
              facts: FactIndex) -> base.Task:
  ids = [p.id for p in pages]
  module = pages[0].module
  query = _TEMPLATES[kind][template].format(names=format_names(ids), module=module)
  exclude = set(search.tokenize(query))
  key_facts = [f for p in pages for f in facts.facts(p, exclude)]
  constraints: dict[str, Any] = {"module": module, "pages": ids, "facts": key_facts,
                                 "template": template}
  if kind == "technical_writing":
    constraints["sections"] = list(WRITING_SECTIONS)
  elif kind == "ideation":
    constraints["min_ideas"] = MIN_IDEAS
  else:
    constraints["sections"] = ["Summary"]
  return base.Task(id=f"{ENV_NAME}/{kind}/{number:06d}", env=ENV_NAME, subtask=kind, query=query,
                   constraints=constraints)


def generate_tasks(corpus: corpus_lib.Corpus, seed: int,
                   sizes: Mapping[str, int] = SPLIT_SIZES) -> dict[str, list[base.Task]]:
  """All splits: ``train``, ``sft``, ``test_<kind>`` and ``valid_<kind>``; deterministic from the
  seed. Validation tasks come from the test pool (the held-out modules, so they measure what the
  test does), are drawn after the test tasks (whose ids and contents they leave as they were)
  and share no page combination with any other task."""
  facts = FactIndex(corpus)
  held_out = test_modules(corpus, seed)
  pools = {"train": _candidates(corpus, facts, None, held_out),
           "test": _candidates(corpus, facts, held_out, frozenset())}
  splits: dict[str, list[base.Task]] = {"train": [], "sft": []}
  for k, kind in enumerate(KINDS):
    seen: set[tuple[str, ...]] = set()
    number = 0
    for split, pool_name in (("train", "train"), ("sft", "train"), ("test", "test"),
                             ("valid", "test")):
      pool = pools[pool_name]
      modules = sorted(pool)
      weights = np.array([len(pool[m]) for m in modules], np.float64)
      rng = np.random.default_rng([seed, k, ("train", "sft", "test", "valid").index(split)])
      out = splits.setdefault(split if split in ("train", "sft") else f"{split}_{kind}", [])
      made, attempts = 0, 0
      while made < sizes[split]:
        attempts += 1
        if attempts > 100 * sizes[split]:
          raise RuntimeError(f"research tasks: cannot draw {sizes[split]} distinct {kind} tasks "
                             f"for split {split!r} from the corpus")
        module = modules[rng.choice(len(modules), p=weights / weights.sum())]
        n = 3 if (kind == "technical_writing" and len(pool[module]) >= 3
                  and rng.random() < 0.3) else 2
        picks = sorted(rng.choice(len(pool[module]), n, replace=False))
        template = int(rng.integers(len(_TEMPLATES[kind])))
        pages = [pool[module][i] for i in picks]
        key = tuple(p.id for p in pages)
        if key in seen:
          continue
        task = make_task(kind, number, pages, template, facts)
        if not task.constraints["facts"]:
          continue
        seen.add(key)
        out.append(task)
        number += 1
        made += 1
  return splits


def known_item_query(page: corpus_lib.Page, rng: np.random.Generator, n_words: int = 5) -> str:
  """A query written from a page without its name: the module and words drawn from its text."""
  name = set(search.tokenize(page.id))
  words = [t for t in dict.fromkeys(search.tokenize(search.visible_text(page))) if t not in name]
  picks = sorted(rng.choice(len(words), min(n_words, len(words)), replace=False)) if words else []
  return " ".join([page.module] + [words[i] for i in picks])
