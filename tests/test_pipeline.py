"""The training pipeline's pieces: the task tokenizer, compact schemas, the starting policy,
trajectory stats. The whole pipeline runs in ``test_pipeline_smoke.py``."""
import json
import os
import sys

import numpy as np
import pytest

from arenarl_jax.text import messages
from arenarl_jax import pipeline
from arenarl_jax.models.settings import ModelSettings
from arenarl_jax.sft import policy as policy_lib
from arenarl_jax.text import task_tokenizer
from arenarl_jax.envs import compact_schemas
from arenarl_jax.rollout.stats import trajectory_metrics
from arenarl_jax.types import Trajectory

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "configs"))
import quickstart  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position

TEXTS = [
    "<|im_start|>user\nFind 2 noodles restaurants in Nortor near Western Moon Temple.<|im_end|>\n"
    "<|im_start|>assistant\n<think>\nI need the temple.\n</think>\n<tool_call>\n"
    '{"name": "search_poi", "arguments": {"city": "Nortor", "keyword": "noodles"}}\n'
    "</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n1. Jade Lotus Noodle House | "
    "rating 4.6\n</tool_response><|im_end|>\n",
] * 20


def test_task_bpe_keeps_control_tokens_whole_and_round_trips():
  tok = task_tokenizer.train_bpe(TEXTS, vocab_size=320)
  again = task_tokenizer.train_bpe(TEXTS, vocab_size=320)
  assert tok.backend.get_vocab() == again.backend.get_vocab()  # deterministic
  assert tok.vocab_size <= 320 and tok.eos_id == tok.token_to_id("<|im_end|>")
  for text in task_tokenizer.SPECIAL + task_tokenizer.TAGS:
    assert len(tok.encode(text)) == 1, text
  assert tok.decode(tok.encode(TEXTS[0])) == TEXTS[0]
  # Untrusted text: the control token's spelling is plain text there, never the control id.
  assert tok.eos_id not in messages.encode_plain(tok, "a <|im_end|> b")
  assert tok.decode(messages.encode_plain(tok, "a <|im_end|> b")) == "a <|im_end|> b"
  with pytest.raises(ValueError, match="vocab_size"):
    task_tokenizer.train_bpe(TEXTS, vocab_size=100)


def test_task_bpe_keeps_whole_names_as_one_id_each():
  names = ("Nortor", "Jade Lotus Noodle House", "Nortor North Railway Station")
  tok = task_tokenizer.train_bpe(TEXTS, vocab_size=320, whole=names)
  plain = task_tokenizer.train_bpe(TEXTS, vocab_size=320)
  # The name and " name", each a new id unless the BPE already learned it ("Nortor" here).
  assert plain.vocab_size + 2 * len(names) - 1 == tok.vocab_size
  for name in names:
    assert len(tok.encode(name)) == 1 and len(tok.encode(" " + name)) == 1, name
  assert len(plain.encode(" Jade Lotus Noodle House")) > 1
  # The longest name wins (the city inside the station's name is not split off), the plain
  # encoding (tool results, queries) keeps them too, and decoding gives the text back.
  text = ('{"city": "Nortor", "waypoints": ["Nortor North Railway Station"]} near Jade Lotus '
          "Noodle House, Nortorx")
  ids = messages.encode_plain(tok, text)
  assert tok.token_to_id("Nortor North Railway Station") in ids
  assert tok.token_to_id(" Jade Lotus Noodle House") in ids
  assert tok.decode(ids) == text and tok.decode(tok.encode(TEXTS[0])) == TEXTS[0]


def test_task_bpe_apart_gives_a_name_one_id_in_prose_and_in_calls():
  names = ("Nortor", "Jade Lotus Noodle House", "Nortor North Railway Station")
  joined = task_tokenizer.train_bpe(TEXTS, vocab_size=320, whole=names)
  tok = task_tokenizer.train_bpe(TEXTS, vocab_size=320, whole=names, name_space="apart")
  assert tok.vocab_size == joined.vocab_size - len(names)  # no " name" ids
  space = tok.encode(" ")
  assert len(space) == 1
  for name in names:
    (name_id,) = tok.encode(name)
    assert tok.encode(" " + name) == space + [name_id], name
  # The query's prose and the call's JSON hold the same id (joined: two unrelated ids).
  prose, call = "near Jade Lotus Noodle House", '{"keyword": "Jade Lotus Noodle House"}'
  house = tok.token_to_id("Jade Lotus Noodle House")
  assert house in tok.encode(prose) and house in tok.encode(call)
  assert joined.token_to_id("Jade Lotus Noodle House") not in joined.encode(prose)
  for text in (prose, call, TEXTS[0], "a  Nortor,Nortor North Railway Station"):
    assert tok.decode(tok.encode(text)) == text
  with pytest.raises(ValueError, match="model.init.name_space"):
    task_tokenizer.train_bpe(TEXTS, vocab_size=320, whole=names, name_space="glued")


def test_task_bpe_whole_numbers_are_one_id_only_as_a_whole_word():
  numbers = task_tokenizer.whole_numbers()
  assert len(numbers) == len(set(numbers)) == 2000 + 1000 + 24 * 60
  assert {"0", "1999", "0.0", "99.9", "00:00", "23:59"} <= set(numbers)
  tok = task_tokenizer.train_bpe(TEXTS, vocab_size=320, numbers=numbers)
  plain = task_tokenizer.train_bpe(TEXTS, vocab_size=320)
  # Figures the BPE already holds as one id (the digits) keep it; every other one is added.
  assert tok.vocab_size == plain.vocab_size + sum(
      plain.backend.token_to_id(n) is None for n in numbers)
  line = "rating 4.6 | ticket ¥40 | open 10:00-17:00 | 1999 m"
  ids = tok.encode(line)
  for figure in ("4.6", "40", "10:00", "17:00", "1999"):
    assert tok.token_to_id(figure) in ids, figure
  assert tok.encode(" 40") == tok.encode(" ") + [tok.token_to_id("40")]
  # Never inside a longer word or figure: a train number, a figure above the range, a date.
  for text, inner in (("G2406", "240"), ("12192", "1219"), ("2026-05-22", "202"),
                      ("114.9415", "114.9")):
    assert all(tok.decode([i]) != inner for i in tok.encode(text)), text
  for text in (line, "G2406 12192 2026-05-22 114.9415,37.9494 (+1 day) 01:26", TEXTS[0]):
    assert tok.decode(tok.encode(text)) == text


def test_travel_names_are_its_cities_and_places():
  from arenarl_jax.envs import base  # pylint: disable=g-import-not-at-top
  env = base.make_environment("travel")
  names = env.names()
  assert names == tuple(sorted(set(names)))
  assert {c.name for c in env.world.cities} <= set(names)
  assert {p.name for pois in env.world.pois.values() for p in pois} <= set(names)
  assert len(names) > len(env.world.cities) * 20


def test_compact_schemas_keep_names_types_and_required():
  tool = {"type": "function", "function": {
      "name": "f", "description": "long prose",
      "parameters": {"type": "object", "additionalProperties": False, "required": ["city"],
                     "properties": {"city": {"type": "string", "maxLength": 200,
                                             "description": "City."},
                                    "stops": {"type": "array", "minItems": 2,
                                              "items": {"type": "string", "minLength": 1}},
                                    "mode": {"type": "string", "enum": ["walk", "drive"]}}}}}
  assert compact_schemas.compact_tool(tool) == {"name": "f", "parameters": {
      "type": "object", "required": ["city"],
      "properties": {"city": {"type": "string"}, "stops": {"type": "array",
                                                           "items": {"type": "string"}},
                     "mode": {"type": "string", "enum": ["walk", "drive"]}}}}
  with pytest.raises(ValueError, match="env.schemas"):
    compact_schemas.tool_source(None, "short")


def test_no_schemas_list_no_tools_and_still_call_them():
  import asyncio  # pylint: disable=g-import-not-at-top
  from arenarl_jax.envs import base  # pylint: disable=g-import-not-at-top
  env = base.make_environment("travel")
  source = compact_schemas.tool_source(env, "none")
  assert source.tools() == [] and len(env.tool_source().tools()) == 6
  out = asyncio.run(source.call("search_poi", {"city": env.world.cities[0].name,
                                               "keyword": "museum"}, timeout=5.0))
  assert out.ok and "museum" in out.text
  prompt = messages.render_segments([{"role": "user", "content": "q"}], tools=source.tools())
  assert not any("<tools>" in text for text, _, _ in prompt)


def test_policy_from_scratch_saves_its_tokenizer(tmp_path):
  config = quickstart.get_config("smoke")
  with config.unlocked():
    config.model.init.tokenizer = "smollm2"
  first = pipeline.make_policy(config, str(tmp_path))
  assert first.cfg.vocab_size == first.tokenizer.vocab_size
  assert os.path.isfile(tmp_path / "tokenizer" / "tokenizer.json")
  assert json.load(open(tmp_path / "model_config.json"))["num_hidden_layers"] == 2
  with config.unlocked():
    config.model.init.tokenizer = "no_such_tokenizer"  # ignored: the saved one is read back
  again = pipeline.make_policy(config, str(tmp_path))
  assert again.tokenizer.encode("Nortor <|im_end|>") == first.tokenizer.encode("Nortor <|im_end|>")
  with pytest.raises(ValueError, match="model.init.tokenizer"):
    policy_lib.make_tokenizer(ModelSettings.from_config(config.model))


def test_policy_rope_theta_replaces_the_presets_and_is_recorded(tmp_path):
  config = quickstart.get_config("smoke")
  with config.unlocked():
    config.model.init.tokenizer = "smollm2"
  assert pipeline.make_policy(config, str(tmp_path / "a")).cfg.rope_theta == 10_000.0
  with config.unlocked():
    config.model.init.rope_theta = 1e6
  policy = pipeline.make_policy(config, str(tmp_path / "b"))
  assert policy.cfg.rope_theta == 1e6
  saved = json.load(open(tmp_path / "b" / "model_config.json"))
  assert saved["rope_parameters"]["rope_theta"] == 1e6
  with config.unlocked():
    config.model.init.rope_theta = -1.0
  with pytest.raises(ValueError, match="model.init.rope_theta"):
    pipeline.make_policy(config, str(tmp_path / "c"))


def test_trajectory_stats_count_calls_errors_and_finishes():
  def traj(finish, log, n_sampled):
    mask = np.r_[np.zeros(3), np.ones(n_sampled)].astype(np.int32)
    return Trajectory(query="q", tokens=np.zeros(len(mask), np.int32), loss_mask=mask,
                      finish_reason=finish, metadata={"tool_log": tuple(log)})
  ok = {"ok": True, "error_kind": None}
  bad = {"ok": False, "error_kind": "bad_arguments"}
  stats = trajectory_metrics([traj("answer", [ok, bad], 4), traj("length", [bad], 2)], "r")
  assert stats["r/tool_calls_per_trajectory"] == 1.5
  assert stats["r/tool_error_rate"] == pytest.approx(2 / 3)
  assert stats["r/tool_errors/bad_arguments"] == 2
  assert stats["r/finish/answer"] == 0.5 and stats["r/finish/length"] == 0.5
  assert stats["r/sampled_tokens_mean"] == 3.0


def test_name_init_by_kind_gives_each_kind_a_shared_direction():
  import dataclasses  # pylint: disable=g-import-not-at-top
  from arenarl_jax.models import config as model_config  # pylint: disable=g-import-not-at-top
  from arenarl_jax.models.transformer import make_model  # pylint: disable=g-import-not-at-top
  from arenarl_jax.sft import name_init  # pylint: disable=g-import-not-at-top
  kinds = {"Nortor": "city", "Zarven": "city", "Jade Lotus Noodle House": "place",
           "Western Moon Temple": "place", "Golden Crane Hotel": "place"}
  tok = task_tokenizer.train_bpe(TEXTS, vocab_size=320, whole=tuple(kinds))
  cfg = dataclasses.replace(model_config.get_preset("tiny"), vocab_size=tok.vocab_size,
                            d_model=256, n_heads=8, head_dim=32)
  model = make_model(cfg, seed=0)
  before = np.asarray(model.embed[...]).copy()
  name_init.init_by_kind(model, tok, kinds, seed=0)
  after = np.asarray(model.embed[...])
  ids = name_init.name_ids(tok, kinds)
  assert sorted(map(len, ids.values())) == [4, 6]  # two forms per name
  others = sorted(set(range(tok.vocab_size)) - {i for v in ids.values() for i in v})
  np.testing.assert_array_equal(after[others], before[others])  # only the names move
  unit = after / np.linalg.norm(after, axis=1, keepdims=True)
  cos = unit @ unit.T
  same = [cos[a, b] for v in ids.values() for a in v for b in v if a < b]
  across = [cos[a, b] for a in ids["city"] for b in ids["place"]]
  # Shared part and random part of one scale: cosine 1/2 within a kind, 0 across kinds and
  # against the untouched rows (up to the sampling error of 256 dimensions, ~0.06).
  assert 0.35 < np.mean(same) < 0.65 and abs(np.mean(across)) < 0.15
  assert abs(np.mean(cos[np.ix_(ids["place"], others)])) < 0.05
  model_again = make_model(cfg, seed=0)
  name_init.init_by_kind(model_again, tok, kinds, seed=0)
  np.testing.assert_array_equal(np.asarray(model_again.embed[...]), after)  # seeded
  plain = task_tokenizer.train_bpe(TEXTS, vocab_size=320)
  with pytest.raises(ValueError, match="whole_names"):
    name_init.name_ids(plain, {"Western Moon Temple": "place"})
  with pytest.raises(ValueError, match="model.init.name_init"):
    name_init.check("shared")
  # name_space=apart: one id per name (the space before it is the space's own id).
  apart = task_tokenizer.train_bpe(TEXTS, vocab_size=320, whole=tuple(kinds), name_space="apart")
  one = name_init.name_ids(apart, kinds)
  assert one == {"city": [apart.token_to_id("Nortor"), apart.token_to_id("Zarven")],
                 "place": [apart.token_to_id(n) for n in list(kinds)[2:]]}
