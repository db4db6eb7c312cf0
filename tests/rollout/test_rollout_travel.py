"""The rollout on the travel environment: a scripted policy that replays the expert through the
real travel tools gets the checker's maximum. (SmolLM2 rolling out on the travel tools end to end
is ``tests/tools/test_start_reproduction.py``: the pinned start's greedy roll-outs, verified, equal
their record.)"""
import jax
import pytest

from arenarl_jax.text import chat_format
from arenarl_jax.text import messages as msgs
from arenarl_jax.envs import base
from arenarl_jax.rollout.agent_loop import Rollout
from arenarl_jax.rollout.settings import RolloutSettings
from arenarl_jax.sampling.sampler import SamplingSettings
from arenarl_jax.testing.rollout_fakes import ScriptedSampler, smollm2_tokenizer

IM_END = 2


@pytest.fixture(scope="module")
def env():
  return base.make_environment("travel", seed=0, train_per_subtask=4, test_per_subtask=2)


@pytest.fixture(scope="module")
def tok():
  return smollm2_tokenizer()


def expert_script(tok, conversations):
  """Row r of task b replays the assistant turns of ``conversations[b]`` (group size 2)."""
  def script(row, turn, seen):
    turns = [m for m in conversations[row // 2] if m["role"] == "assistant"]
    m = msgs.to_chat([turns[min(turn, len(turns) - 1)]])[0]
    body = chat_format.render_assistant(m.get("reasoning") or "", m.get("content") or "",
                                        m.get("tool_calls") or ())
    return msgs.encode_plain(tok, body) + [IM_END]
  return script


def test_replayed_expert_through_the_rollout_gets_the_checkers_maximum(env, tok):
  tasks = [env.tasks(f"test_{s}")[0] for s in env.subtasks]
  conversations = [env.expert(t, 0.0, 11) for t in tasks]
  tool_turns = max(sum(1 for m in c if m.get("tool_calls")) for c in conversations)
  sampler = ScriptedSampler(expert_script(tok, conversations), cache_len=16384)
  rollout = Rollout(sampler, tok, RolloutSettings(max_turns=tool_turns, max_observation_tokens=4096),
                    SamplingSettings(temperature=0.7, max_new_tokens=4096, eos_ids=(IM_END,)))
  batch = rollout.run(tasks, env.tool_source(), group_size=2, key=jax.random.key(0),
                      valid=env.valid)
  for task, convo, group in zip(tasks, conversations, batch.trajectories):
    expected = msgs.steps_from_messages(convo)
    for traj in group:
      assert traj.finish_reason == "answer", (task.id, traj.metadata.get("finish_note"))
      # The rollout's tools answered exactly what the expert's tools answered.
      assert traj.steps == expected, task.id
      scores = env.checker(traj)
      assert all(v == 10 for part in scores.values() for v in part.values()), (task.id, scores)
  assert batch.valid_rate == 1.0
