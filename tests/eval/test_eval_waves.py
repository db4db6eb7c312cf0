"""eval.max_rows: the evaluation's rollouts in waves sample what one batch samples."""
import os
import sys

import pytest
from flax import nnx

from arenarl_jax import pipeline
from arenarl_jax.envs import base

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "configs"))
import quickstart  # noqa: E402  pylint: disable=wrong-import-position


def test_waves_of_rows_roll_out_what_one_batch_does(tmp_path):
  config = quickstart.get_config("smoke")
  with config.unlocked():
    config.eval.tasks_per_subtask = 1  # 5 tasks
    config.eval.group_size = 2  # row 1 of each group samples: its key must follow its index
    config.eval.greedy = False
  env = base.make_environment_from_config(config.env)
  mesh = pipeline.make_mesh(config)
  policy = pipeline.make_policy(config, str(tmp_path), env, mesh)
  params = nnx.to_pure_dict(nnx.split(policy.model)[1])  # the random start
  calls = []

  def rollouts(max_rows):
    with config.unlocked():
      config.eval.max_rows = max_rows
    evaluator = pipeline.make_evaluator(config, env, policy, str(tmp_path), mesh)
    run = evaluator.rollout.run
    evaluator.rollout.run = lambda tasks, *a, **k: calls.append(len(tasks)) or run(tasks, *a, **k)
    return evaluator.rollouts(params)

  one, split = rollouts(0), rollouts(4)  # waves of 2, 2 and 1 tasks
  assert calls == [5, 2, 2, 1]
  assert len(one) == len(split) == 10
  for a, b in zip(one, split):
    assert (a.metadata["task_id"], a.metadata.get("greedy")) == (
        b.metadata["task_id"], b.metadata.get("greedy"))
    assert a.messages == b.messages and a.finish_reason == b.finish_reason
  # The sampled rows differ from their greedy rows: the check has teeth.
  assert any(one[i].messages != one[i + 1].messages for i in range(0, 10, 2))


def test_max_rows_is_checked():
  from arenarl_jax.eval import settings  # pylint: disable=import-outside-toplevel
  with pytest.raises(ValueError, match="eval.max_rows"):
    settings.EvalSettings(max_rows=-1)
