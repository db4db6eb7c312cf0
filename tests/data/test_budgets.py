"""Budgets from the data: every config's sampling limits hold the expert's conversations, measured
in that config's own tokenizer (data/budgets.py), and the measurement counts what the rollout
generates."""
import functools
import os

import pytest

from arenarl_jax import config_tree
from arenarl_jax.data import budgets
from arenarl_jax.envs import base
from arenarl_jax.models.settings import ModelSettings
from arenarl_jax.sft import policy
from arenarl_jax.text import chat_format
from arenarl_jax.text import messages as msgs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Every config file whose tokenizer exists offline. qwen3_8b_pod.py reads its tokenizer from the
# checkpoint directory it is given (``ckpt=``), which this machine does not have.
CONFIGS = ("quickstart", "research_quickstart", "smollm2_travel")
OFFLINE_MISSING = ("qwen3_8b_pod",)


def test_every_config_file_is_either_checked_or_named_as_missing_its_tokenizer():
  names = {f[:-3] for f in os.listdir(os.path.join(ROOT, "configs")) if f.endswith(".py")}
  assert names == set(CONFIGS) | set(OFFLINE_MISSING)


@functools.lru_cache(maxsize=None)
def _environment(name: str, seed: int) -> base.Environment:
  return base.make_environment(name, seed=seed)


@pytest.mark.parametrize("name", CONFIGS)
def test_the_sampling_limits_fit_the_experts_conversations(name):
  config = config_tree.load_config_file(os.path.join(ROOT, "configs", f"{name}.py"))
  env = _environment(config.env.name, int(config.env.seed))
  tokenizer = policy.make_tokenizer(ModelSettings.from_config(config.model), env,
                                    schemas=config.env.schemas)
  measured = budgets.measure(env, tokenizer, schemas=config.env.schemas,
                             system=config.rollout.system)
  assert [b.subtask for b in measured] == list(env.subtasks)  # every subtask the config uses
  assert all(b.conversations >= 40 for b in measured)
  misfits = [m for b in measured for m in b.misfits(config.sampling)]
  assert not misfits, f"configs/{name}.py:\n" + "\n".join(misfits)


class _Chars:
  """A tokenizer with one id per character (control frames included): counts are lengths."""
  plain_backend = None

  def encode(self, text):
    return [ord(c) for c in text]


def test_counts_are_the_generated_tokens_of_each_turn(monkeypatch):
  tok = _Chars()
  monkeypatch.setattr(msgs, "encode_plain", lambda _, text: [ord(c) for c in text])
  convo = [{"role": "user", "content": "q"},
           {"role": "assistant", "content": "", "tool_calls": [
               {"name": "f", "arguments": "{}"}]},
           {"role": "tool", "content": "result"},
           {"role": "assistant", "content": "answer"}]
  turns, tool_turns, total = budgets.conversation_counts(tok, convo, tools=())
  call = chat_format.render_assistant("", "", [{"name": "f", "arguments": "{}"}])
  # A generated turn is its body and <|im_end|>, in one id per character here.
  assert turns == [len(call) + len(chat_format.IM_END), len("answer") + len(chat_format.IM_END)]
  assert tool_turns == 1
  assert total == len(msgs.encode_segments(tok, msgs.render_segments(convo, tools=()))[0])
  assert total == len(chat_format.render_messages(msgs.to_chat(convo)))


def test_a_limit_below_the_expert_is_named():
  b = budgets.Budget("search", 50, turn_p99=300, turn_max=310, max_tool_turns=2,
                     max_conversation=2000)
  fits = {"max_new_tokens": 300, "max_turns": 2, "cache_len": 2000}
  assert not b.misfits(fits)
  out = b.misfits({"max_new_tokens": 299, "max_turns": 1, "cache_len": 1999})
  assert len(out) == 3
  assert "max_new_tokens=299" in out[0] and "max_turns=1" in out[1] and "cache_len=1999" in out[2]
