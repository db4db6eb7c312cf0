"""Research tasks: three kinds, sizes, disjoint splits, varied wording, facts from the pages."""
from __future__ import annotations

import re

from arenarl_jax.envs.research import search, tasks


def _all(env):
  names = ["train", "sft"] + [f"{s}_{k}" for s in ("test", "valid") for k in tasks.KINDS]
  return {split: env.tasks(split) for split in names}


def test_sizes_ids_and_kinds(env):
  splits = _all(env)
  assert len(splits["train"]) >= 500
  assert sum(len(splits[f"test_{k}"]) for k in tasks.KINDS) >= 100
  for split, ts in splits.items():
    for t in ts:
      assert re.fullmatch(r"research/(technical_writing|ideation|explanation)/\d{6}", t.id)
      assert t.id.split("/")[1] == t.subtask and t.env == "research"
      if split.startswith(("test_", "valid_")):
        assert t.subtask == split.split("_", 1)[1]
  assert {t.subtask for t in splits["train"]} == set(tasks.KINDS)


def test_splits_are_disjoint(env, corpus):
  splits = _all(env)
  ids = [t.id for ts in splits.values() for t in ts]
  assert len(ids) == len(set(ids))
  combos = [(t.subtask, tuple(t.constraints["pages"])) for ts in splits.values() for t in ts]
  assert len(combos) == len(set(combos))
  held_out = tasks.test_modules(corpus, env.seed)
  for split, ts in splits.items():
    for t in ts:
      # Validation tasks come from the held-out modules too: they measure what the test does.
      assert (t.constraints["module"] in held_out) == split.startswith(("test_", "valid_")), (
          split, t.id)


def test_deterministic_from_the_seed(env, corpus):
  again = tasks.generate_tasks(corpus, 0)
  assert again["train"] == env.tasks("train") and again["test_ideation"] == env.tasks(
      "test_ideation")
  other = tasks.generate_tasks(corpus, 1)
  assert [t.query for t in other["train"]] != [t.query for t in again["train"]]


def test_wording_varies(env):
  train = env.tasks("train")
  for kind in tasks.KINDS:
    own = [t for t in train if t.subtask == kind]
    templates = {t.constraints["template"] for t in own}
    assert len(templates) == len(tasks._TEMPLATES[kind]) >= 6
    assert len({t.query for t in own}) == len(own)


def test_tasks_name_their_pages_and_facts_come_from_what_open_page_shows(env, corpus):
  for t in env.tasks("train")[::7] + env.tasks("test_explanation"):
    c = t.constraints
    assert 2 <= len(c["pages"]) <= 3 and c["facts"]
    query_terms = set(search.tokenize(t.query))
    for pid in c["pages"]:
      page = corpus.page(pid)
      assert page.module == c["module"] and f"`{pid}`" in t.query
    for f in c["facts"]:
      assert f["page"] in c["pages"]
      shown = " ".join(search.visible_text(corpus.page(f["page"])).split())
      assert " ".join(f["text"].split()) in shown
      assert len(f["terms"]) == tasks.FACT_TERMS and not set(f["terms"]) & query_terms
  writing = env.tasks("test_technical_writing")[0]
  assert writing.constraints["sections"] == ["Overview", "Usage", "Caveats"]
  assert "Overview" in writing.query and "Caveats" in writing.query


def test_sentences_skip_examples_lists_and_tables():
  text = ("Return the thing for the given key, or None.\n\n>>> f(1)\n2\n\n- a list item that is "
          "long enough to count as a sentence.\n\n| table | row that is long enough to be kept |"
          "\n\nThe second paragraph explains\nmore about the key.  It has two sentences, and this "
          "one is kept too."
          "  Short one here.")
  assert tasks.sentences(text) == ["Return the thing for the given key, or None.",
                                   "The second paragraph explains more about the key.",
                                   "It has two sentences, and this one is kept too."]
