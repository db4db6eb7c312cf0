"""ChatML tool chat format: exact rendering, parser round trip, prefix + increments == whole."""
import pytest

from arenarl_jax.text import chat_format as cf
from arenarl_jax.text import tool_calls
from arenarl_jax.types import ToolCall

WEATHER = {"name": "weather", "description": "Weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}
WEATHER_JSON = ('{"type": "function", "function": {"name": "weather", "description": '
                '"Weather in a city", "parameters": {"type": "object", "properties": {"city": '
                '{"type": "string"}}, "required": ["city"]}}}')


def test_plain_conversation_matches_smollm2_template_shape():
  msgs = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]
  assert cf.render_messages(msgs, add_generation_prompt=True) == (
      "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
      "<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
      "<|im_start|>assistant\n")
  assert cf.render_messages(msgs, default_system=None) == (
      "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n")


def test_exact_tool_conversation():
  msgs = [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Weather in Rome?"},
      {"role": "assistant", "reasoning": "Ask the tool.", "content": None,
       "tool_calls": [{"name": "weather", "arguments": {"city": "Rome"}}]},
      {"role": "tool", "content": "sunny, 25°C"},
      {"role": "assistant", "content": "Sunny, 25°C."},
  ]
  tools_block = cf.TOOLS_INSTRUCTIONS.format(tools=WEATHER_JSON)
  assert "<tools>\n" + WEATHER_JSON + "\n</tools>" in tools_block
  assert ('<tool_call>\n{"name": "<function-name>", "arguments": {"<argument-name>": <value>}}\n'
          '</tool_call>') in tools_block
  assert cf.render_messages(msgs, tools=[WEATHER]) == (
      f"<|im_start|>system\nBe brief.\n\n{tools_block}<|im_end|>\n"
      "<|im_start|>user\nWeather in Rome?<|im_end|>\n"
      "<|im_start|>assistant\n<think>\nAsk the tool.\n</think>\n"
      '<tool_call>\n{"name": "weather", "arguments": {"city": "Rome"}}\n</tool_call><|im_end|>\n'
      "<|im_start|>user\n<tool_response>\nsunny, 25°C\n</tool_response><|im_end|>\n"
      "<|im_start|>assistant\nSunny, 25°C.<|im_end|>\n")


def test_tool_schema_forms_render_the_same():
  wrapped = {"type": "function", "function": WEATHER}
  assert cf.render_tools_prompt([WEATHER]) == cf.render_tools_prompt([wrapped])
  without_system = cf.render_messages([{"role": "user", "content": "x"}], tools=[WEATHER],
                                      default_system=None)
  assert without_system.startswith("<|im_start|>system\n# Tools\n\n")


def test_consecutive_tool_messages_share_one_turn():
  msgs = [{"role": "tool", "content": "A"}, {"role": "tool", "content": "B"},
          {"role": "user", "content": "u"}, {"role": "tool", "content": "C"}]
  assert cf.render_messages(msgs, default_system=None) == (
      "<|im_start|>user\n<tool_response>\nA\n</tool_response>\n<tool_response>\nB\n"
      "</tool_response><|im_end|>\n<|im_start|>user\nu<|im_end|>\n"
      "<|im_start|>user\n<tool_response>\nC\n</tool_response><|im_end|>\n")


def test_assistant_with_reasoning_and_two_calls_round_trips():
  calls = [ToolCall("search_poi", {"query": "café", "region": "巴黎"}),
           {"function": {"name": "direction", "arguments": '{"origin": "1,2", "mode": "walking"}'}}]
  body = cf.render_assistant("First find cafés,\nthen route.", "On it.", calls)
  assert body == (
      "<think>\nFirst find cafés,\nthen route.\n</think>\nOn it.\n"
      '<tool_call>\n{"name": "search_poi", "arguments": {"query": "café", "region": "巴黎"}}\n'
      "</tool_call>\n"
      '<tool_call>\n{"name": "direction", "arguments": {"origin": "1,2", "mode": "walking"}}\n'
      "</tool_call>")
  assert tool_calls.parse_turn(body + cf.IM_END) == tool_calls.ParsedTurn(
      reasoning="First find cafés,\nthen route.", content="On it.",
      tool_calls=(ToolCall("search_poi", {"query": "café", "region": "巴黎"}),
                  ToolCall("direction", {"origin": "1,2", "mode": "walking"})))


STEPS = [
    (dict(reasoning="r1", content="", tool_calls=[ToolCall("a", {"x": 1}),
                                                 ToolCall("b", {"y": [2]})]), ["A out", "B out"]),
    (dict(reasoning="", content="one more", tool_calls=[ToolCall("c", {})]), ["C out"]),
]


@pytest.mark.parametrize("close_previous", [True, False])
def test_prefix_plus_increments_equals_whole(close_previous):
  history = [{"role": "user", "content": "Plan a day in Paris."}]
  text = cf.render_messages(history, tools=[WEATHER], add_generation_prompt=True)
  for turn, results in STEPS:
    generated = cf.render_assistant(**turn) + ("" if close_previous else cf.IM_END)
    text += generated + cf.render_tool_turn(results, close_previous=close_previous)
    history.append({"role": "assistant", **turn})
    history.extend({"role": "tool", "content": r} for r in results)
    assert text == cf.render_messages(history, tools=[WEATHER], add_generation_prompt=True)
  final = {"role": "assistant", "reasoning": "done", "content": "Go to the Louvre."}
  text += cf.render_assistant("done", "Go to the Louvre.") + cf.IM_END + "\n"
  assert text == cf.render_messages(history + [final], tools=[WEATHER])


def test_tool_turn_without_generation_prompt():
  assert cf.render_tool_turn(["x"], add_generation_prompt=False) == (
      "<|im_end|>\n<|im_start|>user\n<tool_response>\nx\n</tool_response><|im_end|>\n")


@pytest.mark.parametrize("messages, error, match", [
    ([{"role": "robot", "content": "x"}], ValueError, r"messages\[0\]: role 'robot'"),
    ([{"role": "user", "content": 3}], TypeError, r"messages\[0\]: content must be a str"),
    ([{"role": "user", "content": "x", "tool_calls": [ToolCall("a")]}], ValueError,
     r"messages\[0\]: only assistant"),
    (["hello"], TypeError, r"messages\[0\] must be a dict"),
    ([{"role": "assistant", "tool_calls": [{"arguments": {}}]}], ValueError, "no \"name\""),
    ([{"role": "assistant", "tool_calls": [{"name": "a", "arguments": "[1]"}]}], ValueError,
     "must be a JSON object, got an array"),
    ([{"role": "assistant", "tool_calls": [{"name": "a", "arguments": "{bad"}]}], ValueError,
     "not valid JSON"),
])
def test_bad_messages_raise(messages, error, match):
  with pytest.raises(error, match=match):
    cf.render_messages(messages)


def test_bad_tools_and_results_raise():
  with pytest.raises(ValueError, match=r"tools\[1\] has no function \"name\""):
    cf.render_tools_prompt([WEATHER, {"description": "nameless"}])
  with pytest.raises(ValueError, match="at least one"):
    cf.render_tool_turn([])
  with pytest.raises(TypeError, match="tool result 1"):
    cf.render_tool_turn(["ok", None])
