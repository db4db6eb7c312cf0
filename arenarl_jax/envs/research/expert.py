"""The research expert: a scripted agent that writes reference-format conversations.

At error rate 0 it plans, searches for every page the task needs (a query built from the page's
name and first sentence, checked to rank the page in the top :data:`SEARCH_K`), opens each page,
and writes a report in the kind's structure that states every key fact in the page's own words,
so it scores the checker's maximum. Errors are NESTED: every potential error site of a task gets
one uniform number drawn from ``rng`` before anything else, and a site's error is made when its
number is below the rate, so a higher rate makes a superset of the errors of a lower one. Sites,
in draw order: per needed page, ``missed_search`` (never searched, so never read; its facts are
left out) and ``before_reading`` (found but not opened; its facts are still written); then
:data:`CLAIM_SITES` ``unsupported_claim`` sites (a sentence with an invented argument and number);
then one ``truncation`` site (the report is cut off mid-sentence).

The plan's last step and the reading turn name the headings the report will have
(:data:`HEADINGS`), as a careful agent restates its deliverable: the kind of report is then
stated in the agent's own recent turns, not only in a query hundreds of tool-result tokens back.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np

from arenarl_jax.envs import base
from arenarl_jax.envs.research import corpus as corpus_lib
from arenarl_jax.envs.research import search
from arenarl_jax.envs.research import tasks as tasks_lib

ERROR_KINDS = ("missed_search", "before_reading", "unsupported_claim", "truncation")
CLAIM_SITES = 2
SEARCH_K = 3
TRUNCATE_AT = 0.5  # a truncated report keeps about this share of its characters

# The report's headings per kind, in order (technical writing's are the task's required sections).
HEADINGS = {"technical_writing": tasks_lib.WRITING_SECTIONS, "ideation": ("Background", "Ideas"),
            "explanation": ("Explanation", "Comparison", "Summary")}

_FAKE_WORDS = ("turbo", "shadow", "prefetch", "lattice", "quorum", "sprocket", "velvet", "nimbus",
               "ember", "fathom", "glyph", "harbor")


def error_sites(task: base.Task) -> list[tuple[str, int]]:
  """The task's potential error sites, in the order their uniforms are drawn."""
  sites = []
  for i in range(len(task.constraints["pages"])):
    sites += [("missed_search", i), ("before_reading", i)]
  sites += [("unsupported_claim", j) for j in range(CLAIM_SITES)]
  return sites + [("truncation", 0)]


def make_rng(task: base.Task, rng: np.random.Generator | int) -> np.random.Generator:
  if isinstance(rng, np.random.Generator):
    return rng
  salt = int.from_bytes(hashlib.sha256(task.id.encode()).digest()[:8], "big")
  return np.random.default_rng([int(rng), salt])


def draw_errors(task: base.Task, error_rate: float,
                rng: np.random.Generator) -> tuple[set[tuple[str, int]], np.random.Generator]:
  """The sites whose uniform falls below ``error_rate``, and a generator for the errors' details."""
  if not 0.0 <= error_rate <= 1.0:
    raise ValueError(f"error_rate must be in [0, 1], got {error_rate}")
  sites = error_sites(task)
  u = rng.random(len(sites))
  detail = np.random.default_rng(rng.integers(2**63, size=2))
  return {s for s, x in zip(sites, u) if x < error_rate}, detail


class Expert:
  """Writes expert conversations for the tasks of one corpus, through the real tools."""

  def __init__(self, index: search.SearchIndex):
    self.index = index
    self.corpus = index.corpus
    self.source = index.tool_source()

  def search_query(self, page: corpus_lib.Page) -> str:
    name = page.id.replace(".", " ").replace("_", " ")
    for query in (f"{name} {page.summary()}"[:300], page.id, name):
      if page.id in [p.id for p, _ in self.index.search(query, SEARCH_K)]:
        return query
    return page.id

  def run(self, task: base.Task, error_rate: float,
          rng: np.random.Generator | int) -> list[dict[str, Any]]:
    errors, detail = draw_errors(task, error_rate, make_rng(task, rng))
    return self.write(task, errors, detail)

  def write(self, task: base.Task, errors: set[tuple[str, int]],
            detail: np.random.Generator | None = None) -> list[dict[str, Any]]:
    """The conversation for ``task`` with exactly the given error sites."""
    detail = detail if detail is not None else np.random.default_rng(0)
    fake = [(str(detail.choice(_FAKE_WORDS)) + "_" + str(detail.choice(_FAKE_WORDS)),
             int(detail.integers(1000, 100000))) for _ in range(CLAIM_SITES)]
    pages = [self.corpus.page(pid) for pid in task.constraints["pages"]]
    searched = [i for i in range(len(pages)) if ("missed_search", i) not in errors]
    opened = [i for i in searched if ("before_reading", i) not in errors]

    headings = "under the headings " + _join(HEADINGS[task.subtask])
    plan = ("Plan:\n"
            + "".join(f"{k}. Search the documentation for `{p.id}`.\n"
                      for k, p in enumerate(pages, 1))
            + f"{len(pages) + 1}. Open the pages found and note their key facts.\n"
            + f"{len(pages) + 2}. Write the answer from what the pages say, {headings}.")
    messages: list[dict[str, Any]] = [{"role": "user", "content": task.query}]
    turn = 0
    queries = ([{"query": self.search_query(pages[i]), "k": SEARCH_K} for i in searched]
               or [{"query": task.constraints["module"], "k": SEARCH_K}])
    self._turn(messages, turn, plan, [("web_search", a) for a in queries])
    if opened:
      turn += 1
      self._turn(messages, turn,
                 f"Reading the pages the searches found, to write the answer {headings}.",
                 [("open_page", {"page_id": pages[i].id}) for i in opened])
    claims = [fake[j] for j in range(CLAIM_SITES) if ("unsupported_claim", j) in errors]
    answer = self.answer(task, pages, searched, claims)
    if ("truncation", 0) in errors:
      answer = truncate_mid_sentence(answer)
    messages.append({"role": "assistant", "content": answer})
    return messages

  def _turn(self, messages: list[dict[str, Any]], turn: int, content: str,
            calls: list[tuple[str, dict[str, Any]]]) -> None:
    ids = [f"call_{turn}_{k}" for k in range(len(calls))]
    messages.append({"role": "assistant", "content": content, "tool_calls": [
        {"id": i, "type": "function",
         "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}
        for i, (name, args) in zip(ids, calls)]})
    for i, (name, args) in zip(ids, calls):
      result = self.source.call_sync(name, args)
      messages.append({"role": "tool", "tool_call_id": i, "content": result.text})

  def answer(self, task: base.Task, pages: list[corpus_lib.Page], researched: list[int],
             fakes: list[tuple[str, int]]) -> str:
    """The report: per page its signature and key facts, in the kind's structure."""
    facts = task.constraints["facts"]
    module = task.constraints["module"]
    names = tasks_lib.format_names([p.id for p in pages])
    blocks = []
    for i, p in enumerate(pages):
      if i not in researched:
        blocks.append(f"`{p.id}` is part of the {module} module; its documentation was not "
                      f"consulted here.")
        continue
      lines = [f"**`{p.id}`**"]
      if p.signature:
        lines.append(f"Signature: `{p.signature}`.")
      own = [f["text"] for f in facts if f["page"] == p.id]
      if _sentence(p.summary()) not in own:
        lines.append(f"In the documentation's words: {_sentence(p.summary())}")
      lines += own
      blocks.append(" ".join(lines))
    for name, number in fakes:
      blocks.append(f"Note that `{pages[0].id}` also accepts a `{name}` argument, which caps "
                    f"each call at {number} items.")
    body = "\n\n".join(blocks)
    kind = task.subtask
    if kind == "technical_writing":
      overview, usage, caveats = HEADINGS[kind]
      return (f"## {overview}\n\nThis guide covers {names} from the `{module}` module, as their "
              f"documentation describes them.\n\n## {usage}\n\n{body}\n\n## {caveats}\n\n"
              + "\n".join(f"- Check the documented arguments and defaults of `{p.id}` before "
                          f"relying on them." for p in pages))
    if kind == "ideation":
      ideas = [f"1. Build a small helper around `{pages[0].id}` that applies it across a whole "
               f"data set, as described above.",
               f"2. Combine `{pages[0].id}` with `{pages[1].id}` in one workflow, so that each "
               f"covers what the other does not.",
               f"3. Write a test suite that exercises `{pages[-1].id}` on the edge cases its "
               f"documentation mentions."]
      background, ideas_heading = HEADINGS[kind]
      return (f"## {background}\n\nWhat the documentation says about {names}:\n\n{body}\n\n"
              f"## {ideas_heading}\n\n" + "\n".join(ideas))
    summary = "\n".join(f"- `{p.id}`: {_sentence(p.summary())}" if i in researched else
                        f"- `{p.id}`: not researched." for i, p in enumerate(pages))
    explanation, comparison, summary_heading = HEADINGS[kind]
    return (f"## {explanation}\n\n{body}\n\n## {comparison}\n\n{names} belong to the "
            f"`{module}` module and serve related but different purposes, as the details above "
            f"show.\n\n## {summary_heading}\n\n{summary}")


def _join(words: tuple[str, ...]) -> str:
  return ", ".join(words[:-1]) + " and " + words[-1]


def _sentence(text: str) -> str:
  text = text.strip()
  return text if text.endswith((".", "!", "?")) else text + "."


def truncate_mid_sentence(text: str, share: float = TRUNCATE_AT) -> str:
  """The first ``share`` of ``text``, cut at a word boundary, without closing punctuation."""
  cut = text[:max(1, int(len(text) * share))]
  if " " in cut:
    cut = cut[:cut.rindex(" ")]
  return cut.rstrip(" .!?:)`*\n")


def make_expert(index: search.SearchIndex) -> Expert:
  return Expert(index)

