"""A run's config: a config file with its --config overrides, saved in the workdir and read back
over today's defaults."""
import json
import os

import pytest

from arenarl_jax import config_tree, run_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUICKSTART = os.path.join(ROOT, "configs", "quickstart.py")


def test_load_applies_overrides_and_rejects_what_is_not_one():
  c = run_config.load(f"{QUICKSTART}:smoke", ["--config.sampling.group_size", "8",
                                              "--config.eval.greedy=false"])
  assert c.is_locked and c.sampling.group_size == 8 and c.eval.greedy is False
  with pytest.raises(ValueError, match="group_sise"):
    run_config.load(QUICKSTART, ["--config.sampling.group_sise=8"])
  with pytest.raises(ValueError, match="invalid literal"):
    run_config.load(QUICKSTART, ["--config.sampling.group_size=many"])
  with pytest.raises(ValueError, match="bogus"):
    run_config.load(QUICKSTART, ["--bogus=1"])
  with pytest.raises(ValueError, match=r"unexpected arguments \['stray'\]"):
    run_config.load(QUICKSTART, ["stray"])
  with pytest.raises(FileNotFoundError, match="nope.py"):
    run_config.load(os.path.join(ROOT, "configs", "nope.py"))


def test_a_written_config_reads_back_locked(tmp_path):
  c = run_config.load(f"{QUICKSTART}:smoke", ["--config.seed=7"])
  path = run_config.write(str(tmp_path / "run"), c)
  assert path == str(tmp_path / "run" / run_config.CONFIG_FILE)
  back = run_config.read(str(tmp_path / "run"))
  assert back.is_locked and back.seed == 7
  assert back.to_dict() == c.to_dict()
  assert run_config.read_tree(str(tmp_path / "run")) == json.loads(c.to_json_best_effort())


def test_a_run_saved_before_a_key_existed_reads_with_todays_default(tmp_path):
  tree = config_tree.make_base_config().to_dict()
  del tree["sampling"]["group_size"]
  tree["seed"] = 11
  (tmp_path / "config.json").write_text(json.dumps(tree))
  config = run_config.read(str(tmp_path))
  assert config.seed == 11
  assert config.sampling.group_size == config_tree.make_base_config().sampling.group_size
  with pytest.raises(AttributeError):
    config.sampling.not_a_key = 1  # locked: a typo fails


def test_a_missing_config_names_the_file(tmp_path):
  with pytest.raises(FileNotFoundError, match="config.json"):
    run_config.read(str(tmp_path))


def test_flat_is_the_one_flattening():
  """``config_tree.flat`` reads a saved tree back (tuples as JSON's lists, keys sorted)."""
  assert not hasattr(run_config, "flatten")
  assert config_tree.flat({"e": (1, 2), "a": {"c": {"d": "x"}, "b": 1}}) == {
      "a.b": 1, "a.c.d": "x", "e": [1, 2]}
  assert list(config_tree.flat({"b": 1, "a": 2})) == ["a", "b"]
