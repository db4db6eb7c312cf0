"""tools/headroom.py: what the samples of a group meet that its greedy row does not."""
import json

import numpy as np
import pytest

from arenarl_jax import config_tree
from arenarl_jax.envs import base
from arenarl_jax.text import messages as messages_lib
from arenarl_jax.tools import headroom as hr


def test_requirement_families():
  assert hr.family_of("fact:price:Red Crane Museum") == "fact:price"
  assert hr.family_of("fact:minutes:a -> b: c") == "fact:minutes"
  assert hr.family_of("fact:info") == "fact:info"
  assert [hr.family_of(n) for n in ("count", "budget", "finished")] == ["count", "budget",
                                                                      "finished"]


def test_headroom_by_hand():
  # Task 0: greedy meets 2/4, misses fact:price:X and count; sample 1 meets fact:price:X (3/4),
  # sample 2 meets 1/4. Task 1: greedy unfinished; sample 1 solves it, sample 2 is unfinished.
  # Task 2: greedy solves it; sample 1 too, sample 2 meets 1/2.
  met = [[0.5, 0.75, 0.25], [0.0, 1.0, 0.0], [1.0, 1.0, 0.5]]
  solved = [[False, False, False], [False, True, False], [True, True, False]]
  unmet = [[("fact:price:X", "count"), ("count",), ("fact:price:X", "fact:rating:Y", "count")],
           [("finished",), (), ("finished",)],
           [(), (), ("budget", "schedule")]]
  out = hr.headroom(met, solved, unmet, samples=500)
  assert out["tasks"] == 3 and out["k"] == 2
  assert out["greedy_met"] == pytest.approx(1.5 / 3)
  assert out["sampled_met"] == pytest.approx((0.5 + 0.5 + 0.75) / 3)
  assert out["best_of_k_met"] == pytest.approx((0.75 + 1.0 + 1.0) / 3)
  assert out["headroom"] == pytest.approx((0.25 + 1.0 + 0.0) / 3)
  assert out["headroom"] == pytest.approx(out["best_of_k_met"] - out["greedy_met"])
  assert out["beat_greedy_groups"] == pytest.approx(2 / 3)  # task 2: a tie does not beat
  assert out["greedy_solved"] == pytest.approx(1 / 3)
  assert out["pass_at_k"] == pytest.approx(2 / 3)
  for name in hr.PER_TASK:
    assert out[f"{name}_ci_low"] <= out[name] <= out[f"{name}_ci_high"], name
  assert out["headroom_ci_low"] < out["headroom_ci_high"]
  assert out["families"] == {
      "count": {"missed": pytest.approx(1 / 3), "gained": 0.0},
      "fact:price": {"missed": pytest.approx(1 / 3), "gained": pytest.approx(1 / 3)},
      hr.GREEDY_UNFINISHED: {"missed": pytest.approx(1 / 3), "gained": pytest.approx(1 / 3)}}
  assert "families" not in hr.headroom(met, solved, samples=500)


def test_headroom_edges():
  # A group whose greedy row is best: no headroom, nothing beaten.
  out = hr.headroom([[0.5, 0.5, 0.25], [1.0, 0.0, 1.0]], [[0, 0, 0], [1, 0, 1]], samples=200)
  assert out["headroom"] == 0.0 and out["beat_greedy_groups"] == 0.0
  assert out["pass_at_k"] == 0.5
  one = hr.headroom([[0.0, 1.0]], [[False, True]], samples=200)  # one task: no interval
  assert one["headroom"] == 1.0 and np.isnan(one["headroom_ci_low"])
  with pytest.raises(ValueError, match="G = k"):
    hr.headroom([[0.5], [1.0]], [[False], [True]])


def _row(env, task, index, messages):
  return {"kind": "trajectory", "task_id": task.id, "index": index, "messages": messages,
          "metadata": {"task_id": task.id}, "finish_reason": "answer"}


@pytest.fixture(scope="module")
def travel_groups():
  """Per task: greedy is the expert at error rate 0.9 (unfinished for the first task), the two
  samples the expert at rates 0.0 and 0.5; three search tasks and two compare tasks."""
  env = base.make_environment("travel", seed=0)
  tasks = env.tasks("test_search")[:3] + env.tasks("test_compare")[:2]
  rows = []
  for b, task in enumerate(tasks):
    for g, rate in enumerate((0.9, 0.0, 0.5)):
      messages = env.expert(task, rate, g)
      rows.append(_row(env, task, b * 3 + g, messages[:-1] if b == g == 0 else messages))
  return env, rows


def test_the_command_reports_a_file(travel_groups, tmp_path, capsys):
  env, rows = travel_groups
  config = config_tree.make_base_config()
  config.env.name = "travel"
  config.eval.bootstrap_samples = 300
  (tmp_path / "config.json").write_text(json.dumps(config.to_dict()))
  path = tmp_path / "groups.jsonl"
  path.write_text("".join(json.dumps(r) + "\n" for r in rows[::-1]))
  out = hr.main([f"--workdir={tmp_path}", f"--file={path}"])
  printed = capsys.readouterr().out
  by_task = sorted(rows, key=lambda r: (r["task_id"], r["index"]))  # the report's task order
  verdicts = [env.verify(messages_lib.trajectory_from_messages(
      r["messages"], metadata=r["metadata"])) for r in by_task]
  met_BG = np.array([v.met_rate for v in verdicts]).reshape(5, 3)
  solved_BG = np.array([v.solved for v in verdicts]).reshape(5, 3)
  unmet_BG = [[verdicts[b * 3 + g].unmet for g in range(3)] for b in range(5)]
  expected = hr.headroom(met_BG, solved_BG, unmet_BG, samples=300, seed=0)
  last = printed.splitlines()[-1]
  assert last.startswith("RESULT greedy_met=")
  values = dict(part.split("=") for part in last.split()[1:])
  assert list(values) == list(hr.RESULT_KEYS)
  for key in hr.RESULT_KEYS:
    assert float(values[key]) == pytest.approx(expected[key], abs=5e-5), key
  assert out["families"] == expected["families"]
  assert expected["headroom"] > 0 and expected["pass_at_k"] == 1.0  # the faultless samples
  assert out["families"][hr.GREEDY_UNFINISHED]["gained"] == pytest.approx(1 / 5)
  path.write_text("".join(json.dumps(r) + "\n" for r in rows))
  assert hr.main([f"--workdir={tmp_path}", f"--file={path}"]) == out  # file order is irrelevant
  for line in ("search", "compare", "overall", hr.GREEDY_UNFINISHED):
    assert line in printed


def test_the_command_sets_keys_and_needs_a_source(travel_groups, tmp_path, capsys):
  _, rows = travel_groups
  path = tmp_path / "groups.jsonl"
  path.write_text("".join(json.dumps(r) + "\n" for r in rows))
  # No workdir: the default config's travel environment verifies the file.
  out = hr.main([f"--file={path}", "--set=eval.bootstrap_samples=200", "--set=eval.seed=1"])
  assert out["tasks"] == 5 and out["k"] == 2
  assert capsys.readouterr().out.splitlines()[-1].startswith("RESULT ")
  with pytest.raises(ValueError, match="eval.nothing=1"):
    hr.main([f"--file={path}", "--set=eval.nothing=1"])
  with pytest.raises(SystemExit):
    hr.main([])
  with pytest.raises(ValueError, match="group sizes"):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows[:4]))
    hr.main([f"--file={path}"])


HEADER = {"kind": "summary", "policy": "SFT", "split": "valid", "k": 1, "temperature": 0.8,
          "top_p": 1.0, "top_k": 0, "seed": 0, "tasks_per_subtask": 3, "max_rows": 4}


def _killed_file(path, tail):
  """A roll-out of k = 1 killed after three tasks' groups, then ``tail`` (a half-written line)."""
  rows = [{"kind": "trajectory", "index": i, "task_id": f"t{i // 2}"} for i in range(6)]
  path.write_text("".join(json.dumps(r) + "\n" for r in [HEADER, *rows]) + tail)
  return rows


def test_a_killed_roll_out_resumes_from_its_last_whole_wave(tmp_path):
  path = tmp_path / "eval_valid_k1.jsonl"
  rows = _killed_file(path, '{"kind": "traj')
  # Waves of 2 tasks: the third task's wave never finished, so it is rolled out again.
  assert hr.resume_point(str(path), HEADER, ["t0", "t1", "t2", "t3"], tasks_per_wave=2) == 2
  kept = [json.loads(line) for line in path.read_text().splitlines()]
  assert kept == [HEADER, *rows[:4]]
  # Cutting is idempotent, and waves of one task keep every whole group.
  assert hr.resume_point(str(path), HEADER, ["t0", "t1", "t2"], tasks_per_wave=1) == 2
  _killed_file(path, "")
  assert hr.resume_point(str(path), HEADER, ["t0", "t1", "t2"], tasks_per_wave=1) == 3


@pytest.mark.parametrize("change, match", [
    ({"k": 2}, r"another roll-out's file \(k 1 != 2\)"),
    ({"temperature": 1.0, "max_rows": 8}, r"temperature 0.8 != 1.0; max_rows 4 != 8"),
    ({"top_p": 0.9}, r"top_p 1.0 != 0.9"),
])
def test_resuming_another_roll_outs_file_is_refused(tmp_path, change, match):
  path = tmp_path / "g.jsonl"
  _killed_file(path, "")
  with pytest.raises(ValueError, match=match):
    hr.resume_point(str(path), {**HEADER, **change}, ["t0", "t1", "t2"], tasks_per_wave=1)
  with pytest.raises(ValueError, match=r"trajectory 2 is task 't1' at index 2; this roll-out's "
                     r"is 'u1' at 2"):
    hr.resume_point(str(path), HEADER, ["t0", "u1", "t2"], tasks_per_wave=1)
  path.write_text(json.dumps(HEADER) + "\n{broken\n" + json.dumps(HEADER) + "\n")
  with pytest.raises(ValueError, match=r"g.jsonl:2: not valid JSON"):
    hr.resume_point(str(path), HEADER, ["t0"], tasks_per_wave=1)
  path.write_text(json.dumps({"kind": "trajectory"}) + "\n")
  with pytest.raises(ValueError, match="no summary line first"):
    hr.resume_point(str(path), HEADER, ["t0"], tasks_per_wave=1)


def test_a_summary_without_truncation_keys_resumes_only_untruncated(tmp_path):
  path = tmp_path / "old.jsonl"
  _killed_file(path, "")
  old = {k: v for k, v in HEADER.items() if k not in ("top_p", "top_k")}
  lines = path.read_text().splitlines()
  path.write_text("\n".join([json.dumps(old), *lines[1:]]) + "\n")
  assert hr.resume_point(str(path), HEADER, ["t0", "t1", "t2"], tasks_per_wave=1) == 3
  with pytest.raises(ValueError, match=r"top_k 0 != 40"):
    hr.resume_point(str(path), {**HEADER, "top_k": 40}, ["t0", "t1", "t2"], tasks_per_wave=1)
