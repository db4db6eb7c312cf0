"""The research checker: deep-research rubric scores (0-10) from a trajectory and its task.

A training reward (through the rubric judge), graded against what this trajectory itself
retrieved (evidence.py): a call serves the task when it lists or opens a page the task needs, and
an answer's facts and claims count only when its own tool results support them.

Path (what the agent did):
- ``framework``: the first reply lays out a plan (at least two listed steps) and research starts
  before any answer: 10 with a listed plan, 6 with prose only, 3 with none; 0 when the first reply
  called no tool or no call of the trajectory served the task.
- ``tool_usage``: targeted search without redundancy: 10, minus 3 per needed page that a search
  found but the agent never opened (answering before reading), minus 2 per repeated call (same
  query terms or same page), minus 1 per failed call; 0 when no call served the task (unrelated
  calls earn nothing).
- ``coverage``: per needed page, 10 when opened, 5 when only seen in search results, 0 otherwise;
  averaged.

Answer (the final report, ``envs.base.final_answer``), read as evidence.Answer reads it: each
sentence is about the needed page named nearest before it; a key fact is *stated* about a page
when, of the paragraphs and list items covering it (all but one of its distinctive terms), one
covering the most of them is about that page where the fact starts; it is *grounded* when the
text this trajectory retrieved about that page covers it too. A trajectory
that stopped at a limit, or whose last turn is an unanswered tool call, scores 0 on every answer
dimension, and so does an empty answer. An answer that is mostly pasted tool output
(``evidence.Answer.pasted``) is not a report: it addresses no page (0 on relevance, accuracy and
depth; clarity as below).
- ``relevance``: the share of the task's pages the answer addresses, times 10, minus 3 when the
  kind's requirement (its sections, or at least three ideas) is not met. A page is addressed when
  one of its key facts is stated about it and grounded, and none is stated about another page
  (a page without key facts: a claim of its retrieved text in a passage about it); naming it,
  or echoing the question, earns nothing.
- ``accuracy``: checkable claims (code spans, dotted identifiers and signatures, numbers of two
  or more digits) that the question does not state, and the key facts. 10 minus 3 per bad one: a
  claim no tool result contains, a claim found only in the text retrieved about another needed
  page than the one its sentence is about, a key fact stated only about another needed page, a
  key fact stated but not grounded (memorised, not retrieved). 0 when the answer states no
  grounded key fact and no supported claim (nothing beyond the question to be accurate about).
- ``depth``: per grounded key fact, 1 when the trajectory opened its page and 1/2 when the page
  was only listed in its search results; 10 times their sum over the number of key facts.
- ``clarity``: 10 minus 3 per missing required section, 3 when there are fewer than two sections,
  3 when the answer stops mid-sentence, 1 per paragraph over 1,200 characters, 2 when under 60
  words; at most 5 when the answer addresses none of the task's pages (however well laid out, it
  is not a clear answer to this question).
"""
from __future__ import annotations

import re
from typing import Sequence

from arenarl_jax import types
from arenarl_jax.envs import base
from arenarl_jax.envs.research import evidence, valid
from arenarl_jax.envs.research.evidence import claims, fact_covered, unsupported  # noqa: F401

_PLAN_ITEM_RE = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+\S", re.MULTILINE)
LONG_PARAGRAPH = 1200
MIN_CLEAR_WORDS = 60
OFF_TASK_CLARITY = 5.0  # the most clarity earns when the answer addresses none of the pages


def _clip(x: float) -> float:
  return float(min(10.0, max(0.0, x)))


def score(task: base.Task, trajectory: types.Trajectory) -> dict[str, dict[str, float]]:
  """The rubric scores of ``trajectory`` for ``task``."""
  pages = list(task.constraints["pages"])
  steps = trajectory.steps
  r = evidence.research_of(steps, pages)

  if not steps or r.first_step_calls == 0 or r.serving == 0:
    framework = 0.0
  elif len(_PLAN_ITEM_RE.findall(r.plan)) >= 2:
    framework = 10.0
  else:
    framework = 6.0 if r.plan.strip() else 3.0
  unread = sum(1 for p in pages if p in r.searched and p not in r.opened)
  tool_usage = 0.0 if r.serving == 0 else _clip(10 - 3 * unread - 2 * r.repeats - r.calls_failed)
  coverage = 10 * sum(1.0 if p in r.opened else 0.5 if p in r.searched else 0.0
                      for p in pages) / len(pages)
  path = {"framework": framework, "tool_usage": tool_usage, "coverage": coverage}

  return {"path": path, "answer": _answer(task, base.final_answer(trajectory), r)}


def _answer(task: base.Task, text: str, r: evidence.Research) -> dict[str, float]:
  c = task.constraints
  pages, facts = list(c["pages"]), list(c["facts"])
  if not text.strip():
    return dict.fromkeys(("relevance", "accuracy", "depth", "clarity"), 0.0)
  found = valid.sections(text)
  missing = [s for s in c.get("sections", ()) if not valid.has_section(found, s)]
  clarity = _clarity(text, missing)
  a = evidence.Answer(text, task.query, pages, facts, r)
  addressed = 0 if a.pasted else sum(a.addresses(p, facts) for p in pages)
  if not addressed:
    clarity = min(clarity, OFF_TASK_CLARITY)
  if a.pasted:
    return {"relevance": 0.0, "accuracy": 0.0, "depth": 0.0, "clarity": clarity}

  kind_ok = not missing and valid.list_items(text) >= int(c.get("min_ideas", 0))
  relevance = _clip(10 * addressed / len(pages) - (0 if kind_ok else 3))

  ungrounded = sum(s and not g for s, g in zip(a.stated, a.grounded))
  bad = len(a.unsupported) + len(a.misattributed_claims) + a.misattributed_facts + ungrounded
  supported = len(a.claims) - len(a.unsupported) - len(a.misattributed_claims)
  accuracy = _clip(10 - 3 * bad) if sum(a.grounded) + supported > 0 else 0.0

  credit = [1.0 if f["page"] in r.opened else 0.5 if f["page"] in r.searched else 0.0
            for f, g in zip(facts, a.grounded) if g]
  depth = 10 * sum(credit) / len(facts) if facts else 0.0
  return {"relevance": relevance, "accuracy": accuracy, "depth": depth, "clarity": clarity}


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
