"""What the travel checker and verifier tests share: the world, its test tasks by subtask, and
the expert's conversation as a trajectory."""
import pytest

from arenarl_jax.envs import base
from arenarl_jax.text import messages

SEED = 0


@pytest.fixture(scope="module")
def env():
  return base.make_environment("travel", seed=SEED)


@pytest.fixture(scope="module")
def tests_by_subtask(env):  # pylint: disable=redefined-outer-name
  return {s: env.tasks(f"test_{s}") for s in env.subtasks}


def expert_trajectory(env, task, rate, rng, **kw):  # pylint: disable=redefined-outer-name
  """The expert's conversation for ``task`` at error rate ``rate`` (``kw``: its ``kinds``)."""
  msgs = env.expert(task, rate, rng, **kw)
  return messages.trajectory_from_messages(msgs, metadata={"task_id": task.id})
