"""tools/reward_alignment.py: the checker's order against the verifier's, per group."""
import json

import numpy as np
import pytest

from arenarl_jax import config_tree
from arenarl_jax.envs import base
from arenarl_jax.text import messages as messages_lib
from arenarl_jax.tools import reward_alignment as ra


def test_alignment_by_hand():
  # Task 0: rows 1 and 2 tie first (met 0.4 and 0.2: the pick is 0.3), the anchor meets 0.1.
  # Task 1: row 2 is first (0.3), the anchor meets 0.5; the checker's order is met's reversed
  # on two of three pairs: tau = (1 - 2) / 3. Task 0: two concordant pairs, one tied in score:
  # tau-b = 2 / sqrt(2 * 3).
  out = ra.alignment([[5, 7, 7], [1, 2, 3]], [[0.1, 0.4, 0.2], [0.5, 0.1, 0.3]], samples=200)
  assert out["tasks"] == 2 and out["groups_ordered"] == 1.0
  assert out["tau"] == pytest.approx((2 / np.sqrt(6) - 1 / 3) / 2)
  assert out["pick_gain"] == pytest.approx(((0.3 - 0.7 / 3) + (0.3 - 0.3)) / 2)
  assert out["pick_vs_anchor"] == pytest.approx(((0.3 - 0.1) + (0.3 - 0.5)) / 2)
  assert out["pick_vs_anchor_ci_low"] <= out["pick_vs_anchor"] <= out["pick_vs_anchor_ci_high"]
  flat = ra.alignment([[1, 1], [2, 2]], [[0.0, 1.0], [0.5, 0.5]], samples=200)
  assert flat["groups_ordered"] == 0.0 and np.isnan(flat["tau"])  # no group has an order
  assert flat["pick_gain"] == 0.0  # every row first: the pick is the mean
  with pytest.raises(ValueError, match="G >= 2"):
    ra.alignment([[1.0], [2.0]], [[0.0], [1.0]])


def _row(env, task, index, rate, seed):
  messages = env.expert(task, rate, seed)
  verdict = env.verify(messages_lib.trajectory_from_messages(
      messages, metadata={"task_id": task.id}))
  return {"kind": "trajectory", "task_id": task.id, "index": index, "messages": messages,
          "metadata": {"task_id": task.id}, "finish_reason": "answer", "met": verdict.met,
          "total": verdict.total}


@pytest.fixture(scope="module")
def travel_rows():
  """Per search test task: the anchor is the expert at error rate 0.9, row 1 the faultless one."""
  env = base.make_environment("travel", seed=0)
  tasks = env.tasks("test_search")[:4]
  rows = [_row(env, t, k * 2 + j, rate, seed=j) for k, t in enumerate(tasks)
          for j, rate in enumerate((0.9, 0.0))]
  return env, rows


def test_the_checker_picks_the_faultless_expert_over_a_faulty_anchor(travel_rows):
  env, rows = travel_rows
  out = ra.measure(env, rows[::-1], samples=200)  # file order does not matter, the index does
  met = np.array([r["met"] / r["total"] for r in rows]).reshape(4, 2)
  assert (met[:, 1] > met[:, 0]).all()
  assert out["pick_vs_anchor"] == pytest.approx((met[:, 1] - met[:, 0]).mean())
  assert out["tau"] == 1.0 and out["groups_ordered"] == 1.0


def test_groups_need_equal_sizes_of_at_least_two(travel_rows):
  _, rows = travel_rows
  with pytest.raises(ValueError, match="group sizes"):
    ra.groups(rows[:3])
  with pytest.raises(ValueError, match="group sizes"):
    ra.groups(rows[::2])


def test_the_command_scores_a_workdir_and_sets_env_keys(travel_rows, tmp_path, capsys):
  _, rows = travel_rows
  config = config_tree.make_base_config()
  config.env.name = "travel"
  (tmp_path / "config.json").write_text(json.dumps(config.to_dict()))
  (tmp_path / "eval").mkdir()
  (tmp_path / "eval" / "eval_00000000.jsonl").write_text(
      "".join(json.dumps(r) + "\n" for r in rows))
  out = ra.main([f"--workdir={tmp_path}", "--set=travel.wrong_fact_cost=1"])
  assert capsys.readouterr().out.splitlines()[-1].startswith("RESULT tasks=4 ")
  assert out["pick_vs_anchor"] > 0
  with pytest.raises(ValueError, match="travel.nothing=1"):
    ra.main([f"--workdir={tmp_path}", "--set=travel.nothing=1"])


def test_the_training_judge_without_noise_ranks_as_the_checker(travel_rows, tmp_path, capsys):
  """``--judge``: one step's tournament rewards; with the judge's noise off the tournament
  orders each group as the checker does, so the pick and its gain are the checker's."""
  env, rows = travel_rows
  config = config_tree.make_base_config()
  config.env.name = "travel"
  config_tree.use_noisy_rubric_judge(config)
  for key in ("pointwise_std", "pairwise_std", "position_bias", "saturation"):
    config.judge.noise[key] = 0.0
  (tmp_path / "config.json").write_text(json.dumps(config.to_dict()))
  path = tmp_path / "groups.jsonl"
  path.write_text("".join(json.dumps(r) + "\n" for r in rows))
  judged = ra.main([f"--workdir={tmp_path}", f"--file={path}", "--judge"])
  assert "the training judge's rewards" in capsys.readouterr().out
  checked = ra.measure(env, rows)
  for key in ("pick_gain", "pick_vs_anchor", "tau"):
    assert judged[key] == pytest.approx(checked[key]), key
