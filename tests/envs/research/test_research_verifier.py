"""The strict verifier: the expert at error rate 0 solves every test task, every injected error
that touches a requirement unsolves it (naming that requirement), an unfinished trajectory meets
nothing, and requirement names are worked out by hand."""
from __future__ import annotations

import pytest

from arenarl_jax import types
from arenarl_jax.envs import base
from arenarl_jax.envs.research import expert, verifier
from arenarl_jax.text import messages as messages_lib


def _traj(task, msgs, finish=""):
  return messages_lib.trajectory_from_messages(msgs, metadata={"task_id": task.id},
                                               finish_reason=finish)


@pytest.fixture(scope="module")
def test_tasks(env):
  return [t for kind in env.subtasks for t in env.tasks(f"test_{kind}")]


def test_requirement_names_by_hand():
  facts = [{"page": "m.a", "text": "", "terms": []}, {"page": "m.a", "text": "", "terms": []},
           {"page": "m.b", "text": "", "terms": []}]
  writing = base.Task(id="research/technical_writing/000001", env="research",
                      subtask="technical_writing", query="q", constraints={
                          "pages": ["m.a", "m.b"], "facts": facts,
                          "sections": ["Overview", "Usage", "Caveats"]})
  assert verifier.requirements(writing) == [
      "finished", "valid", "section:Overview", "section:Usage", "section:Caveats", "own_words",
      "fact:m.a#1", "fact:m.a#2", "fact:m.b#1", "claims_supported"]
  ideation = base.Task(id="research/ideation/000001", env="research", subtask="ideation",
                       query="q", constraints={"pages": ["m.a", "m.b"], "facts": facts[2:],
                                               "min_ideas": 3})
  assert verifier.requirements(ideation) == ["finished", "valid", "kind", "own_words",
                                             "fact:m.b#1", "claims_supported"]


def test_the_expert_at_error_rate_zero_solves_every_test_task(env, test_tasks):
  assert {t.subtask for t in test_tasks} == set(env.subtasks)
  for task in test_tasks:
    v = env.verify(_traj(task, env.expert(task, 0.0, 0)))
    assert v.solved and v.total == len(verifier.requirements(task)), (task.id, v)


def _fact_names_of_page(task, i):
  page = task.constraints["pages"][i]
  return {n for n, f in zip(verifier.fact_names(task), task.constraints["facts"])
          if f["page"] == page}


@pytest.mark.parametrize("kind", expert.ERROR_KINDS)
def test_each_injected_error_unsolves_the_expert(env, test_tasks, kind):
  """Every error kind touches a requirement on every task: a missed or unread page leaves its
  facts unmet, an invented claim is unsupported, a truncated report loses a section, the ideas
  or facts."""
  for task in test_tasks:
    for site in expert.error_sites(task):
      if site[0] != kind:
        continue
      v = env.verify(_traj(task, env.expert_with_errors(task, {site})))
      assert not v.solved, (task.id, site)
      if kind in ("missed_search", "before_reading"):
        assert _fact_names_of_page(task, site[1]) <= set(v.unmet), (task.id, site, v)
      elif kind == "unsupported_claim":
        assert v.unmet == ("claims_supported",), (task.id, site, v)


@pytest.mark.parametrize("finish", ["length", "max_turns", "invalid", "error", "unanswered",
                                    "no steps"])
def test_an_unfinished_trajectory_meets_nothing(env, finish):
  task = env.tasks("test_ideation")[0]
  msgs = env.expert(task, 0.0, 0)
  total = len(verifier.requirements(task))
  if finish == "no steps":
    traj = types.Trajectory(query=task.query, metadata={"task_id": task.id})
  elif finish == "unanswered":
    traj = _traj(task, msgs + [{"role": "assistant", "content": "Let me check.", "tool_calls": [
        {"id": "late", "type": "function",
         "function": {"name": "web_search", "arguments": '{"query": "more"}'}}]}], "answer")
  else:
    traj = _traj(task, msgs, finish)
  facts = len(verifier.fact_names(task))  # only the facts are content
  assert env.verify(traj) == base.Verification(met=0, total=total, unmet=("finished",),
                                               content_met=0, content_total=facts)


def test_memorised_and_pasted_answers_are_not_solved(env):
  task = env.tasks("test_explanation")[0]
  msgs = env.expert(task, 0.0, 0)
  facts = set(verifier.fact_names(task))
  memorised = env.verify(_traj(task, msgs[:1] + msgs[-1:]))  # the right report, nothing read
  assert facts <= set(memorised.unmet) and "claims_supported" in memorised.unmet
  pasted = "\n\n".join(m["content"] for m in msgs if m["role"] == "tool")
  copied = env.verify(_traj(task, msgs[:-1] + [{"role": "assistant", "content": pasted}]))
  assert "own_words" in copied.unmet and not copied.solved
  assert copied.as_dict()["unmet"] == list(copied.unmet)


def test_verify_needs_a_known_task_id(env):
  with pytest.raises(ValueError, match="task_id"):
    env.verify(types.Trajectory(query="q"))
  with pytest.raises(KeyError, match="unknown task id"):
    env.verify(types.Trajectory(query="q", metadata={"task_id": "research/ideation/999999"}))
