"""The travel environment: determinism across processes, splits, validity, expert messages."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from arenarl_jax.text import messages
from arenarl_jax.envs import base
from arenarl_jax.envs.travel import tasks as tasks_lib

SMALL = {"train_per_subtask": 30, "test_per_subtask": 6}
_FINGERPRINT = ("from arenarl_jax.envs import base; import sys; "
                "print(base.make_environment('travel', seed=int(sys.argv[1]), "
                "train_per_subtask=30, test_per_subtask=6).fingerprint())")


@pytest.fixture(scope="module")
def env():
  return base.make_environment("travel", seed=0)


def test_same_seed_same_world_and_tasks_in_a_fresh_process():
  here = base.make_environment("travel", seed=5, **SMALL).fingerprint()
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  envvars = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""),
                 PYTHONHASHSEED="123")
  out = subprocess.run([sys.executable, "-c", _FINGERPRINT, "5"], capture_output=True,
                       text=True, check=True, env=envvars, cwd=root)
  assert out.stdout.strip() == here and len(here) == 64
  other = base.make_environment("travel", seed=6, **SMALL)
  assert other.fingerprint() != here
  assert other.world.cities != base.make_environment("travel", seed=5, **SMALL).world.cities


def test_splits(env):
  train, sft = env.tasks("train"), env.tasks("sft")
  assert len(train) >= 1000 and len({t.id for t in train}) == len(train)
  assert {t.subtask for t in train} == set(tasks_lib.SUBTASKS)
  assert sft == [t for t in train if t.subtask != "multi_day"]
  train_keys = {json.dumps(t.constraints, sort_keys=True) for t in train}
  train_ids = {t.id for t in train}
  for sub in env.subtasks:
    test = env.tasks(f"test_{sub}")
    assert len(test) == 50 and {t.subtask for t in test} == {sub}
    assert not train_ids & {t.id for t in test}
    assert not train_keys & {json.dumps(t.constraints, sort_keys=True) for t in test}
  for t in train[::97]:
    assert re.fullmatch(r"travel/(search|direction|compare|one_day|multi_day)/\d{6}", t.id)
    assert t.env == "travel" and t.id.split("/")[1] == t.subtask
    assert env.task(t.id) == t
  with pytest.raises(ValueError, match="unknown split"):
    env.tasks("test_flying")
  with pytest.raises(ValueError, match="travel/<subtask>/<index>"):
    env.task("travel/search/abc")


def test_queries_state_constraints_in_varied_wording(env):
  train = env.tasks("train")
  for sub in env.subtasks:
    queries = [t.query for t in train if t.subtask == sub]
    openings = {q.split()[0] for q in queries}
    assert len(openings) >= 2, (sub, openings)  # more than one template per subtask
  for t in train[::50]:
    c = t.constraints
    for key in ("max_price", "max_cost", "budget", "hotel_max", "radius"):
      if key in c:
        assert str(c[key]) in t.query, (t.id, key)


def test_config_keys_and_reference_rate():
  env = base.make_environment("travel", seed=1, tool_max_chars=300, reference_error_rate=1.0,
                              **SMALL)
  assert len(env.tasks("train")) == 5 * SMALL["train_per_subtask"]
  assert len(env.tasks("test_compare")) == SMALL["test_per_subtask"]
  r = env.tool_source().call_sync("search_poi", {"city": env.world.cities[0].name,
                                                 "keyword": "attractions"})
  assert r.ok and "[truncated:" in r.text and r.text.index("[truncated:") < 310
  task = env.tasks("test_search")[0]
  assert env.reference(task, 4) == env.expert(task, 1.0, 4) != env.expert(task, 0.0, 4)
  with pytest.raises(ValueError, match="reference_error_rate"):
    base.make_environment("travel", seed=1, reference_error_rate=2.0)


def test_valid(env):
  assert env.valid("") == (False, "empty answer")
  assert env.valid("   \n") == (False, "empty answer")
  assert env.valid("It depends.") == (True, "")
  one_day, multi_day = env.tasks("test_one_day")[0], env.tasks("test_multi_day")[0]
  assert env.valid("Go early.", one_day) == (False, "the plan names no concrete place")
  assert env.valid("Visit Jade Lotus Museum.", one_day.id) == (False,
                                                              "the plan gives no time (HH:MM)")
  assert env.valid("Visit Jade Lotus Museum at 10:00.", multi_day) == (True, "")
  assert env.valid("Go early.", env.tasks("test_search")[0]) == (True, "")


def test_expert_writes_reference_messages_through_the_tools(env):
  for sub in env.subtasks:
    task = env.tasks(f"test_{sub}")[0]
    msgs = env.expert(task, 0.3, 7)
    assert msgs == env.expert(task, 0.3, 7)  # deterministic
    assert msgs[0] == {"role": "user", "content": task.query}
    assert msgs[-1]["role"] == "assistant" and msgs[-1]["content"] and "tool_calls" not in msgs[-1]
    steps = messages.steps_from_messages(msgs)
    src = env.tool_source()
    for step in steps:
      for call, result in zip(step.tool_calls, step.tool_results):
        assert src.call_sync(call.name, call.arguments).text == result
    assert env.valid(msgs[-1]["content"], task) == (True, "")
    assert messages.messages_from_steps(task.query, steps)[-1]["content"] == msgs[-1]["content"]
