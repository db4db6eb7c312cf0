"""messages.py: reference format <-> steps round trips, and messages -> ids + loss mask, whose
incremental build (what the rollout appends) equals the full render."""
import json

import numpy as np
import pytest

from arenarl_jax.text import chat_format
from arenarl_jax.text import messages as msgs
from arenarl_jax import types
from arenarl_jax.testing.rollout_fakes import smollm2_tokenizer

TOOLS = [{"name": "search_poi", "description": "Points of interest.",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
         {"name": "get_weather", "description": "Weather.",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]


def fn(call_id, name, **args):
  return {"id": call_id, "type": "function",
          "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}


CONVERSATIONS = [
    # Reasoning, two calls in one turn, a tool error, then a final answer with reasoning.
    [{"role": "system", "content": "You plan trips."},
     {"role": "user", "content": "A day in Paris, with the weather?"},
     {"role": "assistant", "content": "", "reasoning_content": "I need POIs and weather.",
      "tool_calls": [fn("call_0_0", "search_poi", city="Paris"),
                     fn("call_0_1", "get_weather", city="Paris")]},
     {"role": "tool", "tool_call_id": "call_0_0", "content": "[{\"name\": \"Louvre\"}]"},
     {"role": "tool", "tool_call_id": "call_0_1", "content": "Error: get_weather: not found"},
     {"role": "assistant", "content": "Let me retry.", "reasoning_content": "Weather failed.",
      "tool_calls": [fn("call_1_0", "get_weather", city="Paris, FR")]},
     {"role": "tool", "tool_call_id": "call_1_0", "content": "sunny, 21°C"},
     {"role": "assistant", "content": "Visit the Louvre; it will be sunny.",
      "reasoning_content": "Done."}],
    # No system message, a plain answer, non-ASCII and control-token text in a tool result.
    [{"role": "user", "content": "Café near the Eiffel Tower?"},
     {"role": "assistant", "content": "", "tool_calls": [fn("call_0_0", "search_poi", city="Paris")]},
     {"role": "tool", "tool_call_id": "call_0_0", "content": "Café <|im_end|> Kléber"},
     {"role": "assistant", "content": "Try Café Kléber."}],
]


@pytest.fixture(scope="module")
def tok():
  return smollm2_tokenizer()


@pytest.mark.parametrize("conv", CONVERSATIONS)
def test_messages_round_trip_through_steps(conv):
  steps = msgs.steps_from_messages(conv)
  assert all(isinstance(s, types.Step) for s in steps)
  system = conv[0]["content"] if conv[0]["role"] == "system" else None
  back = msgs.messages_from_steps(msgs.query_of(conv), steps, system=system)
  assert back == conv
  assert msgs.steps_from_messages(back) == steps
  traj = msgs.trajectory_from_messages(conv, finish_reason="answer")
  assert traj.final_answer == conv[-1]["content"] and traj.steps == steps


def test_round_trip_hand_worked_steps():
  steps = msgs.steps_from_messages(CONVERSATIONS[0])
  assert [len(s.tool_calls) for s in steps] == [2, 1, 0]
  assert steps[0].tool_results[1] == "Error: get_weather: not found"
  assert steps[0].reasoning == "I need POIs and weather."
  assert steps[1].tool_calls[0] == types.ToolCall("get_weather", {"city": "Paris, FR"})


@pytest.mark.parametrize("conv", CONVERSATIONS)
def test_render_ids_and_mask_follow_the_chat_format(tok, conv):
  ids, mask = msgs.render_ids(tok, conv, tools=TOOLS)
  assert len(ids) == len(mask) and msgs.render_sft(conv, tok, TOOLS) == (ids, mask)
  text = chat_format.render_messages(msgs.to_chat(conv), tools=TOOLS)
  assert tok.decode(ids) == text
  assert "<tools>" in text and '"search_poi"' in text  # rendered with its tools
  # The mask covers exactly each assistant body and its <|im_end|>.
  mask = np.asarray(mask, bool)
  trained = []
  for m in msgs.to_chat(conv):
    if m["role"] == "assistant":
      trained.append(chat_format.render_assistant(m.get("reasoning", ""), m["content"],
                                                  m.get("tool_calls", ())) + chat_format.IM_END)
  runs, cur = [], []
  for i, on in zip(ids, mask):
    if on:
      cur.append(i)
    elif cur:
      runs.append(cur)
      cur = []
  assert [tok.decode(r) for r in runs] == trained
  if conv is CONVERSATIONS[0]:  # reasoning is trained, inside its think block
    assert trained[0].startswith("<think>\nI need POIs and weather.\n</think>\n<tool_call>")
  # Control ids only in the frame: 2 per turn (<|im_start|>, <|im_end|>).
  turns = text.count("<|im_start|>") - conv[-1]["content"].count("<|im_start|>")
  assert sum(i in tok.special_ids for i in ids) == 2 * turns


@pytest.mark.parametrize("conv", CONVERSATIONS)
@pytest.mark.parametrize("tools", [TOOLS, None])
def test_incremental_ids_equal_the_full_render(tok, conv, tools):
  """ChatML + Hermes tools is append-only: the prompt, each assistant turn's ids, and each
  observation the rollout appends concatenate to the render of the whole conversation."""
  chat = msgs.to_chat(conv)
  first = next(k for k, m in enumerate(conv) if m["role"] == "assistant")
  ids, mask = msgs.render_ids(tok, conv[:first], tools=tools, add_generation_prompt=True)
  k = first
  while k < len(conv):
    m = chat[k]
    body = chat_format.render_assistant(m.get("reasoning", ""), m["content"],
                                        m.get("tool_calls", ()))
    sampled = msgs.encode_plain(tok, body) + [tok.token_to_id(chat_format.IM_END)]
    ids, mask = ids + sampled, mask + [1] * len(sampled)
    k += 1
    results = []
    while k < len(conv) and conv[k]["role"] == "tool":
      results.append(conv[k]["content"])
      k += 1
    if results:
      obs, obs_mask = msgs.encode_segments(tok, msgs.observation_segments(
          results, close_previous=False))
      assert not any(obs_mask)
      ids, mask = ids + obs, mask + obs_mask
  tail = tok.encode("\n")  # the full render closes the last turn with a newline
  full_ids, full_mask = msgs.render_ids(tok, conv, tools=tools)
  assert ids + tail == full_ids
  assert mask + [0] == full_mask


def test_bad_messages_name_index_and_field(tok):
  with pytest.raises(msgs.MessageError, match=r"messages\[1\]\.role"):
    msgs.render_ids(tok, [{"role": "user", "content": "x"}, {"role": "bot", "content": "y"}])
  with pytest.raises(msgs.MessageError, match=r"messages\[1\]\.tool_calls\[0\]\.function\.arg"):
    msgs.steps_from_messages([{"role": "user", "content": "x"},
                              {"role": "assistant", "tool_calls": [
                                  {"function": {"name": "f", "arguments": "{oops"}}]}])
