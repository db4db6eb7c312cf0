"""The research corpus: deterministic (hash), sanitised, cached with a version stamp."""
from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys

from arenarl_jax.envs.research import corpus as corpus_lib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_build_is_deterministic_within_and_across_processes(corpus):
  again = corpus_lib.build_corpus_isolated()
  assert again.digest == corpus.digest == corpus_lib.page_digest(corpus.pages)
  assert again.pages == corpus.pages
  # What this process imported does not matter: a library that patches the standard library
  # (here inspect.getfile, as one of the test suite's libraries does) changes nothing.
  import inspect
  original = inspect.getfile
  try:
    inspect.getfile = lambda obj: original(obj)
    assert corpus_lib.build_corpus_isolated().digest == corpus.digest
  finally:
    inspect.getfile = original
  # Another process with another hash seed (set/dict order of strings differs) builds the same.
  code = "from arenarl_jax.envs.research import corpus as c; print(c.build_corpus().digest)"
  env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": ROOT}
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       check=True, cwd=ROOT)
  assert out.stdout.strip() == corpus.digest


def test_pages_are_titled_split_and_cover_the_allowlist(corpus):
  assert len(corpus) > 800
  ids = [p.id for p in corpus.pages]
  assert len(set(ids)) == len(ids)
  assert {p.module for p in corpus.pages} == set(corpus_lib.MODULES)
  for p in corpus.pages:
    assert p.title.startswith(p.id) and p.kind in ("module", "class", "function")
    assert p.passages and all(len(x) <= corpus_lib.PASSAGE_CHARS or "\n\n" not in x
                              for x in p.passages)
    # Passages are the page's paragraphs, in order, nothing lost.
    assert [q for x in p.passages for q in x.split("\n\n")] == [
        q.strip() for q in p.text.split("\n\n") if q.strip()]
  dumps = corpus.page("json.dumps")
  assert dumps.signature.startswith("json.dumps(obj, *, skipkeys=False")
  assert dumps.summary() == "Serialize ``obj`` to a JSON formatted ``str``."


def test_no_memory_addresses_or_machine_paths(corpus):
  machine = [p for p in (sys.prefix, sys.base_prefix, os.path.expanduser("~"), ROOT)
             if len(p) > 1]
  for p in corpus.pages:
    assert not re.search(r"0x[0-9a-fA-F]{6,}", p.text), p.id
    assert not re.search(r"<[\w.]+ object at ", p.text), p.id
    for m in machine:
      assert m not in p.text, (p.id, m)


def test_sanitise_hand_cases():
  text = (f"default=<foo.Bar object at 0x7f3a2b1c0d90>, id 0xDEADBEEF12, "
          f"see {sys.prefix}/lib/thing.py and {os.path.expanduser('~')}/x")
  out = corpus_lib.sanitise(text)
  assert out == ("default=<foo.Bar object>, id 0x..., see <path>/lib/thing.py and <path>/x")
  kept = "mode 0o644, 0x10 and 255 in /tmp/x or /usr/local/bin"
  assert corpus_lib.sanitise(kept) == kept


def test_cache_round_trip_version_stamp_and_damage(corpus, cache_dir, tmp_path):
  path = corpus_lib.cache_path(cache_dir)
  stamp = corpus_lib.version_stamp()
  assert os.path.isfile(path) and stamp in os.path.basename(path)
  assert "py%d.%d.%d" % sys.version_info[:3] in stamp
  assert corpus_lib.load_corpus(cache_dir).digest == corpus.digest
  # A damaged cache (a page edited, digest kept) is rebuilt, not trusted.
  with open(path, encoding="utf-8") as f:
    data = json.load(f)
  copy = str(tmp_path)
  bad = corpus_lib.cache_path(copy)
  data["pages"][0]["text"] = "tampered"
  with open(bad, "w", encoding="utf-8") as f:
    json.dump(data, f)
  assert corpus_lib._read_cache(bad) is None
  rebuilt = corpus_lib.load_corpus(copy)
  assert rebuilt.digest == corpus.digest and rebuilt.pages[0].text != "tampered"
  with open(bad, encoding="utf-8") as f:
    assert json.load(f)["digest"] == corpus.digest  # rewritten intact
  # The environment variable chooses the folder when no folder is given.
  os.environ[corpus_lib.CACHE_ENV] = copy
  try:
    assert corpus_lib.cache_path() == bad
  finally:
    del os.environ[corpus_lib.CACHE_ENV]


def test_pages_round_trip_through_the_cache_format(corpus):
  p = corpus.pages[3]
  back = corpus_lib.Page(**{**json.loads(json.dumps(dataclasses.asdict(p))),
                            "passages": tuple(p.passages)})
  assert back == p
