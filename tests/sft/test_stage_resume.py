"""An SFT stage killed mid-way resumes from its newest checkpoint (``sft.checkpoint_every``) and
ends with the parameters of the stage that was never stopped: the state, the data position of
each phase and the schedule all come back."""
import os
import shutil
import sys

import jax
import numpy as np
import pytest

from arenarl_jax import pipeline, sharding
from arenarl_jax.envs import base
from arenarl_jax.sft import stage

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "configs"))
import quickstart  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position


class Killed(Exception):
  pass


def run_sft(config, workdir):
  mesh = sharding.make_mesh(1, 1, 1, devices=jax.devices()[:1])  # eight fake ones: 8x the time
  env = base.make_environment_from_config(config.env)
  policy = pipeline.make_policy(config, str(workdir), env, mesh)
  params, _ = stage.run(pipeline.sft_settings(config), str(workdir), policy, env, mesh=mesh,
                        data_path=pipeline.dataset_path(config), schemas=config.env.schemas)
  return jax.device_get(params)


def test_a_killed_sft_stage_resumes_to_the_parameters_of_an_unbroken_one(dataset_dir, tmp_path,
                                                                         monkeypatch):
  config = quickstart.get_config("smoke")
  with config.unlocked():
    config.data.dir = dataset_dir
    config.sft.steps = 4  # update 1 on first turns, 2-4 on whole rows
    config.sft.checkpoint_every = 2
    # One width for both phases (rows cut to 256 tokens, padded to it): one program per stage.
    config.data.sft_seq_len = config.data.sft_bucket = config.sft.first_turn_seq_len = 256
    config.data.sft_batch_size = config.sft.first_turn_rows = 2
  unbroken = run_sft(config, tmp_path / "unbroken")
  os.makedirs(tmp_path / "broken")  # the same tokenizer, read back instead of trained again
  shutil.copytree(tmp_path / "unbroken" / "tokenizer", tmp_path / "broken" / "tokenizer")

  make_trainer = stage.make_trainer
  seen = []  # the parameters each update of the broken stage starts from

  def dies_at_the_fourth_update(*args, **kwargs):
    trainer = make_trainer(*args, **kwargs)
    step = trainer.step

    def counted(state, *a, **k):
      seen.append(jax.device_get(state.params))
      if len(seen) == 4:
        raise Killed
      return step(state, *a, **k)
    trainer.step = counted
    return trainer

  with monkeypatch.context() as patch:
    patch.setattr(stage, "make_trainer", dies_at_the_fourth_update)
    with pytest.raises(Killed):
      run_sft(config, tmp_path / "broken")
  saved = sorted(os.listdir(tmp_path / "broken" / "sft" / "checkpoints"))
  assert [name for name in saved if name.isdigit()] == ["2"]  # update 3 was lost, 2 kept

  resumed = run_sft(config, tmp_path / "broken")
  leaves = jax.tree_util.tree_leaves
  for path, leaf in jax.tree_util.tree_leaves_with_path(unbroken):
    np.testing.assert_allclose(dict(jax.tree_util.tree_leaves_with_path(resumed))[path], leaf,
                               rtol=0, atol=1e-6, err_msg=str(path))
  # ... and the comparison has teeth: the two updates after the checkpoint moved the weights by
  # far more than that tolerance (``seen[2]``: after update 2).
  moved = max(float(np.abs(a - b).max()) for a, b in zip(leaves(resumed), leaves(seen[2])))
  assert moved > 1e-4
