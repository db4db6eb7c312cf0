"""Parser of generated assistant turns: exact outputs on well-formed and malformed turns."""
import pytest

from arenarl_jax.text import chat_format
from arenarl_jax.text import tool_calls
from arenarl_jax.text.tool_calls import ParsedTurn
from arenarl_jax.types import Step, ToolCall

parse = tool_calls.parse_turn


def test_plain_answer_is_final():
  got = parse("The capital of France is Paris.<|im_end|>")
  assert got == ParsedTurn(content="The capital of France is Paris.")
  assert got.is_final


def test_reasoning_content_and_two_calls():
  text = ('<think>\nI need the museum and the weather.\n</think>\nLet me look.\n'
          '<tool_call>\n{"name": "search_poi", "arguments": {"query": "museum", "limit": 3}}\n'
          '</tool_call>\n<tool_call>\n{"name": "weather", "arguments": {"city": "Paris"}}\n'
          '</tool_call>')
  got = parse(text)
  assert got == ParsedTurn(
      reasoning="I need the museum and the weather.", content="Let me look.",
      tool_calls=(ToolCall("search_poi", {"query": "museum", "limit": 3}),
                  ToolCall("weather", {"city": "Paris"})))
  assert not got.is_final


def test_round_trip_through_renderer():
  calls = (ToolCall("search_poi", {"query": "musée d'Orsay", "tags": ["art", "🎨"], "n": 2.5}),
           ToolCall("get_navigation", {"origin": "1,2", "nested": {"a": None}}))
  body = chat_format.render_assistant("Plan:\n1. search\n2. route", "Working on it.", calls)
  assert parse(body) == ParsedTurn("Plan:\n1. search\n2. route", "Working on it.", calls)
  assert parse(body + "<|im_end|>") == parse(body)


def test_extra_whitespace_around_and_inside_calls():
  text = ('  \n<tool_call>  \n\n {"name":  " a ",\n  "arguments": {"x": 1}}  \n </tool_call>\n\n\n'
          '<tool_call>{"name":"b","arguments":{}}</tool_call>   \n')
  assert parse(text) == ParsedTurn(tool_calls=(ToolCall("a", {"x": 1}), ToolCall("b", {})))


def test_code_fence_inside_call():
  text = ('<tool_call>\n```json\n{"name": "a", "arguments": {"q": "x"}}\n```\n</tool_call>\n'
          '<tool_call>```{"name": "b", "arguments": {}}```</tool_call>')
  assert parse(text) == ParsedTurn(tool_calls=(ToolCall("a", {"q": "x"}), ToolCall("b", {})))


def test_arguments_as_json_string_or_missing():
  text = ('<tool_call>{"name": "a", "arguments": "{\\"city\\": \\"Rome\\"}"}</tool_call>'
          '<tool_call>{"name": "b"}</tool_call>'
          '<tool_call>{"name": "c", "arguments": ""}</tool_call>')
  assert parse(text) == ParsedTurn(
      tool_calls=(ToolCall("a", {"city": "Rome"}), ToolCall("b", {}), ToolCall("c", {})))


def test_malformed_calls_are_reported_and_valid_ones_kept():
  text = ('Trying.\n'
          '<tool_call>{"name": "a", "arguments": {"x": 1}</tool_call>\n'  # missing brace
          '<tool_call>{"name": "ok", "arguments": {"y": 2}}</tool_call>\n'
          '<tool_call>{"name": "b", "arguments": [1, 2]}</tool_call>\n'
          '<tool_call>{"name": "c", "arguments": 7}</tool_call>\n'
          '<tool_call>{"name": "d", "arguments": "{oops"}</tool_call>\n'
          '<tool_call>{"arguments": {}}</tool_call>\n'
          '<tool_call>{"name": 3}</tool_call>\n'
          '<tool_call>[1]</tool_call>\n'
          '<tool_call>  </tool_call>')
  got = parse(text)
  assert got.content == "Trying."
  assert got.tool_calls == (ToolCall("ok", {"y": 2}),)
  assert got.errors == (
      "tool call 1: invalid JSON: Expecting ',' delimiter (line 1, column 36) in "
      "'{\"name\": \"a\", \"arguments\": {\"x\": 1}'",
      "tool call 3: \"arguments\" of 'b' must be a JSON object, got an array",
      "tool call 4: \"arguments\" of 'c' must be a JSON object, got a number",
      "tool call 5: \"arguments\" of 'd' is a string that is not valid JSON: "
      "Expecting property name enclosed in double quotes",
      "tool call 6: missing \"name\" in '{\"arguments\": {}}'",
      "tool call 7: \"name\" must be a non-empty string, got a number in '{\"name\": 3}'",
      "tool call 8: expected a JSON object, got an array",
      "tool call 9: empty call",
  )
  assert not got.is_final


def test_only_malformed_call_is_not_final():
  got = parse('<tool_call>{"name": "a", "arguments": {</tool_call>')
  assert got.tool_calls == () and len(got.errors) == 1 and not got.is_final


def test_unclosed_think_runs_to_end():
  assert parse("<think>Let me plan the trip") == ParsedTurn(reasoning="Let me plan the trip")


def test_unclosed_think_stops_at_a_tool_call():
  text = '<think>I will search\n<tool_call>{"name": "a", "arguments": {}}</tool_call>'
  assert parse(text) == ParsedTurn(reasoning="I will search", tool_calls=(ToolCall("a", {}),))


def test_close_think_without_open_came_from_prompt():
  assert parse("thinking...\n</think>\n\nParis.") == ParsedTurn(reasoning="thinking...",
                                                                content="Paris.")


def test_several_think_blocks_and_calls_inside_think_are_ignored():
  text = ('<think>a <tool_call>{"name": "no", "arguments": {}}</tool_call></think>mid'
          '<think>b</think>end')
  assert parse(text) == ParsedTurn(
      reasoning='a <tool_call>{"name": "no", "arguments": {}}</tool_call>\nb', content="mid\nend")


def test_unclosed_call_at_end_accepted_when_valid():
  text = 'Ok.\n<tool_call>\n{"name": "a", "arguments": {"k": "v"}}\n<|im_end|>'
  assert parse(text) == ParsedTurn(content="Ok.", tool_calls=(ToolCall("a", {"k": "v"}),))


def test_unclosed_truncated_call_is_an_error():
  got = parse('<tool_call>{"name": "a", "argu')
  assert got == ParsedTurn(errors=(
      "tool call 1: invalid JSON: Unterminated string starting at (line 1, column 15) in "
      "'{\"name\": \"a\", \"argu' (and no </tool_call>)",))


def test_unclosed_call_ends_at_next_call():
  text = ('<tool_call>{"name": "a", "arguments": {}}\n'
          '<tool_call>{"name": "b", "arguments": {"z": 0}}</tool_call> after')
  assert parse(text) == ParsedTurn(content="after",
                                   tool_calls=(ToolCall("a", {}), ToolCall("b", {"z": 0})))


def test_stray_close_tag_stays_content():
  assert parse("Sure. </tool_call> done") == ParsedTurn(content="Sure. </tool_call> done")


def test_long_snippet_is_cut():
  body = '{"name": "a", "arguments": {"text": "' + "x" * 100 + '"'
  (err,) = parse(f"<tool_call>{body}</tool_call>").errors
  assert err.endswith(" in " + repr(body[:60] + "..."))


def test_deep_nesting_does_not_raise():
  got = parse("<tool_call>" + "[" * 100_000 + "</tool_call>")
  assert got.tool_calls == () and len(got.errors) == 1


def test_every_prefix_parses_without_raising():
  text = chat_format.render_assistant(
      "r", "c", [ToolCall("a", {"x": [1, {"y": "z"}]}), ToolCall("b", {})]) + "<|im_end|>"
  for k in range(len(text) + 1):
    got = parse(text[:k])
    assert isinstance(got.reasoning, str) and isinstance(got.content, str)
    assert all(isinstance(c, ToolCall) for c in got.tool_calls)
  assert len(parse(text).tool_calls) == 2


def test_end_tokens_stripped_only_at_end():
  assert parse("a<|im_end|>b<|endoftext|>\n<|im_end|> \n") == ParsedTurn(content="a<|im_end|>b")


def test_to_step():
  parsed = parse('<think>r</think>c<tool_call>{"name": "a", "arguments": {"q": 1}}</tool_call>')
  assert tool_calls.to_step(parsed, ["result"]) == Step(
      reasoning="r", content="c", tool_calls=(ToolCall("a", {"q": 1}),), tool_results=("result",))
  assert tool_calls.to_step(parse("done")) == Step(content="done")
  with pytest.raises(TypeError, match=r"tool_results\[0\]"):
    tool_calls.to_step(parsed, [{"not": "a string"}])


@pytest.mark.parametrize("arguments, expected", [
    ({"q": 1}, ({"q": 1}, "")),
    ('{"q": 1}', ({"q": 1}, "")),
    ("  ", ({}, "")),  # a blank string is no arguments
    ("[1]", (None, "must be a JSON object, got an array")),
    (None, (None, "must be a JSON object, got null")),  # a model's `"arguments": null`
    ("{oops", (None, "is a string that is not valid JSON: "
                     "Expecting property name enclosed in double quotes")),
    ("[" * 100_000, (None, "is a string that is not valid JSON: nested too deeply")),
])
def test_parse_arguments_is_the_one_rule(arguments, expected):
  # Model output, reference data and tool sources all parse arguments here.
  assert tool_calls.parse_arguments(arguments) == expected
