"""grain pipelines: seeded order, disjoint process shards, exact resume in a new process, SFT."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import data_fakes
from arenarl_jax.text import chat_format
from arenarl_jax.text import messages as messages_lib
from arenarl_jax.text import tokenizer as tokenizer_lib
from arenarl_jax.data import builder, pipeline, records
from arenarl_jax.data.settings import DataSettings
from arenarl_jax.models.embedded import find_smollm2_gguf
from arenarl_jax.sft.settings import SftSettings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
N_TRAIN = data_fakes.SIZES["train"]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
  return builder.build(builder.SourceConfig(env="fake", env_seed=5),
                       str(tmp_path_factory.mktemp("data")))


@pytest.fixture(scope="module")
def smollm2_tokenizer():
  return tokenizer_lib.Tokenizer.from_gguf(find_smollm2_gguf())


def _ids(iterator, n):
  return [[ex.task_id for ex in next(iterator)] for _ in range(n)]


def test_same_seed_same_order_each_epoch_a_new_permutation(dataset):
  src = builder.data_source(dataset, "train")
  run = lambda seed: _ids(iter(pipeline.prompt_batches(src, batch_size=4, seed=seed,
                                                       process_index=0, process_count=1)), 6)
  a, b, c = run(0), run(0), run(1)
  assert a == b and a != c
  all_ids = sorted(records.Example.from_record(src[i]).task_id for i in range(N_TRAIN))
  epoch1, epoch2 = sum(a[:3], []), sum(a[3:], [])
  assert sorted(epoch1) == all_ids and sorted(epoch2) == all_ids and epoch1 != epoch2
  unshuffled = sum(_ids(iter(pipeline.prompt_batches(src, batch_size=4, seed=0, shuffle=False,
                                                     process_index=0, process_count=1)), 3), [])
  assert unshuffled == [records.Example.from_record(src[i]).task_id for i in range(N_TRAIN)]
  assert isinstance(next(iter(pipeline.prompt_batches(src, batch_size=4, seed=0, process_index=0,
                                                      process_count=1)))[0], records.Example)


def test_process_shards_are_disjoint_and_cover_each_epoch(dataset):
  src = builder.data_source(dataset, "train")
  shards = [sum(_ids(iter(pipeline.prompt_batches(src, batch_size=2, seed=3, epochs=1,
                                                  process_index=i, process_count=3)), 2), [])
            for i in range(3)]
  assert all(len(s) == 4 for s in shards)
  union = set().union(*shards)
  assert len(union) == N_TRAIN  # no overlap, nothing missing
  # The shards deal out the single-process order round-robin.
  whole = sum(_ids(iter(pipeline.prompt_batches(src, batch_size=N_TRAIN, seed=3, epochs=1,
                                                process_index=0, process_count=1)), 1), [])
  assert shards == [whole[i::3] for i in range(3)]
  with pytest.raises(ValueError, match="outside"):
    pipeline.examples(src, seed=0, process_index=3, process_count=3)


_RESUME_CHILD = """
import json, sys
from arenarl_jax.data import builder, pipeline
path, position_file, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
it = iter(pipeline.prompt_batches(builder.data_source(path, "train"), batch_size=4, seed=11,
                                  process_index=1, process_count=2, read_threads=2, prefetch=4))
pipeline.load_position(position_file, it)
print(json.dumps([[ex.task_id for ex in next(it)] for _ in range(n)]))
"""


def test_resume_at_a_saved_position_in_a_new_process(dataset, tmp_path):
  make = lambda: iter(pipeline.prompt_batches(
      builder.data_source(dataset, "train"), batch_size=4, seed=11, process_index=1,
      process_count=2, read_threads=2, prefetch=4))
  at_once = _ids(make(), 9)  # 6 records per process and epoch: crosses epoch boundaries
  it = make()
  first = _ids(it, 5)
  position_file = str(tmp_path / "position.json")
  pipeline.save_position(position_file, it)
  assert json.load(open(position_file)) == {"next_index": 5}
  env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, HERE]))
  proc = subprocess.run([sys.executable, "-c", _RESUME_CHILD, dataset, position_file, "4"],
                        env=env, capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr[-3000:]
  rest = json.loads(proc.stdout.strip().splitlines()[-1])
  assert first + rest == at_once


def _conversation():
  return [{"role": "user", "content": "Find the red value."},
          {"role": "assistant", "content": "", "reasoning_content": "Look it up.",
           "tool_calls": [{"id": "c0", "type": "function",
                           "function": {"name": "lookup", "arguments": "{\"key\": \"red\"}"}}]},
          {"role": "tool", "tool_call_id": "c0", "content": "value-of-red"},
          {"role": "assistant", "content": "It is value-of-red."}]


def test_default_render_masks_assistant_bodies_only(smollm2_tokenizer):
  tok, tools = smollm2_tokenizer, data_fakes.FakeEnvironment().tool_source().tools()
  ids, mask = messages_lib.render_sft(_conversation(), tok, tools)
  text = chat_format.render_messages(
      [{"role": "user", "content": "Find the red value."},
       {"role": "assistant", "reasoning": "Look it up.",
        "tool_calls": [{"name": "lookup", "arguments": {"key": "red"}}]},
       {"role": "tool", "content": "value-of-red"},
       {"role": "assistant", "content": "It is value-of-red."}], tools=tools)
  assert ids == tok.encode(text) and len(mask) == len(ids)
  trained = tok.decode([i for i, m in zip(ids, mask) if m])
  assert trained == ("<think>\nLook it up.\n</think>\n<tool_call>\n"
                     "{\"name\": \"lookup\", \"arguments\": {\"key\": \"red\"}}\n</tool_call>"
                     "<|im_end|>It is value-of-red.<|im_end|>")


def test_sft_features_render_with_messages_render_sft_by_default(monkeypatch, smollm2_tokenizer):
  seen = []

  def render_sft(messages, tokenizer, tools):
    seen.append((len(messages), tools))
    return [5, 6], [0, 1]

  monkeypatch.setattr(messages_lib, "render_sft", render_sft, raising=False)
  features = pipeline.SFTFeatures(smollm2_tokenizer, seq_len=3, tools=[{"name": "t"}])
  row = features(records.Example("a/b/0", "a", "b", "q", messages=tuple(_conversation())))
  assert row["tokens_T"].tolist() == [5, 6, smollm2_tokenizer.pad_id]
  assert row["loss_mask_T"].tolist() == [0, 1, 0] and seen == [(4, [{"name": "t"}])]


def test_context_weight_trains_the_turns_after_the_first(smollm2_tokenizer):
  tok, tools = smollm2_tokenizer, data_fakes.FakeEnvironment().tool_source().tools()
  example = records.Example("a/b/0", "a", "b", "q", messages=tuple(_conversation()))
  ids, mask = messages_lib.render_sft(_conversation(), tok, tools)
  n = len(ids)
  row = pipeline.SFTFeatures(tok, seq_len=n + 5, tools=tools, context_weight=0.25)(example)
  weight = row["loss_mask_T"]
  system_end = ids.index(tok.eos_id)  # the first turn (system prompt, tool schemas) ends here
  expected = np.where(np.asarray(mask) == 1, 1.0,
                      np.where(np.arange(n) > system_end, 0.25, 0.0))
  np.testing.assert_array_equal(weight[:n], expected)
  assert not weight[n:].any() and weight.dtype == np.float32
  # The query and the tool result are trained at the context weight, the system prompt not.
  query = messages_lib.encode_plain(tok, "Find the red value.")
  at = next(k for k in range(n) if ids[k:k + len(query)] == query)
  assert (weight[at:at + len(query)] == 0.25).all() and (weight[:system_end + 1] == 0).all()
  unweighted = pipeline.SFTFeatures(tok, seq_len=n, tools=tools)(example)["loss_mask_T"]
  np.testing.assert_array_equal(unweighted, mask)
  with pytest.raises(ValueError, match="context_weight"):
    pipeline.SFTFeatures(tok, seq_len=8, context_weight=1.5)


def test_first_turn_rows_end_after_the_first_assistant_turn(smollm2_tokenizer):
  assert pipeline.first_turn_end([0, 0, 1, 1, 0, 1]) == 4
  assert pipeline.first_turn_end([0, 1, 1]) == 3 and pipeline.first_turn_end([0, 0]) == 2
  tok, tools = smollm2_tokenizer, data_fakes.FakeEnvironment().tool_source().tools()
  example = records.Example("a/b/0", "a", "b", "q", messages=tuple(_conversation()))
  ids, mask = messages_lib.render_sft(_conversation(), tok, tools)
  end = pipeline.first_turn_end(mask)
  assert tok.decode(ids[:end]).endswith("</tool_call><|im_end|>")  # the call and its turn's end
  row = pipeline.SFTFeatures(tok, seq_len=len(ids), tools=tools, first_turn_only=True,
                             context_weight=0.5)(example)
  np.testing.assert_array_equal(row["tokens_T"][:end], ids[:end])
  assert (row["tokens_T"][end:] == tok.pad_id).all() and not row["loss_mask_T"][end:].any()
  assert (row["loss_mask_T"][:end] == np.where(np.asarray(mask[:end]) == 1, 1.0, row[
      "loss_mask_T"][:end])).all() and row["loss_mask_T"][:end].max() == 1.0
  # A row shorter than the first turn is cut at the row's length.
  short = pipeline.SFTFeatures(tok, seq_len=end - 3, tools=tools, first_turn_only=True)(example)
  np.testing.assert_array_equal(short["tokens_T"], ids[:end - 3])


def test_sft_batches_are_rendered_tokenised_and_padded(dataset, smollm2_tokenizer, monkeypatch):
  tok = smollm2_tokenizer
  src = builder.data_source(dataset, "sft")
  tools = data_fakes.FakeEnvironment().tool_source().tools()
  batch = next(iter(pipeline.sft_batches(src, tokenizer=tok, seq_len=512, batch_size=3, seed=0,
                                         tools=tools, shuffle=False, process_index=0,
                                         process_count=1)))
  assert batch["tokens_NT"].shape == (3, 512) and batch["tokens_NT"].dtype == np.int32
  assert batch["loss_mask_NT"].shape == (3, 512) and batch["loss_mask_NT"].dtype == np.float32
  for row in range(3):
    ex = records.Example.from_record(src[row])
    ids, mask = messages_lib.render_sft(list(ex.messages), tok, tools)
    n = len(ids)
    assert 0 < n < 512
    np.testing.assert_array_equal(batch["tokens_NT"][row, :n], ids)
    np.testing.assert_array_equal(batch["loss_mask_NT"][row, :n], mask)
    assert (batch["tokens_NT"][row, n:] == tok.pad_id).all()
    assert not batch["loss_mask_NT"][row, n:].any()
  # Cut to seq_len; an injected render replaces the default.
  short = next(iter(pipeline.sft_batches(src, tokenizer=tok, seq_len=16, batch_size=2, seed=0,
                                         tools=tools, shuffle=False, process_index=0,
                                         process_count=1)))
  np.testing.assert_array_equal(short["tokens_NT"], batch["tokens_NT"][:2, :16])
  fake = lambda messages, tokenizer, tools: ([7] * len(messages), [1] * len(messages))
  injected = next(iter(pipeline.sft_batches(src, tokenizer=tok, seq_len=8, batch_size=1, seed=0,
                                            render=fake, shuffle=False, process_index=0,
                                            process_count=1)))
  assert injected["tokens_NT"].tolist() == [[7, 7, 7, 7, tok.pad_id, tok.pad_id, tok.pad_id,
                                             tok.pad_id]]
  with pytest.raises(ValueError, match="no messages to train on"):
    next(iter(pipeline.sft_batches(builder.data_source(dataset, "train"), tokenizer=tok,
                                   seq_len=8, batch_size=1, seed=0, process_index=0,
                                   process_count=1)))


def test_pipelines_from_settings_split_the_global_batch(dataset, smollm2_tokenizer):
  data = DataSettings(sft_batch_size=4, sft_seq_len=64)
  src = builder.data_source(dataset, "train")
  shard = [next(iter(pipeline.prompt_batches_for(data, 4, src, process_index=i,
                                                 process_count=2))) for i in range(2)]
  assert [len(b) for b in shard] == [2, 2]
  assert not {e.task_id for e in shard[0]} & {e.task_id for e in shard[1]}
  sft = next(iter(pipeline.sft_batches_for(data, SftSettings(),
                                           builder.data_source(dataset, "sft"),
                                           tokenizer=smollm2_tokenizer,
                                           process_index=0, process_count=1)))
  assert sft["tokens_NT"].shape == (4, 64)
  with pytest.raises(ValueError, match="multiple of the process count 2"):
    pipeline.prompt_batches_for(data, 3, src, process_index=0, process_count=2)


def test_trained_width_cuts_trailing_padding_to_a_bucket():
  mask = np.zeros((2, 20), np.float32)
  mask[0, 3:6] = 1.0
  mask[1, 2:11] = 0.5  # a context weight counts as trained
  assert pipeline.trained_width(mask, 4) == 12  # last trained index 10 -> 11 -> 12
  assert pipeline.trained_width(mask, 8) == 16 and pipeline.trained_width(mask, 16) == 16
  assert pipeline.trained_width(mask, 32) == 20  # never past the rows
  assert pipeline.trained_width(mask, 0) == 20  # 0: whole rows
  assert pipeline.trained_width(np.zeros((2, 20)), 4) == 4  # nothing trained: one bucket


def test_sft_reasoning_keeps_the_think_blocks_asked_for(smollm2_tokenizer):
  tok, tools = smollm2_tokenizer, data_fakes.FakeEnvironment().tool_source().tools()
  conversation = _conversation()
  conversation[-1] = {**conversation[-1], "reasoning_content": "The lookup answered."}
  example = records.Example("a/b/0", "a", "b", "q", messages=tuple(conversation))

  def trained(reasoning):
    row = pipeline.SFTFeatures(tok, seq_len=400, tools=tools, reasoning=reasoning)(example)
    return tok.decode([i for i, m in zip(row["tokens_T"], row["loss_mask_T"]) if m])

  both = trained("all")
  assert "Look it up." in both and "The lookup answered." in both
  calls = trained("calls")  # the calling turn keeps its reasoning, the answer turn starts bare
  assert "Look it up." in calls and "The lookup answered." not in calls
  assert "<|im_end|>It is value-of-red." in calls
  assert "<think>" not in trained("none") and "value-of-red" in trained("none")
  assert conversation[-1]["reasoning_content"]  # the record itself is untouched
  with pytest.raises(ValueError, match="sft.reasoning"):
    pipeline.SFTFeatures(tok, seq_len=8, reasoning="some")
