"""tools/start_reproduction.py: a pinned start, loaded in a fresh process with XLA's default
flags, greedily rolls out validation tasks to the per-task met its START.json recorded."""
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from arenarl_jax.models import backend
from arenarl_jax.sft import start as start_lib
from arenarl_jax.tools import start_reproduction as sr

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMOLLM2_START = os.path.join(ROOT, "arenarl_jax", "starts", "travel_smollm2")


def _task(subtask, i):
  return SimpleNamespace(id=f"travel/{subtask}/{i}", subtask=subtask)


def test_chosen_tasks_are_the_first_of_each_chosen_subtask_in_order():
  tasks = [_task(s, i) for s in ("search", "compare", "one_day") for i in range(3)]
  got = sr.chosen_tasks(tasks, ["one_day", "search"], 2)
  assert [t.id for t in got] == ["travel/search/0", "travel/search/1", "travel/one_day/0",
                                 "travel/one_day/1"]
  assert len(sr.chosen_tasks(tasks, [], 1)) == 3
  with pytest.raises(ValueError, match="'direction'"):
    sr.chosen_tasks(tasks, ["direction"], 1)
  with pytest.raises(ValueError, match="tasks_per_subtask"):
    sr.chosen_tasks(tasks, [], 0)


def test_compare_counts_tasks_whose_met_and_total_equal_the_record():
  recorded = {"a": {"met": 3, "total": 4}, "b": {"met": 1, "total": 2}, "c": {"met": 0, "total": 5}}
  lines, out = sr.compare(recorded, {"a": (3, 4, "answer"), "b": (2, 2, "answer")})
  assert out["tasks"] == 2 and out["matched"] == 1
  assert out["met"] == pytest.approx((0.75 + 1.0) / 2)
  assert out["recorded_met"] == pytest.approx((0.75 + 0.5) / 2)
  assert lines[2].endswith("| yes |") and lines[3].endswith("| NO |")
  with pytest.raises(KeyError, match="'z'"):
    sr.compare(recorded, {"z": (0, 1, "answer")})


def test_tolerance_is_exact_on_the_building_kind_and_one_task_elsewhere():
  assert sr.reproduces(3, 3, "avx512", "avx512")
  assert not sr.reproduces(2, 3, "avx512", "avx512")
  assert sr.reproduces(2, 3, "avx2", "avx512")
  assert sr.reproduces(2, 3, "avx512+amx", "avx512")  # AMX tiles: another kind
  assert not sr.reproduces(1, 3, "avx2", "avx512")


def test_pinned_smollm2_start_reproduces_its_recorded_validation_met(smollm2_cache_dir):
  """The committed ``travel_smollm2`` start (the wheel's SmolLM2 plus the stored rank-24 delta,
  its base digest checked) rolls out two search and two direction tasks in one batch of 4 (the
  build rolled out waves of 20), a new process with XLA's default flags on one CPU device as the
  build had; the tool's tolerance decides (exact on the building CPU kind). Search and direction
  answers are the shortest. ``--cache=full``: one cache size, so one decode program to compile
  where the run's ladder of sizes compiles one per size (7 for these rows), which took a third of
  this test's time; the cache size is one more shape, like the batch's, that the record must
  survive."""
  record = start_lib.read_record(SMOLLM2_START)
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  result = subprocess.run(
      [sys.executable, "-m", "arenarl_jax.tools.start_reproduction",
       "--config=configs/smollm2_travel.py:build_start", "--subtasks=search,direction",
       "--tasks_per_subtask=2", "--cache=full", f"--set=model.cache_dir={smollm2_cache_dir}"],
      cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  line = result.stdout.strip().splitlines()[-1]
  out = dict(item.split("=", 1) for item in line.split()[1:])
  assert out["tasks"] == "4" and out["reproduced"] == "1" and out["cache"] == "full"
  assert out["recorded_cpu"] == record["cpu"] and out["cpu"] == backend.cpu_kind(amx=True)
  if out["cpu"] == record["cpu"]:
    assert out["matched"] == "4" and out["met"] == out["recorded_met"]
  for task in ("travel/search/800000", "travel/search/800001", "travel/direction/800000",
               "travel/direction/800001"):
    want = record["validation"]["tasks"][task]
    assert f"| {task} | {want['met']} / {want['total']} |" in result.stdout
