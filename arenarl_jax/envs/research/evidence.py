"""What a research trajectory retrieved and what its answer states: the truth both the checker
(partial credit) and the verifier (all or nothing) grade against. No scoring happens here.

Retrieval (:func:`research_of`): the pages a trajectory's successful calls listed in search
results or opened, the text it got back about each page (the opened page and its search
snippets), and which calls served the task, i.e. retrieved a page the task needs.

Answer (:class:`Answer`): its paragraphs and list items, and which needed page each part of them
is about (the page named nearest before it); the checkable claims it states beyond the question;
which key facts it states *about their own page*; and whether it is pasted tool output
(more than :data:`PASTED_SHARE` of its words inside verbatim runs of :data:`COPY_RUN` words of the
retrieved text; the expert's reports quote their facts verbatim and stay below that).
"""
from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any, Mapping, Sequence

from arenarl_jax import types
from arenarl_jax.envs.research import search

_CODE_RE = re.compile(r"``(.+?)``|`([^`\n]+)`")
_DOTTED_RE = re.compile(r"\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?:\([^()\n]*\))?")
_NUMBER_RE = re.compile(r"(?<![\w.])\d{2,}(?:\.\d+)?(?![\w])")
_LIST_MARK_RE = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+", re.MULTILINE)
_RESULT_LINE_RE = re.compile(r"^\d+\. .*\[page_id: ([^\]\s]+)\]\s*$")
_WORD_RE = re.compile(r"[a-z0-9_]+")
_HEADING_START_RE = re.compile(r"\s{0,3}#{1,6}\s")
_SENTENCE_END_RE = re.compile(r"[.!?]['\")`*]*\s+")
_JOINER_RE = re.compile(r"[\s,`*/]*(?:and|or|vs\.?|versus)?[\s,`*/]*", re.IGNORECASE)
_LEAD_RE = re.compile(r"[\s*_>#+\-\d.)]*(?:\w+[\s,]+){0,3}")  # "- ", "**", "The ", "1. Use "
COPY_RUN = 8  # words: a verbatim run this long of the retrieved text counts as pasted
PASTED_SHARE = 0.9  # above this share of pasted words an answer is tool output, not a report


@dataclasses.dataclass
class Research:
  """What a trajectory did with the tools, for the task's needed pages."""

  searched: set[str]  # page ids listed in successful search results
  opened: set[str]  # page ids opened successfully
  about: dict[str, str]  # page id -> the text retrieved about it (its opened page, its snippets)
  retrieved: str  # all successful tool result text
  calls_ok: int
  calls_failed: int
  repeats: int  # calls with the same query terms or page as an earlier one
  serving: int  # successful calls that listed or opened a needed page
  first_step_calls: int
  plan: str  # the first reply's reasoning and content


def is_error(text: str) -> bool:
  return text.lstrip().startswith("Error:")


def search_entries(text: str) -> list[tuple[str, str]]:
  """(page id, its title line and snippet) for each hit of a ``web_search`` result text."""
  out: list[tuple[str, list[str]]] = []
  for line in text.splitlines():
    m = _RESULT_LINE_RE.match(line)
    if m:
      out.append((m.group(1), [line]))
    elif out:
      out[-1][1].append(line)
  return [(pid, "\n".join(lines)) for pid, lines in out]


def research_of(steps: Sequence[types.Step], needed: Sequence[str]) -> Research:
  """The retrieval of ``steps``; a call serves the task when it lists or opens a needed page."""
  r = Research(set(), set(), {}, "", 0, 0, 0, 0, 0, "")
  need = set(needed)
  seen: set[tuple[str, Any]] = set()
  texts = []
  for k, step in enumerate(steps):
    if k == 0:
      r.first_step_calls = len(step.tool_calls)
      r.plan = f"{step.reasoning}\n{step.content}"
    for j, call in enumerate(step.tool_calls):
      result = step.tool_results[j] if j < len(step.tool_results) else "Error: no result"
      if is_error(result):
        r.calls_failed += 1
        continue
      r.calls_ok += 1
      texts.append(result)
      args = dict(call.arguments)
      got: list[str] = []
      if call.name == "web_search":
        key: Any = frozenset(search.tokenize(str(args.get("query", ""))))
        for pid, entry in search_entries(result):
          got.append(pid)
          r.about[pid] = r.about.get(pid, "") + "\n" + entry
        r.searched.update(got)
      else:
        key = str(args.get("page_id", "")).strip()
        if call.name == "open_page":
          got.append(key)
          r.opened.add(key)
          r.about[key] = r.about.get(key, "") + "\n" + result
      r.serving += bool(need.intersection(got))
      if (call.name, key) in seen:
        r.repeats += 1
      seen.add((call.name, key))
  r.retrieved = "\n".join(texts)
  return r


def squash(text: str) -> str:
  return re.sub(r"[\s`]+", "", text)


def claims(answer: str, question: str) -> list[str]:
  """Checkable claims in an answer that the question does not already state: code spans, dotted
  identifiers and signatures, and numbers of two or more digits."""
  out: list[str] = []
  q = squash(question)
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
    s = squash(c)
    if s and s not in q:
      kept.append(c)
  return kept


def unsupported(answer: str, question: str, retrieved: str) -> list[str]:
  """The claims that appear nowhere in the retrieved text (whitespace and backticks ignored)."""
  text = squash(retrieved)
  return [c for c in claims(answer, question) if squash(c) not in text]


def fact_covered(fact: Mapping[str, Any], answer_terms: set[str]) -> bool:
  """Whether text with these terms states the fact: all but one of its distinctive terms."""
  terms = list(fact["terms"])
  return sum(t in answer_terms for t in terms) >= max(1, len(terms) - 1)


def _name_re(page_id: str) -> re.Pattern:
  last = re.escape(page_id.rsplit(".", 1)[-1])
  return re.compile(rf"(?<![\w.]){re.escape(page_id)}(?![\w])|`{last}(?=[`(])")


def mentions(text: str, pages: Sequence[str]) -> list[tuple[int, int, str]]:
  """(start, end, page id) of each place ``text`` names a needed page: its dotted id, or its
  last part as code (```dumps``` or ```dumps(...)```), in order. A bare ``dumps()`` in prose is
  not a name: documentation mentions its neighbours that way (``the wrap() and fill() methods``)."""
  return sorted((m.start(), m.end(), pid) for pid in pages for m in _name_re(pid).finditer(text))


def _words(text: str) -> list[str]:
  return _WORD_RE.findall(text.lower())


@functools.lru_cache(maxsize=64)
def _runs(retrieved: str) -> frozenset[tuple[str, ...]]:
  w = _words(retrieved)
  return frozenset(tuple(w[i:i + COPY_RUN]) for i in range(len(w) - COPY_RUN + 1))


def pasted_share(answer: str, retrieved: str) -> float:
  """The share of the answer's words inside verbatim runs of COPY_RUN words of ``retrieved``."""
  w = _words(answer)
  if not w:
    return 0.0
  runs = _runs(retrieved)
  covered = [False] * len(w)
  for i in range(len(w) - COPY_RUN + 1):
    if tuple(w[i:i + COPY_RUN]) in runs:
      covered[i:i + COPY_RUN] = [True] * COPY_RUN
  return sum(covered) / len(w)


@dataclasses.dataclass(frozen=True)
class Unit:
  """A paragraph, or one item of a list, and the needed pages its sentences are about."""

  text: str
  groups: tuple[tuple[int, frozenset[str]], ...]  # (start, pages) of each run of subject names
  named: frozenset[str]  # every needed page it names
  fallback: frozenset[str]  # without subject names: its paragraph's, section's or answer's pages

  def about_at(self, pos: int) -> frozenset[str]:
    """The pages the sentence at ``pos`` is about: the nearest run of subject names (``A and
    B`` together) before that sentence, else the unit's first run, else the fallback. Names
    inside the sentence are part of what it says ("**`A`** ... It wraps `B()`." stays about A)."""
    start = _sentence_start(self.text, pos)
    before = [pages for at, pages in self.groups if at < start]
    if before:
      return before[-1]
    return self.groups[0][1] if self.groups else self.fallback

  @property
  def about(self) -> frozenset[str]:
    return self.named or self.fallback


def _sentence_start(text: str, pos: int) -> int:
  return max((m.end() for m in _SENTENCE_END_RE.finditer(text, 0, pos)), default=0)


def _groups(text: str, pages: Sequence[str]) -> tuple[tuple[int, frozenset[str]], ...]:
  """Runs of subject names: a page's dotted id anywhere, or its short name leading a sentence
  (documentation text names its neighbours in passing: "return a `Differ`-style delta")."""
  out: list[list[Any]] = []  # [start, end, pages]
  for start, end, pid in mentions(text, pages):
    if "." not in text[start:end] and not _LEAD_RE.fullmatch(
        text[_sentence_start(text, start):start]):
      continue
    if out and (start < out[-1][1] or _JOINER_RE.fullmatch(text[out[-1][1]:start])):
      out[-1][1] = max(out[-1][1], end)
      out[-1][2].add(pid)
    else:
      out.append([start, end, {pid}])
  return tuple((start, frozenset(p)) for start, _, p in out)


def _first_term(text: str, terms: Sequence[str]) -> int:
  """Where the first of ``terms`` (search.tokenize's lower-cased words) occurs in ``text``."""
  low = text.lower()
  found = [re.search(rf"(?<![a-z0-9]){re.escape(t)}(?![a-z0-9])", low) for t in terms]
  return min((m.start() for m in found if m), default=0)


class Answer:
  """A final answer read against a task's needed pages, key facts and the trajectory's retrieval.

  The answer is read in units (paragraphs, and each item of a list); a sentence of a unit is
  about the needed pages named nearest before it (see Unit.about_at). A key fact is *stated*
  when, among the units that cover it (fact_covered), one of those covering most of its terms is
  about the fact's own page where the fact starts; it is *misattributed* when those are all about
  other needed pages; a stated fact is *grounded* when the text this trajectory retrieved about
  its page covers it too. A claim is *misattributed* when the text retrieved about the pages its
  sentence is about lacks it and the text retrieved about another needed page has it.
  """

  def __init__(self, text: str, question: str, pages: Sequence[str],
               facts: Sequence[Mapping[str, Any]], research: Research):
    self.text = text
    self.pages = list(pages)
    self.research = research
    self.units = _units(text, self.pages)
    terms = [set(search.tokenize(u.text)) for u in self.units]
    self.stated: list[bool] = []
    self.misattributed: list[bool] = []  # per key fact
    for fact in facts:
      hits = [(sum(t in ts for t in fact["terms"]), u.about_at(_first_term(u.text, fact["terms"])))
              for u, ts in zip(self.units, terms) if fact_covered(fact, ts)]
      best = [about for n, about in hits if n == max(hits)[0]] if hits else []
      own = any(fact["page"] in about for about in best)
      self.stated.append(own)
      self.misattributed.append(not own and any(best))
    retrieved_terms = {pid: set(search.tokenize(text)) for pid, text in research.about.items()}
    self.grounded = [said and fact_covered(f, retrieved_terms.get(f["page"], set()))
                     for f, said in zip(facts, self.stated)]
    self.claims = claims(text, question)
    self.unsupported = unsupported(text, question, research.retrieved)
    self.misattributed_claims = self._misattributed_claims(question)

  def _misattributed_claims(self, question: str) -> list[str]:
    about_text = {pid: squash(self.research.about.get(pid, "")) for pid in self.pages}
    out = []
    for unit in self.units:
      for c in claims(unit.text, question):
        about = unit.about_at(max(0, unit.text.find(c)))
        s = squash(c)
        if not about or c in self.unsupported or any(s in about_text[pid] for pid in about):
          continue
        if any(s in about_text[pid] for pid in self.pages if pid not in about):
          out.append(c)
    return list(dict.fromkeys(out))

  @property
  def misattributed_facts(self) -> int:
    return sum(self.misattributed)

  def addresses(self, page_id: str, facts: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the answer says something checkable about the page and gets none of it wrong: it
    states one of the page's key facts about it, grounded in what was retrieved, and attributes
    none of them to another page (for a page without key facts: a claim of the page's retrieved
    text in a unit about it)."""
    own = [k for k, f in enumerate(facts) if f["page"] == page_id]
    if own:
      return any(self.grounded[k] for k in own) and not any(self.misattributed[k] for k in own)
    text = squash(self.research.about.get(page_id, ""))
    return any(page_id in u.about and squash(c) in text
               for u in self.units for c in claims(u.text, ""))

  @functools.cached_property
  def pasted(self) -> bool:
    """Whether the answer is tool output rather than a report (see PASTED_SHARE)."""
    return pasted_share(self.text, self.research.retrieved) > PASTED_SHARE


def _units(text: str, pages: Sequence[str]) -> list[Unit]:
  """The answer's units; one without subject names falls back to the subjects of its paragraph,
  of its section (a heading and the paragraphs up to the next) or of the whole answer."""
  blocks = [[(u, _groups(u, pages)) for u in _items(b)]
            for b in re.split(r"\n\s*\n", text) if b.strip()]
  subjects = [set().union(*(p for _, groups in b for _, p in groups)) for b in blocks]
  everywhere = set().union(*subjects) if subjects else set()
  out: list[Unit] = []
  start = 0
  for end in range(1, len(blocks) + 1):
    if end < len(blocks) and not _HEADING_START_RE.match(blocks[end][0][0]):
      continue
    section = set().union(*subjects[start:end]) or everywhere
    for k in range(start, end):
      out.extend(Unit(u, groups, frozenset(pid for _, _, pid in mentions(u, pages)),
                      frozenset(subjects[k] or section)) for u, groups in blocks[k])
    start = end
  return out


def _items(block: str) -> list[str]:
  """A list's items (each with its continuation lines), or the block itself."""
  lines = block.strip("\n").splitlines()
  if not _LIST_MARK_RE.match(lines[0]):
    return [block]
  items: list[list[str]] = []
  for line in lines:
    if _LIST_MARK_RE.match(line) or not items:
      items.append([line])
    else:
      items[-1].append(line)
  return ["\n".join(i) for i in items]
