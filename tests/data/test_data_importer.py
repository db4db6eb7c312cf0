"""The reference jsonl importer: round trip through the builder, and every kind of bad row named."""
import logging
import os
import re

import pytest

import data_fakes
from arenarl_jax.data import builder, importer, records

GOOD_REF = [{"role": "assistant", "content": "", "reasoning_content": "look",
             "tool_calls": [{"id": "c0", "type": "function",
                             "function": {"name": "lookup", "arguments": "{\"key\": \"a\"}"}}]},
            {"role": "tool", "tool_call_id": "c0", "content": "value-of-a"},
            {"role": "assistant", "content": "The answer is value-of-a."}]


def _read(path, split):
  src = builder.data_source(path, split)
  return [records.Example.from_record(src[i]) for i in range(len(src))]


def test_round_trip_through_the_builder(tmp_path):
  root = str(tmp_path / "in")
  written = data_fakes.write_reference_layout(root)
  path = builder.build(builder.SourceConfig(source="import", env="fake", import_dir=root),
                       str(tmp_path / "out"))
  assert builder.splits(path) == {"test_alpha": 3, "test_beta-2": 3, "train": 12}  # no sft/ dir
  train = _read(path, "train")
  # train joins the subtasks' files in sorted order, rows in file order.
  rows = written["train/alpha.jsonl"] + written["train/beta-2.jsonl"]
  for k, (ex, row) in enumerate(zip(train, rows)):
    subtask = "alpha" if k < 6 else "beta-2"
    assert ex.task_id == f"fake/{subtask}/train-{k % 6 + 1:06d}" and ex.subtask == subtask
    if isinstance(row["query"], str):
      assert ex.query == row["query"] and ex.messages == ()
      assert ex.prompt_messages() == [{"role": "user", "content": row["query"]}]
    else:  # a message-list query: kept whole, its last message is the query text
      assert list(ex.messages) == row["query"] and ex.query == row["query"][-1]["content"]
      assert ex.prompt_messages() == row["query"]
    assert ex.reference == ()
  for subtask in data_fakes.SUBTASKS:
    rows = written[f"test/{subtask}.jsonl"]
    for ex, row in zip(_read(path, records.test_split(subtask)), rows, strict=True):
      assert ex.query == row["query"] and ex.messages == ()
      # Stored whole: the prompt, then the reference messages exactly as written.
      assert list(ex.reference) == [{"role": "user", "content": row["query"]}] + row["reference"]
  meta = builder.load(path).info.metadata
  assert meta["source"] == "import" and meta["skipped_count"] == 0
  # Changing a file changes the dataset's name; an sft/ directory adds the sft split.
  data_fakes.write_jsonl(os.path.join(root, "sft", "alpha.jsonl"),
                         [{"query": "q", "reference": GOOD_REF}])
  path2 = builder.build(builder.SourceConfig(source="import", env="fake", import_dir=root),
                        str(tmp_path / "out"))
  assert path2 != path and builder.splits(path2)["sft"] == 1
  sft = _read(path2, "sft")[0]
  assert [m["role"] for m in sft.messages] == ["user", "assistant", "tool", "assistant"]


BAD_ROWS = [  # (line, field, message fragment)
    ("{not json", "<row>", "not JSON"),
    ("[1, 2]", "<row>", "must be a JSON object"),
    ({"reference": GOOD_REF}, "query", "missing"),
    ({"query": 7, "reference": GOOD_REF}, "query", "list of messages"),
    ({"query": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "x"}],
      "reference": GOOD_REF}, "query[1].role", "system"),
    ({"query": "q"}, "reference", "missing"),
    ({"query": "q", "reference": []}, "reference", "empty"),
    ({"query": "q", "reference": [GOOD_REF[0], {"role": "robot", "content": "x"}]},
     "reference[1].role", "'robot'"),
    ({"query": "q", "reference": [{"role": "assistant", "content": "", "tool_calls": [
        {"id": "c", "type": "function", "function": {"arguments": "{}"}}]}]},
     "reference[0].tool_calls[0].function.name", "missing"),
    ({"query": "q", "reference": [{"role": "assistant", "content": "", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "lookup", "arguments": "{key: a"}}]}]},
     "reference[0].tool_calls[0].function.arguments", "not valid JSON"),
]


@pytest.mark.parametrize("line,field,why", BAD_ROWS, ids=[f"{b[1]}-{k}" for k, b in
                                                          enumerate(BAD_ROWS)])
def test_each_bad_row_names_file_row_and_field(tmp_path, line, field, why):
  root = str(tmp_path)
  data_fakes.write_jsonl(os.path.join(root, "train", "alpha.jsonl"), [{"query": "q1"}])
  good = {"query": "fine", "reference": GOOD_REF}
  # Row 3: a blank line (row 2) is not a row but still counts in the numbering.
  test = data_fakes.write_jsonl(os.path.join(root, "test", "alpha.jsonl"), [good, "", line, good])
  layout = importer.discover(root)
  with pytest.raises(importer.DataError) as info:
    importer.split_records(layout, "test_alpha", env="fake")
  e = info.value
  assert (e.path, e.row, e.field) == (test, 3, field)
  assert str(e).startswith(f"{test}:3: {field}: ") and why in str(e)


def test_build_fails_on_a_bad_row_and_can_skip_bad_rows_with_a_count_and_a_log(tmp_path, caplog):
  root = str(tmp_path / "in")
  data_fakes.write_reference_layout(root)
  bad = os.path.join(root, "train", "alpha.jsonl")
  with open(bad, "a") as f:
    f.write("{\"query\": \"\"}\n{oops\n")
  with pytest.raises(importer.DataError, match=re.escape(f"{bad}:7: query: empty")):
    builder.build(builder.SourceConfig(source="import", env="fake", import_dir=root),
                  str(tmp_path / "out"))
  caplog.set_level(logging.WARNING)
  path = builder.build(builder.SourceConfig(source="import", env="fake", import_dir=root,
                                            skip_bad_rows=True), str(tmp_path / "out"))
  assert path.rstrip("/").split("/")[-2].endswith("-skip")
  assert builder.splits(path)["train"] == 12  # the two bad rows are out, the good ones in
  meta = builder.load(path).info.metadata
  assert meta["skipped_count"] == 2 and meta["kept"][bad] == 6
  assert meta["skipped"] == [f"{bad}:7: query: empty", f"{bad}:8: <row>: not JSON "
                             f"(Expecting property name enclosed in double quotes at column 2)"]
  logged = [r.getMessage() for r in caplog.records if "skipping bad row" in r.getMessage()]
  assert len(logged) == 2 and f"{bad}:8" in logged[1]


def test_missing_files_and_directories_are_named(tmp_path):
  root = str(tmp_path)
  with pytest.raises(importer.DataError, match=r"test: files: no <subtask>.jsonl"):
    importer.discover(root)
  data_fakes.write_jsonl(os.path.join(root, "test", "alpha.jsonl"),
                         [{"query": "q", "reference": GOOD_REF}])
  with pytest.raises(importer.DataError, match=r"train: files: no <subtask>.jsonl"):
    importer.discover(root)
  data_fakes.write_jsonl(os.path.join(root, "train", "alpha.jsonl"), [{"query": "ok"}])
  assert importer.discover(root).subtasks == ("alpha",)
  missing = os.path.join(root, "train", "beta.jsonl")
  with pytest.raises(importer.DataError) as info:
    importer.discover(root, ["alpha", "beta"])
  assert (info.value.path, info.value.row, info.value.field) == (missing, None, "file")
  assert str(info.value) == f"{missing}: file: missing"
  with pytest.raises(importer.DataError, match="data.import_dir: not a directory"):
    builder.SourceConfig(source="import", env="fake", import_dir=str(tmp_path / "nope"))
  recs = importer.split_records(importer.discover(root), "train", env="fake")
  assert [r["query"] for r in recs] == ["ok"]
