"""The research environment: registered under env.name=research, keeps the Environment contract."""
from __future__ import annotations

import pytest

from arenarl_jax.envs import base
from arenarl_jax.envs.research import environment, tasks
from arenarl_jax.judges import rubric as rubric_lib


def test_registered_and_built_from_the_registry(cache_dir, env):
  assert "research" in base.registered()
  built = base.make_environment("research", seed=0, cache_dir=cache_dir)
  assert isinstance(built, environment.ResearchEnvironment)
  assert isinstance(built, base.Environment)
  assert built.name == "research" and built.rubric in rubric_lib.BUILTIN
  assert built.subtasks == tasks.KINDS
  assert built.corpus.digest == env.corpus.digest
  assert built.tasks("test_ideation") == env.tasks("test_ideation")


def test_splits_and_errors(env):
  assert {s for s in ("train", "sft", *(f"{split}_{k}" for k in env.subtasks
                                        for split in ("test", "valid")))} == set(env._splits)
  with pytest.raises(ValueError, match="unknown split 'test'"):
    env.tasks("test")
  t = env.tasks("sft")[5]
  assert env.task(t.id) == t
  env.tasks("sft").clear()  # callers get a copy
  assert env.tasks("sft")[5] == t


def test_tool_source_is_shared_by_the_expert(env):
  source = env.tool_source()
  assert [s["name"] for s in source.tools()] == ["web_search", "open_page"]
  task = env.tasks("test_explanation")[1]
  msgs = env.expert(task, 0.0, 0)
  opened = [m for m in msgs if m["role"] == "tool" and m["content"].startswith("# ")]
  page = task.constraints["pages"][0]
  assert opened[0]["content"] == source.call_sync("open_page", {"page_id": page}).text


@pytest.mark.parametrize("kind", tasks.KINDS)
def test_the_experts_turns_name_the_headings_its_report_has(env, kind):
  # The report's kind is restated in the agent's own turns, so the writing turn need not reach
  # back past the tool results to the query to know which headings to write.
  msgs = env.expert(env.tasks(f"valid_{kind}")[0], 0.0, 0)
  plan, reading, report = [m["content"] for m in msgs if m["role"] == "assistant"]
  headings = [line[3:] for line in report.splitlines() if line.startswith("## ")]
  named = "under the headings " + ", ".join(headings[:-1]) + " and " + headings[-1]
  assert plan.endswith(f"from what the pages say, {named}.") and named in reading
  assert env.valid(report, env.tasks(f"valid_{kind}")[0]) == (True, "")
