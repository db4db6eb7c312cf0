"""The rollout on the travel environment: a scripted policy that replays the expert through the
real travel tools gets the checker's maximum, and SmolLM2 rolls out on the travel tools end to end."""
import jax
import numpy as np
import pytest

from arenarl_jax.text import chat_format
from arenarl_jax.text import messages as msgs
from arenarl_jax.envs import base
from arenarl_jax.rollout.agent_loop import Rollout
from arenarl_jax.rollout.settings import RolloutSettings
from arenarl_jax.sampling.sampler import Sampler, SamplingSettings
from arenarl_jax.types import TRAJECTORY_FINISH_REASONS
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


def test_smollm2_rolls_out_on_the_travel_tools(env, tok, smollm2):
  _, model = smollm2
  sampler = Sampler(model, cache_len=1536)
  tasks = [env.tasks("test_search")[0], env.tasks("test_compare")[0]]
  sampling = SamplingSettings(temperature=0.8, max_new_tokens=24, eos_ids=(tok.eos_id,))
  rollout = Rollout(sampler, tok, RolloutSettings(max_turns=1, max_observation_tokens=128),
                    sampling)
  batch = rollout.run(tasks, env.tool_source(), group_size=4, key=jax.random.key(1),
                      valid=env.valid)
  for task, group in zip(tasks, batch.trajectories):
    assert len(group) == 4 and group[0].metadata["greedy"]
    for traj in group:
      assert traj.finish_reason in TRAJECTORY_FINISH_REASONS
      n = traj.metadata["prompt_len"]
      assert not traj.loss_mask[:n].any() and traj.loss_mask.sum() > 0
      assert np.all(traj.logprobs[traj.loss_mask == 0] == 0)
      assert traj.metadata["task_id"] == task.id
      scores = env.checker(traj)  # the checker scores any policy output without failing
      assert all(0 <= v <= 10 for part in scores.values() for v in part.values())
