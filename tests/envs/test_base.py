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
