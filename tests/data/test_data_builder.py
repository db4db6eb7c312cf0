"""TFDS builders: array_record without TensorFlow, deterministic records, the contract's fields."""
import glob
import json
import os
import subprocess
import sys

import pytest

import data_fakes
from arenarl_jax.text import messages as messages_lib
from arenarl_jax.data import builder, env_examples, records
from arenarl_jax.data.settings import DataSettings
from arenarl_jax.envs import base

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# Built and read back in a fresh interpreter: nothing may import (or even find) TensorFlow.
_CHILD = """
import importlib.util, json, sys
assert importlib.util.find_spec("tensorflow") is None, "tensorflow is installed"
import data_fakes
from arenarl_jax.data import builder
path = builder.build(builder.SourceConfig(env="fake", env_seed=7, error_rate=0.5), sys.argv[1])
out = {}
for split in builder.splits(path):
  src = builder.data_source(path, split)
  out[split] = [{k: v.decode("utf-8") for k, v in src[i].items()} for i in range(len(src))]
assert "tensorflow" not in sys.modules, "tensorflow was imported"
print(json.dumps({"path": path, "splits": out}))
"""


def _record_files(path):
  return {os.path.basename(p): open(p, "rb").read()
          for p in sorted(glob.glob(os.path.join(path, "*.array_record*")))}


def _expected(seed, error_rate):
  env = data_fakes.FakeEnvironment(seed)
  return {split: list(env_examples.split_records(env, split, seed=seed, error_rate=error_rate))
          for split in records.splits_for(env.subtasks)}


def test_build_and_read_back_in_fresh_process_without_tensorflow(tmp_path):
  env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, HERE]))
  proc = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path / "child")], env=env,
                        capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr[-3000:]
  got = json.loads(proc.stdout.strip().splitlines()[-1])
  assert got["splits"] == _expected(7, 0.5)
  # Another process (another PYTHONHASHSEED) wrote the same bytes as this one does.
  here = builder.build(builder.SourceConfig(env="fake", env_seed=7, error_rate=0.5),
                       str(tmp_path / "parent"))
  assert _record_files(got["path"]) == _record_files(here)
  assert len(_record_files(here)) == 4


def test_same_seed_gives_byte_identical_records_and_other_seeds_differ(tmp_path):
  a = builder.build(builder.SourceConfig(env="fake", env_seed=1), str(tmp_path / "a"))
  b = builder.build(builder.SourceConfig(env="fake", env_seed=1), str(tmp_path / "b"))
  c = builder.build(builder.SourceConfig(env="fake", env_seed=2), str(tmp_path / "c"))
  assert os.path.basename(os.path.dirname(a)) == (
      "fake-seed1-err0.3-" + builder.env_code_version("fake")[:12])
  assert _record_files(a) == _record_files(b)
  files_a, files_c = _record_files(a), _record_files(c)
  assert files_a.keys() == files_c.keys()
  assert all(files_a[k] != files_c[k] for k in files_a)


def test_records_follow_the_contract(tmp_path):
  path = builder.build(builder.SourceConfig(env="fake", env_seed=3, error_rate=1.0), str(tmp_path))
  assert builder.splits(path) == {"sft": 6, "test_alpha": 3, "test_beta-2": 3, "train": 12}
  info = builder.load(path).info
  assert str(info.version) == "1.0.0" and "env.seed=3" in info.description
  assert info.metadata["env_seed"] == 3 and info.metadata["source"] == "env"
  env = data_fakes.FakeEnvironment(3)

  train = builder.data_source(path, "train")
  tasks = env.tasks("train")
  for i, task in enumerate(tasks):  # generation order is kept (no write-time shuffle)
    ex = records.Example.from_record(train[i])
    assert (ex.task_id, ex.env, ex.subtask, ex.query) == (task.id, "fake", task.subtask, task.query)
    assert ex.messages == () and ex.reference == ()
    assert ex.prompt_messages() == [{"role": "user", "content": task.query}]
  assert set(train[0]) == set(records.FIELDS)

  sft = records.Example.from_record(builder.data_source(path, "sft")[0])
  # Error rate 0: user, one call, its result, the answer; arguments kept as a JSON string.
  assert [m["role"] for m in sft.messages] == ["user", "assistant", "tool", "assistant"]
  assert json.loads(sft.messages[1]["tool_calls"][0]["function"]["arguments"]) == {
      "key": env.tasks("sft")[0].constraints["key"]}
  assert sft.reference == ()

  test = records.Example.from_record(builder.data_source(path, "test_beta-2")[2])
  assert test.subtask == "beta-2" and test.messages == ()
  # Error rate 1: a wrong lookup first, then the right one.
  assert [m["role"] for m in test.reference] == ["user", "assistant", "tool", "assistant", "tool",
                                                 "assistant"]
  traj = messages_lib.trajectory_from_messages(test.reference)
  assert traj.query == test.query and len(traj.steps) == 3


def test_expert_without_prompt_gets_the_query_first_and_bad_messages_name_the_task(monkeypatch):
  env = data_fakes.FakeEnvironment(0)
  original = env.expert
  monkeypatch.setattr(env, "expert", lambda task, rate, rng: original(task, rate, rng)[1:])
  rec = next(env_examples.split_records(env, "sft", seed=0, error_rate=0.0))
  convo = records.decode_messages(rec["messages"])
  assert convo[0] == {"role": "user", "content": rec["query"]} and len(convo) == 4

  monkeypatch.setattr(env, "expert", lambda task, rate, rng: [{"role": "robot", "content": ""}])
  with pytest.raises(ValueError, match=r"task 'fake/sft/alpha/000000'.*messages\[0\]\.role"):
    next(env_examples.split_records(env, "sft", seed=0, error_rate=0.0))


def test_missing_dataset_and_split_are_clear_errors(tmp_path):
  with pytest.raises(FileNotFoundError, match="no built dataset"):
    builder.load(str(tmp_path))
  path = builder.build(builder.SourceConfig(env="fake"), str(tmp_path))
  with pytest.raises(ValueError, match=r"no split 'test_gamma'.*test_alpha"):
    builder.data_source(path, "test_gamma")
  with pytest.raises(ValueError, match="env.reference_error_rate"):
    builder.SourceConfig(env="fake", error_rate=1.5)
  assert records.test_split("M-Day") == "test_M-Day" and records.test_split("1 day") == "test_1_day"


_VERSIONED_ENV = """
from arenarl_jax.envs import base
import data_fakes

@base.register("fake_versioned")
def make(seed=0, **kwargs):
  return data_fakes.FakeEnvironment(seed, **kwargs)
"""


def test_editing_an_environments_code_names_a_new_dataset(tmp_path, monkeypatch):
  # A cached dataset is found by its name: an edited expert must not be served stale records.
  module = tmp_path / "versioned_env.py"
  module.write_text(_VERSIONED_ENV)
  monkeypatch.syspath_prepend(str(tmp_path))
  import versioned_env  # noqa: F401  (registers fake_versioned)
  before = builder.SourceConfig(env="fake_versioned", env_seed=1).name
  assert builder.SourceConfig(env="fake_versioned", env_seed=1).name == before
  module.write_text(_VERSIONED_ENV.replace("return data_fakes", "return  data_fakes"))
  after = builder.SourceConfig(env="fake_versioned", env_seed=1).name
  assert before.startswith("fake_versioned-seed1-err0.3-") and after != before
  assert after.rsplit("-", 1)[0] == before.rsplit("-", 1)[0]


def _source_name(c):
  return builder.make_source_config(DataSettings.from_config(c.data), c.env).name


def test_settings_that_shape_records_name_a_new_dataset_and_reach_the_environment(tmp_path):
  # A changed split size or tool-output cut must not read the records built without it; a
  # checker-only weight must not rebuild them.
  from arenarl_jax import config_tree
  c = config_tree.make_base_config()
  c.env.name = "travel"
  default = _source_name(c)
  assert "-set" not in default and base.records_settings(c.env) == {}
  c.env.travel.wrong_fact_cost = 1
  assert _source_name(c) == default
  c.env.travel.train_per_subtask = 3
  assert base.records_settings(c.env) == {"train_per_subtask": 3}
  sized = _source_name(c)
  assert sized.startswith(default + "-set") and len(sized) == len(default) + 12
  c.env.tool_max_chars = 300
  assert _source_name(c) not in (default, sized)

  seen = []

  @base.register("fake_settings")
  def make(seed=0, **kwargs):
    seen.append(kwargs)
    return data_fakes.FakeEnvironment(seed, **kwargs)

  path = builder.build(builder.SourceConfig(env="fake_settings", env_settings={
      "tool_max_chars": 7}), str(tmp_path))
  assert seen == [{"tool_max_chars": 7}]
  assert json.loads(builder.load(path).info.metadata["env_settings"]) == {"tool_max_chars": 7}
