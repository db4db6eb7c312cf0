"""The shared truth of the checker and the verifier, on hand-made trajectories and answers."""
from __future__ import annotations

from arenarl_jax import types
from arenarl_jax.envs.research import evidence

QUESTION = "Explain `json.dumps` and `json.loads`."
PAGES = ["json.dumps", "json.loads"]
FACTS = [{"page": "json.dumps", "text": "Serialize obj to a JSON formatted str.",
          "terms": ["formatted", "serialize", "str"]},
         {"page": "json.loads", "text": "Deserialize s to a Python object.",
          "terms": ["deserialize", "object", "python"]}]
DUMPS = ("# json.dumps function [page_id: json.dumps]\n\njson.dumps(obj, *, indent=None)\n\n"
         "Serialize obj to a JSON formatted str.")
LOADS = ("# json.loads function [page_id: json.loads]\n\njson.loads(s)\n\n"
         "Deserialize s to a Python object. Documents up to 1024 levels deep.")
SEARCH = ("Results for 'json dumps' (2):\n"
          "1. json.dumps function [page_id: json.dumps]\n   json.dumps(obj) Serialize obj.\n"
          "2. json module [page_id: json]\n   JSON encoder and decoder.")


def _call(name, **args):
  return types.ToolCall(name=name, arguments=args)


def _steps(*answers):
  return (types.Step(content="Plan:\n1. Search.\n2. Read.",
                     tool_calls=(_call("web_search", query="json dumps"),
                                 _call("open_page", page_id="json.loads"),
                                 _call("open_page", page_id="json.nope"),
                                 _call("web_search", query="dumps json")),
                     tool_results=(SEARCH, LOADS, "Error: no page with id 'json.nope'", SEARCH)),
          types.Step(tool_calls=(_call("open_page", page_id="json.dumps"),
                                 _call("web_search", query="zlib")),
                     tool_results=(DUMPS, "Results for 'zlib' (1):\n1. zlib module "
                                          "[page_id: zlib]\n   Compression."))) + tuple(
                                              types.Step(content=a) for a in answers)


def test_research_of_counts_calls_and_what_each_page_returned():
  r = evidence.research_of(_steps(), PAGES)
  assert r.searched == {"json.dumps", "json", "zlib"} and r.opened == {"json.loads", "json.dumps"}
  assert (r.calls_ok, r.calls_failed, r.repeats, r.first_step_calls) == (5, 1, 1, 4)
  # Both json searches list json.dumps, both opens are needed pages; the zlib search is not.
  assert r.serving == 4
  assert LOADS in r.about["json.loads"]
  assert "json.dumps(obj) Serialize obj." in r.about["json.dumps"]
  assert evidence.search_entries(SEARCH)[1] == (
      "json", "2. json module [page_id: json]\n   JSON encoder and decoder.")


def _answer(text, steps=None):
  research = evidence.research_of(steps or _steps(), PAGES)
  return evidence.Answer(text, QUESTION, PAGES, FACTS, research)


RIGHT = ("## Notes\n\n**`json.dumps`** will serialize obj to a JSON formatted str; see "
         "`json.dumps(obj, *, indent=None)`. Unlike loads(), it writes text.\n\n"
         "**`json.loads`** will deserialize s into a Python object, up to 1024 levels.")
SWAPPED = ("## Notes\n\n**`json.loads`** will serialize obj to a JSON formatted str; see "
           "`json.loads(obj, *, indent=None)`.\n\n"
           "**`json.dumps`** will deserialize s into a Python object, up to 1024 levels.")


def test_facts_and_claims_are_read_about_the_page_named_before_them():
  right = _answer(RIGHT)
  assert right.stated == right.grounded == [True, True] and right.misattributed == [False, False]
  assert right.unsupported == [] and right.misattributed_claims == []
  assert right.addresses("json.dumps", FACTS) and right.addresses("json.loads", FACTS)
  swapped = _answer(SWAPPED)
  assert swapped.stated == [False, False] and swapped.misattributed == [True, True]
  assert swapped.unsupported == ["json.loads(obj, *, indent=None)"]
  assert swapped.misattributed_claims == ["1024"]  # found only in what json.loads returned
  assert not swapped.addresses("json.dumps", FACTS)


def test_lists_sections_and_passing_mentions():
  text = ("## json.dumps\n\nIt will serialize obj to a JSON formatted str, like a `loads`-style "
          "call in reverse.\n\n## Summary\n\n- `json.loads`: deserialize s to a Python object.\n"
          "- `json.dumps`: the JSON formatted str writer that can serialize obj.")
  a = _answer(text)
  # The first paragraph names no page as its subject: its section's heading does.
  assert [sorted(u.about_at(len(u.text))) for u in a.units] == [
      ["json.dumps"], ["json.dumps"], ["json.dumps", "json.loads"], ["json.loads"],
      ["json.dumps"]]
  assert a.stated == [True, True] and a.misattributed == [False, False]


def test_a_fact_not_retrieved_is_stated_but_not_grounded():
  bare = (types.Step(content=RIGHT),)
  a = _answer(RIGHT, bare)
  assert a.stated == [True, True] and a.grounded == [False, False]
  assert len(a.unsupported) == 2 and not a.addresses("json.dumps", FACTS)


def test_pasted_share_counts_words_in_verbatim_runs():
  retrieved = "a b c d e f g h i j"
  assert evidence.pasted_share("A b c d e f g h x", retrieved) == 8 / 9
  assert evidence.pasted_share("a b c d e f g x", retrieved) == 0.0  # a run of 7 is not pasted
  assert _answer(LOADS + "\n\n" + DUMPS).pasted and not _answer(RIGHT).pasted
