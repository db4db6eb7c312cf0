"""Valid generation for research answers: content only (truncation is the rollout's ``length``).

Every research answer must be a non-empty report within :data:`MAX_ANSWER_CHARS`, of at least
:data:`MIN_WORDS` words, with no leaked tool-call markup, and organised in at least two Markdown
sections (``#`` headings) that each have text. Given the task's kind, the kind's structure is also
required: technical writing has the sections Overview, Usage and Caveats; ideation lists at least
three ideas (bulleted or numbered items); explanation has a Summary section.
"""
from __future__ import annotations

import re
from typing import Mapping

MAX_ANSWER_CHARS = 8000
MIN_WORDS = 40
MIN_SECTIONS = 2

_HEADING_RE = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$")
_ITEM_RE = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+\S")
_TOOL_MARKUP_RE = re.compile(r"<\s*/?\s*tool_call\s*>|\"name\"\s*:\s*\"(web_search|open_page)\"")


def sections(answer: str) -> list[tuple[str, str]]:
  """(heading, body) pairs in order; text before the first heading is not a section."""
  out: list[tuple[str, list[str]]] = []
  for line in answer.splitlines():
    m = _HEADING_RE.match(line)
    if m:
      out.append((m.group(1).strip().strip("*_`").strip(), []))
    elif out:
      out[-1][1].append(line)
  return [(h, "\n".join(body).strip()) for h, body in out]


def has_section(answer_sections: list[tuple[str, str]], name: str) -> bool:
  """Whether a heading contains ``name`` as a word (case-insensitive) and has text under it."""
  pat = re.compile(rf"\b{re.escape(name)}\b", re.IGNORECASE)
  return any(pat.search(h) and body for h, body in answer_sections)


def list_items(answer: str) -> int:
  return sum(bool(_ITEM_RE.match(line)) for line in answer.splitlines())


def valid_answer(answer: str, kind: str | None = None,
                 constraints: Mapping[str, object] | None = None) -> tuple[bool, str]:
  """(True, "") for a valid answer, else (False, why). ``kind`` adds the kind's structure."""
  if not isinstance(answer, str):
    return False, f"answer must be a string, got {type(answer).__name__}"
  text = answer.strip()
  if not text:
    return False, "empty answer"
  if len(text) > MAX_ANSWER_CHARS:
    return False, f"answer has {len(text)} characters, more than the limit {MAX_ANSWER_CHARS}"
  if _TOOL_MARKUP_RE.search(text):
    return False, "answer contains tool-call markup instead of a report"
  words = len(text.split())
  if words < MIN_WORDS:
    return False, f"answer has {words} words, fewer than {MIN_WORDS}"
  found = sections(text)
  filled = [h for h, body in found if body]
  if len(filled) < MIN_SECTIONS:
    return False, (f"answer needs at least {MIN_SECTIONS} Markdown sections ('## Heading' with "
                   f"text), found {len(filled)}")
  if kind is None:
    return True, ""
  constraints = constraints or {}
  if kind in ("technical_writing", "explanation"):
    default = ("Overview", "Usage", "Caveats") if kind == "technical_writing" else ("Summary",)
    missing = [s for s in constraints.get("sections", default) if not has_section(found, s)]
    if missing:
      return False, f"{kind} answer lacks the section(s) {', '.join(missing)}"
  elif kind == "ideation":
    need = int(constraints.get("min_ideas", 3))
    n = list_items(text)
    if n < need:
      return False, f"ideation answer lists {n} ideas, fewer than {need}"
  else:
    return False, f"unknown task kind {kind!r}"
  return True, ""
