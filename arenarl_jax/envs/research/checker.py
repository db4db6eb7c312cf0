"""The research checker: deep-research rubric scores (0-10) from a trajectory and its task.

Path (what the agent did):
- ``framework``: the first reply lays out a plan (at least two listed steps) and research starts
  before any answer: 10 with a listed plan, 6 with prose only, 3 with none, 0 when the agent
  answered without calling a tool.
- ``tool_usage``: search effort without redundancy: 10, minus 3 per needed page that a search
  found but the agent never opened (answering before reading), minus 2 per repeated call (same
  query terms or same page), minus 1 per failed call; 0 with no successful call.
- ``coverage``: per needed page, 10 when opened, 5 when only seen in search results, 0 otherwise;
  averaged.

Answer (the final report):
- ``relevance``: the share of the task's pages the answer names, times 10, minus 3 when the kind's
  requirement (its sections, or at least three ideas) is not met.
- ``accuracy``: claims are checked against the text the tools actually returned: code spans,
  dotted identifiers and signatures, and numbers of two or more digits that are not in the
  question. 10 minus 3 per unsupported claim; 1 when the answer states neither such a claim nor a
  key fact (nothing beyond the question to be accurate about).
- ``depth``: the share of the task's key facts the answer states (a fact counts when all but one
  of its distinctive terms appear), times 10.
- ``clarity``: 10 minus 3 per missing required section, 3 when there are fewer than two sections,
  3 when the answer stops mid-sentence, 1 per paragraph over 1,200 characters, 2 when under 60
  words.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping, Sequence

from arenarl_jax import types
from arenarl_jax.envs import base
from arenarl_jax.envs.research import search, valid

_CODE_RE = re.compile(r"``(.+?)``|`([^`\n]+)`")
_DOTTED_RE = re.compile(r"\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?:\([^()\n]*\))?")
_NUMBER_RE = re.compile(r"(?<![\w.])\d{2,}(?:\.\d+)?(?![\w])")
_LIST_MARK_RE = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+", re.MULTILINE)
_PLAN_ITEM_RE = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+\S", re.MULTILINE)
LONG_PARAGRAPH = 1200
MIN_CLEAR_WORDS = 60


@dataclasses.dataclass
class Research:
  """What a trajectory did with the tools."""

  searched: set[str]  # page ids that appeared in successful search results
  opened: set[str]  # page ids opened successfully
  retrieved: str  # all successful tool result text
  calls_ok: int
  calls_failed: int
  repeats: int
  first_step_calls: int
  plan: str


def _is_error(text: str) -> bool:
  return text.lstrip().startswith("Error:")


def research_of(steps: Sequence[types.Step]) -> Research:
  r = Research(set(), set(), "", 0, 0, 0, 0, "")
  seen: set[tuple[str, Any]] = set()
  texts = []
  answer_steps = steps[:-1] if steps and not steps[-1].tool_calls else steps
  for k, step in enumerate(answer_steps):
    if k == 0:
      r.first_step_calls = len(step.tool_calls)
      r.plan = f"{step.reasoning}\n{step.content}"
    for j, call in enumerate(step.tool_calls):
      result = step.tool_results[j] if j < len(step.tool_results) else "Error: no result"
      if _is_error(result):
        r.calls_failed += 1
        continue
      r.calls_ok += 1
      texts.append(result)
      args = dict(call.arguments)
      if call.name == "web_search":
        key: Any = frozenset(search.tokenize(str(args.get("query", ""))))
        r.searched.update(search.result_page_ids(result))
      else:
        key = str(args.get("page_id", "")).strip()
        if call.name == "open_page":
          r.opened.add(key)
      if (call.name, key) in seen:
        r.repeats += 1
      seen.add((call.name, key))
  r.retrieved = "\n".join(texts)
  return r


def _squash(text: str) -> str:
  return re.sub(r"[\s`]+", "", text)


def claims(answer: str, question: str) -> list[str]:
  """Checkable claims in an answer that the question does not already state."""
  out: list[str] = []
  q = _squash(question)
  for m in _CODE_RE.finditer(answer):
    out.append(m.group(1) or m.group(2))
  rest = _CODE_RE.sub(" ", answer)
  rest = _LIST_MARK_RE.sub("", rest)
  # Dotted names, but not abbreviations such as "e.g" or "i.e" (every part one or two letters).
  out.extend(m.group(0) for m in _DOTTED_RE.finditer(rest)
             if any(len(part) > 2 for part in m.group(0).split("(")[0].split(".")))
  out.extend(m.group(0) for m in _NUMBER_RE.finditer(rest))
  kept = []
  for c in dict.fromkeys(c.strip() for c in out):
    s = _squash(c)
    if s and s not in q:
      kept.append(c)
  return kept


def unsupported(answer: str, question: str, retrieved: str) -> list[str]:
  """The claims that appear nowhere in the retrieved text (whitespace and backticks ignored)."""
  text = _squash(retrieved)
  return [c for c in claims(answer, question) if _squash(c) not in text]


def fact_covered(fact: Mapping[str, Any], answer_terms: set[str]) -> bool:
  terms = list(fact["terms"])
  return sum(t in answer_terms for t in terms) >= max(1, len(terms) - 1)


def _clip(x: float) -> float:
  return float(min(10.0, max(0.0, x)))


def score(task: base.Task, steps: Sequence[types.Step]) -> dict[str, dict[str, float]]:
  """The rubric scores of one trajectory's steps for ``task``."""
  c = task.constraints
  pages = list(c["pages"])
  r = research_of(steps)
  answer = steps[-1].content if steps and not steps[-1].tool_calls else ""

  if not steps or r.first_step_calls == 0:
    framework = 0.0
  elif len(_PLAN_ITEM_RE.findall(r.plan)) >= 2:
    framework = 10.0
  else:
    framework = 6.0 if r.plan.strip() else 3.0
  unread = sum(1 for p in pages if p in r.searched and p not in r.opened)
  tool_usage = 0.0 if r.calls_ok == 0 else _clip(10 - 3 * unread - 2 * r.repeats
                                                  - r.calls_failed)
  coverage = 10 * sum(1.0 if p in r.opened else 0.5 if p in r.searched else 0.0
                      for p in pages) / len(pages)

  found = valid.sections(answer)
  required = list(c.get("sections", ()))
  missing = [s for s in required if not valid.has_section(found, s)]
  kind_ok = not missing and valid.list_items(answer) >= int(c.get("min_ideas", 0))
  named = sum(1 for p in pages if p in answer)
  relevance = _clip(10 * named / len(pages) - (0 if kind_ok else 3)) if answer.strip() else 0.0

  terms = set(search.tokenize(answer))
  facts = list(c["facts"])
  covered = sum(fact_covered(f, terms) for f in facts)
  depth = 10 * covered / len(facts) if facts else 0.0

  stated = claims(answer, task.query)
  bad = unsupported(answer, task.query, r.retrieved)
  if not answer.strip():
    accuracy = 0.0
  elif not stated and not covered:
    accuracy = 1.0  # nothing beyond the question: nothing to be accurate about
  else:
    accuracy = _clip(10 - 3 * len(bad))

  clarity = _clarity(answer, missing) if answer.strip() else 0.0
  return {"path": {"framework": framework, "tool_usage": tool_usage, "coverage": coverage},
          "answer": {"relevance": relevance, "accuracy": accuracy, "depth": depth,
                     "clarity": clarity}}


def _clarity(answer: str, missing: Sequence[str]) -> float:
  text = answer.strip()
  penalty = 3 * len(missing)
  if len([h for h, body in valid.sections(text) if body]) < 2:
    penalty += 3
  last = text.splitlines()[-1].rstrip()
  if not re.search(r"[.!?:)`*\]]$", last):
    penalty += 3  # stops mid-sentence
  penalty += sum(len(p) > LONG_PARAGRAPH for p in re.split(r"\n\s*\n", text))
  if len(text.split()) < MIN_CLEAR_WORDS:
    penalty += 2
  return _clip(10 - penalty)
