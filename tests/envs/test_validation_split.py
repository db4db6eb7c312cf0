"""The validation split: ``valid_<subtask>`` tasks disjoint from train and test, for choosing
settings; the test tasks are exactly what they were before it existed; ``eval.split`` picks it."""
import hashlib

import pytest

from arenarl_jax.envs import base
from arenarl_jax.eval import compare

# SHA-256 (first 16 hex digits) of every test task's id, query and constraints, per environment,
# as they were before the validation split was added: adding it must move no test task.
TEST_TASKS = {"travel": "875bece64fca9e2a", "research": "18a4361b95a8f3fc"}


def _digest(env, prefix):
  rows = [(t.id, t.query, sorted(map(str, t.constraints.items())))
          for s in env.subtasks for t in env.tasks(f"{prefix}_{s}")]
  return hashlib.sha256(repr(rows).encode()).hexdigest()[:16]


@pytest.fixture(scope="module", params=["travel", "research"])
def env(request):
  return base.make_environment(request.param, 0)


def test_test_tasks_are_unchanged(env):
  assert _digest(env, "test") == TEST_TASKS[env.name]


def test_validation_tasks_are_disjoint_from_train_and_test(env):
  def key(t):
    return repr(sorted(map(str, t.constraints.items())))

  for s in env.subtasks:
    valid, test = env.tasks(f"valid_{s}"), env.tasks(f"test_{s}")
    train = [t for t in env.tasks("train") if t.subtask == s]
    assert len(valid) == len(test) and all(t.subtask == s for t in valid)
    ids = {t.id for t in valid}
    assert len(ids) == len(valid) and not ids & {t.id for t in test + train}
    keys = {key(t) for t in valid}
    assert len(keys) == len(valid) and not keys & {key(t) for t in test + train}
    assert env.task(valid[0].id) == valid[0]  # found by id, like any task
  assert _digest(env, "valid") == _digest(base.make_environment(env.name, 0), "valid")


def test_eval_split_picks_the_tasks(env):
  settings = compare.EvalSettings(split="valid", tasks_per_subtask=2)
  tasks = compare.eval_tasks(env, settings)
  assert [t.id for t in tasks] == [t.id for s in env.subtasks for t in env.tasks(f"valid_{s}")[:2]]
  default = compare.eval_tasks(env, compare.EvalSettings(tasks_per_subtask=1))
  assert [t.id for t in default] == [env.tasks(f"test_{s}")[0].id for s in env.subtasks]
