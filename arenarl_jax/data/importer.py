"""Records from the paper's reference jsonl layout in a user directory (train and test files).

Layout, one file per subtask (the file's stem is the subtask)::

  <dir>/train/<subtask>.jsonl   {"query": str | [messages], "metadata": {...} (optional, ignored)}
  <dir>/test/<subtask>.jsonl    {"query": str | [messages], "reference": [messages]}
  <dir>/sft/<subtask>.jsonl     optional, rows as in test/: the conversation query + reference

A reference is stored as the whole conversation: the prompt is put before it unless it already
opens with a system or user message. A list-form query holds system/user messages only; the record
keeps it in ``messages`` and its last message's content as ``query`` (what the judge reads). Task
ids are ``<env>/<subtask>/<kind>-<line>`` with the 1-based line number, so an id points back at its
source row.

Bad input raises :class:`DataError` naming the file, the line and the field (a missing file names
the path). ``skip_bad_rows=True`` skips bad rows instead, logs each one and counts them in the
returned :class:`ImportReport`; nothing is dropped silently. Blank lines hold no row (ignored).
"""
from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import os
import re
from typing import Any, Iterator, Mapping, Sequence

from absl import logging

from arenarl_jax.text import messages as messages_lib
from arenarl_jax.data import records

KINDS = ("train", "test", "sft")
_PROMPT_ROLES = ("system", "user")


class DataError(ValueError):
  """Bad input data; ``str(e)`` is ``<file>:<row>: <field>: <why>``."""

  def __init__(self, path: str, row: int | None, field: str, why: str):
    where = path if row is None else f"{path}:{row}"
    super().__init__(f"{where}: {field}: {why}")
    self.path, self.row, self.field, self.why = path, row, field, why


@dataclasses.dataclass
class ImportReport:
  """What an import read: rows kept per file and every skipped row (file, row, field, why)."""

  kept: dict[str, int] = dataclasses.field(default_factory=dict)
  skipped: list[DataError] = dataclasses.field(default_factory=list)

  def as_metadata(self) -> dict[str, Any]:
    return {"kept": dict(self.kept), "skipped_count": len(self.skipped),
            "skipped": [str(e) for e in self.skipped]}


@dataclasses.dataclass(frozen=True)
class Layout:
  """The files of an import directory: (subtask, path) per kind, subtasks in sorted order."""

  root: str
  subtasks: tuple[str, ...]
  files: Mapping[str, tuple[tuple[str, str], ...]]

  def fingerprint(self) -> str:
    """A short hash of every file's relative path and bytes (names the built dataset)."""
    h = hashlib.sha256()
    for kind in KINDS:
      for _, path in self.files.get(kind, ()):
        h.update(os.path.relpath(path, self.root).encode("utf-8") + b"\0")
        with open(path, "rb") as f:
          h.update(hashlib.sha256(f.read()).digest())
    return h.hexdigest()[:12]


def discover(root: str, subtasks: Sequence[str] = ()) -> Layout:
  """The layout under ``root``; with ``subtasks`` given, each needs its train and test file."""
  if not os.path.isdir(root):
    raise DataError(root, None, "data.import_dir", "not a directory")
  explicit = bool(subtasks)
  if not explicit:
    found = sorted(os.path.splitext(os.path.basename(p))[0]
                   for p in glob.glob(os.path.join(root, "test", "*.jsonl")))
    if not found:
      raise DataError(os.path.join(root, "test"), None, "files",
                      "no <subtask>.jsonl files (one per subtask is expected)")
    subtasks = found
  files: dict[str, tuple[tuple[str, str], ...]] = {}
  for kind in KINDS:
    entries = []
    for subtask in sorted(subtasks):
      path = os.path.join(root, kind, f"{subtask}.jsonl")
      if os.path.isfile(path):
        entries.append((subtask, path))
      elif kind == "test" or (kind == "train" and explicit):
        raise DataError(path, None, "file", "missing")
    files[kind] = tuple(entries)
  if not files["train"]:
    raise DataError(os.path.join(root, "train"), None, "files", "no <subtask>.jsonl files")
  return Layout(root=root, subtasks=tuple(sorted(subtasks)), files=files)


def _message_error(path: str, row: int, field: str, e: messages_lib.MessageError) -> DataError:
  """Re-homes ``messages[k].x: why`` as ``<field>[k].x`` of a row."""
  m = re.match(r"messages(\[\d+\][^:]*): (.*)", str(e), re.S)
  if not m:
    return DataError(path, row, field, str(e))
  return DataError(path, row, field + m.group(1), m.group(2))


def _messages(path: str, row: int, field: str, value: Any) -> list[dict[str, Any]]:
  if not isinstance(value, list):
    raise DataError(path, row, field, f"must be a list of messages, got {type(value).__name__}")
  if not value:
    raise DataError(path, row, field, "empty")
  try:
    return records.canonical_messages(value)
  except messages_lib.MessageError as e:
    raise _message_error(path, row, field, e) from e


def _query(path: str, row: int, data: Mapping[str, Any]) -> tuple[str, list[dict[str, Any]]]:
  """(query text, prompt messages or []) of a row."""
  if "query" not in data:
    raise DataError(path, row, "query", "missing")
  value = data["query"]
  if isinstance(value, str):
    if not value.strip():
      raise DataError(path, row, "query", "empty")
    return value, []
  prompt = _messages(path, row, "query", value)
  for k, m in enumerate(prompt):
    if m["role"] not in _PROMPT_ROLES:
      raise DataError(path, row, f"query[{k}].role",
                      f"{m['role']!r}: a query holds {_PROMPT_ROLES} messages only")
  text = prompt[-1].get("content") or ""
  if not text.strip():
    raise DataError(path, row, f"query[{len(prompt) - 1}].content", "empty")
  return text, prompt


def _row_record(env: str, kind: str, subtask: str, path: str, row: int,
                line: str) -> dict[str, str]:
  try:
    data = json.loads(line)
  except json.JSONDecodeError as e:
    raise DataError(path, row, "<row>", f"not JSON ({e.msg} at column {e.colno})") from e
  if not isinstance(data, dict):
    raise DataError(path, row, "<row>", f"must be a JSON object, got {type(data).__name__}")
  query, prompt = _query(path, row, data)
  reference = None
  if kind != "train":
    if "reference" not in data:
      raise DataError(path, row, "reference", "missing")
    reference = _messages(path, row, "reference", data["reference"])
    reference = records.with_prompt(prompt or [{"role": "user", "content": query}], reference)
  task_id = f"{env}/{subtask}/{kind}-{row:06d}"
  if kind == "sft":
    return records.make_record(task_id=task_id, env=env, subtask=subtask, query=query,
                               messages=reference)
  return records.make_record(task_id=task_id, env=env, subtask=subtask, query=query,
                             messages=prompt, reference=reference)


def _file_records(env: str, kind: str, subtask: str, path: str, skip_bad_rows: bool,
                  report: ImportReport) -> Iterator[dict[str, str]]:
  kept = 0
  with open(path, encoding="utf-8", errors="strict") as f:
    for row, line in enumerate(f, start=1):
      if not line.strip():
        continue
      try:
        yield _row_record(env, kind, subtask, path, row, line)
        kept += 1
      except DataError as e:
        if not skip_bad_rows:
          raise
        logging.warning("skipping bad row %s", e)
        report.skipped.append(e)
  report.kept[path] = kept


def split_records(layout: Layout, split: str, *, env: str, skip_bad_rows: bool = False,
                  report: ImportReport | None = None) -> list[dict[str, str]]:
  """The records of one split: ``train`` and ``sft`` join every subtask's file (sorted by
  subtask), ``test_<subtask>`` reads that subtask's test file."""
  report = ImportReport() if report is None else report
  if split in (records.TRAIN, records.SFT):
    sources = [(split, s, p) for s, p in layout.files.get(split, ())]
  else:
    tests = dict(zip(records.splits_for(layout.subtasks)[2:], layout.files["test"]))
    if split not in tests:
      raise ValueError(f"split {split!r}: not one of {records.splits_for(layout.subtasks)}")
    sources = [("test", *tests[split])]
  out = []
  for kind, subtask, path in sources:
    try:
      out.extend(_file_records(env, kind, subtask, path, skip_bad_rows, report))
    except UnicodeDecodeError as e:
      raise DataError(path, None, "<file>", f"not UTF-8 text ({e.reason} at byte {e.start})") from e
  return out
