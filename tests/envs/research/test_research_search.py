"""The research tools in-process: ranking, results, argument checks, not found, truncation."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest

from arenarl_jax.envs import base, inprocess
from arenarl_jax.envs.research import search, tasks


def test_known_item_queries_find_their_page_in_the_top_3(corpus, index):
  rng = np.random.default_rng(0)
  picks = rng.choice(len(corpus), 200, replace=False)
  hits = 0
  for i in picks:
    page = corpus.pages[int(i)]
    query = tasks.known_item_query(page, rng)
    assert page.kind == "module" or page.id not in query  # from the page, without its name
    hits += page.id in [p.id for p, _ in index.search(query, 3)]
  assert hits >= 180, f"{hits}/200 known-item queries found their page in the top 3"


def test_tokenize_splits_identifiers_and_drops_stopwords():
  assert search.tokenize("The default_factory of json.dumps()") == [
      "default_factory", "default", "factory", "json", "dumps"]


def test_web_search_result_format_and_k(index):
  source = index.tool_source()
  r = source.call_sync("web_search", {"query": "serialize obj to a JSON formatted str", "k": 3})
  assert r.ok and r.error_kind is None
  ids = search.result_page_ids(r.text)
  assert len(ids) == 3 and ids[0] == "json.dumps"
  assert r.text.splitlines()[1] == "1. json.dumps function [page_id: json.dumps]"
  assert "Serialize ``obj`` to a JSON formatted ``str``" in r.text  # the snippet
  default = source.call_sync("web_search", '{"query": "heap queue priority"}')
  assert len(search.result_page_ids(default.text)) == search.DEFAULT_K
  # Ranked by score, deterministic.
  ranked = index.search("heap queue priority", 10)
  assert [s for _, s in ranked] == sorted((s for _, s in ranked), reverse=True)
  assert ranked == index.search("heap queue priority", 10)


def test_open_page_and_truncation(index, corpus):
  source = index.tool_source()
  short = source.call_sync("open_page", {"page_id": "json.dumps"})
  page = corpus.page("json.dumps")
  assert short.ok and short.text == f"# {page.title} [page_id: json.dumps]\n\n{page.text}"
  long_page = next(p for p in corpus.pages if len(p.text) > search.PAGE_CHARS + 100)
  r = source.call_sync("open_page", {"page_id": long_page.id})
  assert r.ok and long_page.text[:search.PAGE_CHARS] in r.text
  assert long_page.text[:search.PAGE_CHARS + 50] not in r.text
  missing = len(long_page.text) - search.PAGE_CHARS
  assert r.text.endswith(f"[truncated: {missing} more characters]")
  assert " json.dumps " not in f" {search.visible_text(page)} "  # only the text, not the title


@pytest.mark.parametrize("name, args, kind, words", [
    ("web_search", {}, base.BAD_ARGUMENTS, "missing required argument(s): 'query'"),
    ("web_search", {"query": ""}, base.BAD_ARGUMENTS, "'query' must not be empty"),
    ("web_search", {"query": "json", "k": 0}, base.BAD_ARGUMENTS, "'k' must be >= 1"),
    ("web_search", {"query": "json", "k": 11}, base.BAD_ARGUMENTS, "'k' must be <= 10"),
    ("web_search", {"query": "json", "k": "3"}, base.BAD_ARGUMENTS, "'k' must be integer"),
    ("web_search", {"query": "json", "limit": 3}, base.BAD_ARGUMENTS, "'limit' not accepted"),
    ("web_search", "{not json", base.BAD_ARGUMENTS, "not valid JSON"),
    ("web_search", {"query": "qwzxv plokmn"}, base.NOT_FOUND, "no pages match"),
    ("web_search", {"query": "the of and"}, base.NOT_FOUND, "no pages match"),
    ("open_page", {"page_id": 7}, base.BAD_ARGUMENTS, "'page_id' must be string"),
    ("open_page", {"page_id": "json.dumpz"}, base.NOT_FOUND, "did you mean json.dump, json.dumps"),
    ("open_page", {"page_id": "qqqqqqqq"}, base.NOT_FOUND, "use web_search to find ids"),
    ("browse", {"url": "x"}, base.UNKNOWN_TOOL, "available tools: open_page, web_search"),
])
def test_errors_are_observations(index, name, args, kind, words):
  r = index.tool_source().call_sync(name, args)
  assert not r.ok and r.error_kind == kind and r.text.startswith("Error: ")
  assert words in r.text


def test_async_call_equals_sync_and_schemas(index):
  source = index.tool_source()
  assert isinstance(source, base.ToolSource)
  assert [t["name"] for t in source.tools()] == ["web_search", "open_page"]
  for t in source.tools():
    assert t["parameters"]["type"] == "object" and t["description"]
  for name, args in (("web_search", {"query": "temporary directory", "k": 4}),
                     ("open_page", {"page_id": "heapq.heappush"}),
                     ("open_page", {"page_id": "nope"})):
    a = asyncio.run(source.call(name, args, timeout=1.0))
    b = source.call_sync(name, args)
    assert (a.text, a.ok, a.error_kind) == (b.text, b.ok, b.error_kind)


def test_page_text_fits_the_default_tool_limit(index, corpus):
  longest = max(corpus.pages, key=lambda p: len(p.text))
  assert len(search.page_view(longest)) < inprocess.DEFAULT_MAX_CHARS
