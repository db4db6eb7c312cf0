"""The research tools: ``web_search`` (BM25 over the corpus, via ``bm25s``) and ``open_page``.

``web_search(query, k)`` ranks pages by BM25 over each page's title and text and returns, for each
hit, its rank, page id, title and a snippet (the page's passage that shares the most query terms).
``open_page(page_id)`` returns the page's title and text, truncated (not summarised) at
:data:`PAGE_CHARS` characters with a note saying how much was left out.

Both are :class:`~arenarl_jax.envs.inprocess.Tool` definitions, so the in-process tool source (and
the MCP server built over it) checks their arguments against the schemas and turns failures into
error observations: an unknown page id or a query without results is ``not_found``.
"""
from __future__ import annotations

import difflib
import re

import bm25s
from bm25s.stopwords import STOPWORDS_EN

from arenarl_jax.envs import base, inprocess
from arenarl_jax.envs.research import corpus as corpus_lib

PAGE_CHARS = 2500  # open_page truncates page text here (the reference summarises longer pages)
SNIPPET_CHARS = 240
MAX_K = 10
DEFAULT_K = 5

_STOP = frozenset(STOPWORDS_EN)
_WORD_RE = re.compile(r"[A-Za-z0-9_]+")


def tokenize(text: str) -> list[str]:
  """Lower-cased words; an identifier with underscores also yields its parts."""
  out = []
  for word in _WORD_RE.findall(text.lower()):
    parts = [p for p in word.split("_") if p]
    if len(parts) > 1:
      out.append(word.strip("_"))
    out.extend(parts)
  return [t for t in out if len(t) > 1 and t not in _STOP]


class SearchIndex:
  """A BM25 index over a corpus's pages, and the two tools over it."""

  def __init__(self, corpus: corpus_lib.Corpus):
    self.corpus = corpus
    self._retriever = bm25s.BM25()
    # The title (the dotted name, twice as weighty) and the body.
    docs = [tokenize(f"{p.id} {p.id} {p.text}") for p in corpus.pages]
    self._retriever.index(docs, show_progress=False)

  def search(self, query: str, k: int = DEFAULT_K) -> list[tuple[corpus_lib.Page, float]]:
    """The top ``k`` pages with a positive score, best first (ties keep corpus order)."""
    terms = tokenize(query)
    if not terms:
      return []
    k = max(1, min(k, len(self.corpus)))
    docs, scores = self._retriever.retrieve([terms], k=k, show_progress=False)
    hits = sorted((-round(float(s), 5), int(d)) for d, s in zip(docs[0], scores[0]) if s > 0)
    # Sorted again so that equal scores keep corpus order whatever the backend did.
    return [(self.corpus.pages[d], -s) for s, d in hits]

  def snippet(self, page: corpus_lib.Page, query: str) -> str:
    terms = set(tokenize(query))
    best = max(page.passages, key=lambda p: len(terms & set(tokenize(p))), default="")
    text = " ".join(best.split())
    return text if len(text) <= SNIPPET_CHARS else text[:SNIPPET_CHARS - 3].rstrip() + "..."

  # --- tool functions -------------------------------------------------------------------------

  def web_search(self, query: str, k: int = DEFAULT_K) -> str:
    hits = self.search(query, k)
    if not hits:
      raise inprocess.ToolError(base.NOT_FOUND, f"no pages match {query!r}; try other keywords")
    lines = [f"Results for {query!r} ({len(hits)}):"]
    for rank, (page, _) in enumerate(hits, 1):
      lines.append(f"{rank}. {page.title} [page_id: {page.id}]\n   {self.snippet(page, query)}")
    return "\n".join(lines)

  def open_page(self, page_id: str) -> str:
    page = self.corpus.page(page_id.strip())
    if page is None:
      close = difflib.get_close_matches(page_id.strip(), [p.id for p in self.corpus.pages], n=3)
      hint = f"; did you mean {', '.join(close)}?" if close else "; use web_search to find ids"
      raise inprocess.ToolError(base.NOT_FOUND, f"no page with id {page_id!r}{hint}")
    return page_view(page)

  def tools(self) -> list[inprocess.Tool]:
    return [
        inprocess.Tool(
            name="web_search",
            description=("Search the Python standard-library documentation. Returns ranked pages "
                         "with their page_id and a snippet."),
            parameters={
                "type": "object",
                "properties": {
                    "query": {"type": "string", "minLength": 1, "maxLength": 300,
                              "description": "keywords to search for"},
                    "k": {"type": "integer", "minimum": 1, "maximum": MAX_K,
                          "description": f"number of results (default {DEFAULT_K})"},
                },
                "required": ["query"],
            },
            fn=self.web_search),
        inprocess.Tool(
            name="open_page",
            description=(f"Open a documentation page by its page_id (from web_search). Text longer "
                         f"than {PAGE_CHARS} characters is truncated."),
            parameters={
                "type": "object",
                "properties": {"page_id": {"type": "string", "minLength": 1, "maxLength": 200,
                                           "description": "a page_id such as json.dumps"}},
                "required": ["page_id"],
            },
            fn=self.open_page),
    ]

  def tool_source(self, max_chars: int = inprocess.DEFAULT_MAX_CHARS
                  ) -> inprocess.InProcessToolSource:
    return inprocess.InProcessToolSource(self.tools(), max_chars=max_chars)


def page_view(page: corpus_lib.Page) -> str:
  """What ``open_page`` shows: the title line and the text, truncated at PAGE_CHARS."""
  return f"# {page.title} [page_id: {page.id}]\n\n" + inprocess.truncate(page.text, PAGE_CHARS)


def visible_text(page: corpus_lib.Page) -> str:
  """The part of a page's text that ``open_page`` shows (facts are only drawn from here)."""
  return page.text[:PAGE_CHARS]


def result_page_ids(search_text: str) -> list[str]:
  """The page ids listed in a ``web_search`` result text, in rank order."""
  return re.findall(r"\[page_id: ([^\]\s]+)\]", search_text)


def make_index(corpus: corpus_lib.Corpus) -> SearchIndex:
  return SearchIndex(corpus)

