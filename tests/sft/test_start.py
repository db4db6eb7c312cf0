"""The pinned start's record and staleness rule (sft/start.py), by hand; the build and load path
runs end to end in tests/test_pipeline_smoke.py."""
import json
import os
import sys

import pytest

from arenarl_jax import config_tree
from arenarl_jax.sft import start
from arenarl_jax.sft.settings import StartSettings

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _quickstart(arg):
  sys.path.insert(0, os.path.join(ROOT, "configs"))
  import quickstart  # pylint: disable=import-outside-toplevel
  return quickstart.get_config(arg)


def _build_settings(config):
  return start.build_settings(config_tree.flat(config))


def _check(config):
  return start.check(StartSettings.from_config(config.start), config_tree.flat(config))


def test_build_settings_hold_what_the_build_reads_and_nothing_else():
  settings = _build_settings(_quickstart("build_start"))
  for key in ("seed", "model.init.preset", "sft.steps", "sft.lr", "data.sft_seq_len",
              "env.name", "eval.split", "sampling.max_new_tokens"):
    assert key in settings, key
  for key in ("optim.lr", "rl.steps", "loss.kl_coef", "sampling.temperature", "judge.backend",
              "sft.log_every", "data.dir", "env.travel.wrong_fact_cost", "start.name"):
    assert key not in settings, key
  assert settings["eval.split"] == "valid"
  assert start.settings_hash(settings) == start.settings_hash(dict(reversed(settings.items())))


def test_staleness_rule_both_ways():
  defaults = {"a": 1, "b": "x", "new": 0}
  recorded = {"a": 1, "b": "x"}
  assert start.stale_keys(recorded, {"a": 1, "b": "x"}, defaults) == []
  # A key added later at the value that keeps the old behaviour changes nothing ...
  assert start.stale_keys(recorded, {"a": 1, "b": "x", "new": 0}, defaults) == []
  # ... at another value it does, and so do a changed and a removed key.
  assert start.stale_keys(recorded, {"a": 1, "b": "x", "new": 3}, defaults) == ["new"]
  assert start.stale_keys(recorded, {"a": 2, "b": "x"}, defaults) == ["a"]
  assert start.stale_keys(recorded, {"a": 1}, defaults) == ["b"]
  # With the real defaults: a key the build reads, absent from an old record, at its default.
  now = _build_settings(_quickstart("build_start"))
  old = {k: v for k, v in now.items() if k != "sft.copy_steps"}
  assert start.stale_keys(old, now) == []
  assert start.stale_keys(old, {**now, "sft.copy_steps": 100}) == ["sft.copy_steps"]


def test_check_names_the_keys_that_differ(tmp_path):
  config = _quickstart("build_start")
  settings = _build_settings(config)
  (tmp_path / start.START_FILE).write_text(json.dumps(
      {"settings": {**settings, "sft.lr": 1.0}}))
  with config.unlocked():
    config.start.dir = str(tmp_path)
  assert _check(config) == [f"sft.lr: 1.0 -> {config.sft.lr!r}"]
  with config.unlocked():
    config.optim.lr = 0.5  # RL settings are not the build's business
  assert len(_check(config)) == 1
  with config.unlocked():
    config.start.dir = str(tmp_path / "missing")
  with pytest.raises(FileNotFoundError, match="no pinned start"):
    _check(config)


def test_in_job_and_loads():
  s = StartSettings()
  assert s.in_job(10) and not s.loads and not s.in_job(0)
  s = StartSettings(name="travel_quickstart")
  assert not s.in_job(10) and s.loads
  s = StartSettings(name="travel_quickstart", build=True)
  assert s.in_job(10) and not s.loads


def test_dataset_name_and_curve_summary(tmp_path):
  assert start.dataset_name("/c/arena_dataset/travel-seed0-abc/1.0.0") == "travel-seed0-abc"
  assert start.dataset_name("/c/arena_dataset/travel-seed0-abc") == "travel-seed0-abc"
  sft = tmp_path / "sft"
  sft.mkdir()
  rows = [{"step": 10 * k, "loss": 5.0 / k} for k in range(1, 21)]
  (sft / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
  s = start.curve_summary(str(sft))
  assert (s["steps"], s["first_loss"], s["last_loss"]) == (200, 5.0, 0.25)
  assert list(s["loss_by_step"]) == [str(20 * k) for k in range(1, 11)]


# The config (file:arg) that builds each committed start: its staleness is checked against it.
BUILDERS = {"travel_quickstart": ("quickstart", "build_start"),
            "travel_smollm2": ("smollm2_travel", "build_start")}


def test_every_committed_start_is_fresh_against_the_config_that_builds_it():
  """A value its build reads that changed since (a config edit, a new default) makes a committed
  start stale: this fails naming the keys. Every folder under starts/ has a builder here."""
  committed = sorted(os.listdir(start.STARTS_DIR)) if os.path.isdir(start.STARTS_DIR) else []
  assert set(committed) <= set(BUILDERS), f"a start without a builder: {committed}"
  sys.path.insert(0, os.path.join(ROOT, "configs"))
  for name in committed:
    module, arg = BUILDERS[name]
    config = __import__(module).get_config(arg)
    assert config.start.name == name and config.start.build
    assert _check(config) == [], f"{name} is stale (rebuild it: --config=configs/{module}.py:{arg})"
    record = start.read_record(start.start_dir(StartSettings.from_config(config.start)))
    assert record["dirty"] is False, f"{name} was built from a tree with uncommitted changes"
  for module, arg in set(BUILDERS.values()):  # the builders themselves name their start
    config = __import__(module).get_config(arg)
    assert BUILDERS[config.start.name] == (module, arg)
