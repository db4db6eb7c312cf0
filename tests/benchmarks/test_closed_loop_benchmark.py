"""benchmarks/closed_loop.py's verdict on hand-built curves (its runs are the closed-loop test's
machinery, ``tests/rl/test_closed_loop.py``; the quickstart's settings take minutes)."""
import importlib.util
import os

import pytest

import closed_loop as bench  # benchmarks/closed_loop.py (the suite's conftest.py puts it on the path)
from arenarl_jax import config_tree
from arenarl_jax.testing import closed_loop


def _curves(none0, perm0, none1, perm1):
  return {"none_s0": none0, "permute_s0": perm0, "none_s1": none1, "permute_s1": perm1}


def test_learned_needs_every_gain_and_every_twin_flat():
  start = [(0, 0.5)]
  out = bench.summary(_curves(start + [(9, 0.9)], start + [(9, 0.3)],
                              [(0, 0.3), (9, 0.45)], [(0, 0.3), (9, 0.3)]), [0, 1])
  assert out["learned"] == 1
  assert out["gain_s0"] == pytest.approx(0.4) and out["gain_s1"] == pytest.approx(0.15)
  assert out["permute_change_s0"] == pytest.approx(-0.2) and out["permute_change_s1"] == 0
  assert out["margin_min"] == pytest.approx(0.15)  # seed 1: 0.45 against 0.3
  small_gain = bench.summary(_curves(start + [(9, 0.55)], start + [(9, 0.3)],
                                     [(0, 0.3), (9, 0.45)], [(0, 0.3), (9, 0.3)]), [0, 1])
  assert small_gain["learned"] == 0
  twin_rose = bench.summary(_curves(start + [(9, 0.9)], start + [(9, 0.52)],
                                    [(0, 0.3), (9, 0.45)], [(0, 0.3), (9, 0.3)]), [0, 1])
  assert twin_rose["learned"] == 0


def test_the_quickstart_settings_are_the_quickstarts_rl_keys():
  path = os.path.join(os.path.dirname(__file__), "..", "..", "configs", "quickstart.py")
  spec = importlib.util.spec_from_file_location("quickstart_config", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  config = module.get_config()
  flat = config_tree.flat(config.to_dict())
  for dotted, value in closed_loop.SETTINGS["quickstart"].rl.items():
    assert flat[dotted] == value, dotted
  assert config.sampling.group_size == closed_loop.SETTINGS["quickstart"].group
  assert config.rl.prompts_per_step == closed_loop.SETTINGS["quickstart"].prompts
