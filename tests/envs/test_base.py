"""envs/base.py: the environment registry keyed by env.name."""
from __future__ import annotations

import pytest

from arenarl_jax.envs import base


def test_registry_builds_travel_and_rejects_unknown_names():
  assert "travel" in base.registered()
  env = base.make_environment("travel", seed=3, train_per_subtask=2, test_per_subtask=1)
  assert env.name == "travel" and env.seed == 3 and env.rubric == "travel"
  assert isinstance(env, base.Environment)
  with pytest.raises(ValueError, match="env.name: unknown environment 'nope'"):
    base.make_environment("nope")


def test_register_twice_is_an_error_and_same_factory_is_fine():
  def factory(seed=0):
    return seed

  try:
    assert base.register("test_only_env")(factory) is factory
    base.register("test_only_env")(factory)  # the same factory again (a re-import) is fine
    assert base.make_environment("test_only_env", seed=7) == 7
    with pytest.raises(ValueError, match="registered twice"):
      base.register("test_only_env")(lambda seed=0: seed)
  finally:
    base._REGISTRY.pop("test_only_env", None)


def test_make_environment_from_config_passes_common_and_own_keys():
  from arenarl_jax import config_tree
  cfg = config_tree.make_base_config().env
  cfg.seed, cfg.tool_max_chars, cfg.reference_error_rate = 4, 321, 0.6
  cfg.travel.train_per_subtask, cfg.travel.test_per_subtask = 3, 2
  env = base.make_environment_from_config(cfg)
  assert (env.name, env.seed, env.reference_error_rate) == ("travel", 4, 0.6)
  assert env.tool_source().max_chars == 321
  assert len(env.tasks("train")) == 3 * len(env.subtasks)
  cfg.name = "research"
  research = base.make_environment_from_config(cfg)
  assert (research.name, research.reference_error_rate) == ("research", 0.6)
