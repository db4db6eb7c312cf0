"""rl/experience.py: which training tasks RL draws its prompts from (``rl.subtasks``)."""
import pathlib

import pytest

from arenarl_jax import config_tree, pipeline
from arenarl_jax.envs import base
from arenarl_jax.rl import experience

QUICKSTART = pathlib.Path(__file__).resolve().parents[2] / "configs" / "quickstart.py"


def _tasks():
  return [base.Task(id=f"travel/{s}/{k}", env="travel", subtask=s, query=f"q{k}")
          for k, s in enumerate(["search", "one_day", "compare", "one_day", "multi_day"])]


def test_subtasks_keep_their_tasks_in_order_and_empty_keeps_all():
  tasks = _tasks()
  assert experience.tasks_of_subtasks(tasks, "") == tasks
  got = experience.tasks_of_subtasks(tasks, "multi_day, one_day")
  assert [t.id for t in got] == ["travel/one_day/1", "travel/one_day/3", "travel/multi_day/4"]
  with pytest.raises(ValueError, match=r"rl.subtasks='one_day,plans'.*\['plans'\]"):
    experience.tasks_of_subtasks(tasks, "one_day,plans")
  assert experience.chosen_subtasks(" compare ,search", ("search", "compare")) == [
      "compare", "search"]


def test_the_key_exists_and_a_wrong_subtask_stops_the_pipeline_before_it_builds_anything(
    tmp_path):
  assert config_tree.make_base_config().rl.subtasks == ""
  config = config_tree.load_config_file(f"{QUICKSTART}:smoke")
  config.data.dir = str(tmp_path / "data")
  config.rl.subtasks = "one_day,plans"
  with pytest.raises(ValueError, match=r"\['plans'\] not among the subtasks"):
    pipeline.pipeline(config, str(tmp_path / "run"))
  assert not (tmp_path / "data").exists() and not (tmp_path / "run").exists()
