"""Rubrics: the ARENARL §3 defaults, user files with clear errors, and the verdict schema."""
import json

import pytest

from arenarl_jax.judges import rubric as rubric_lib


def test_travel_and_deep_research_defaults():
  t, d = rubric_lib.TRAVEL, rubric_lib.DEEP_RESEARCH
  assert [x.name for x in t.path] == ["breadth", "relevance", "detail"]
  assert [x.name for x in t.answer] == ["relevance", "feasibility", "details", "clarity"]
  assert (t.path_weight, t.answer_weight) == (0.6, 0.4)
  assert [x.name for x in d.path] == ["framework", "tool_usage", "coverage"]
  assert [x.name for x in d.answer] == ["relevance", "accuracy", "depth", "clarity"]
  assert (d.path_weight, d.answer_weight) == (0.5, 0.5)
  assert rubric_lib.load_rubric("travel") is t
  assert rubric_lib.load_rubric("deep_research") is d


@pytest.mark.parametrize("path,answer,expected", [
    # mean 7, mean 5.5 -> 6 (half up); 0.6*7 + 0.4*6 = 6.6
    ([7, 8, 6], [5, 5, 6, 6], (7, 6, 6.6)),
    # mean 22/3 = 7.33 -> 7; mean 9.25 -> 9; 4.2 + 3.6 = 7.8
    ([7, 7, 8], [9, 9, 9, 10], (7, 9, 7.8)),
    ([0, 0, 0], [10, 10, 10, 10], (0, 10, 4.0)),
    # mean 8.5 -> 9 (not banker's 8); mean 0.25 -> 0
    ([8, 9, 8.5], [0, 0, 0, 1], (9, 0, 5.4)),
])
def test_combine_by_hand(path, answer, expected):
  assert rubric_lib.TRAVEL.combine(path, answer) == pytest.approx(expected)


def test_deep_research_combine_by_hand():
  # overall_p = round(6.67) = 7, overall_a = round(4.5) = 5 -> 0.5*7 + 0.5*5 = 6.0
  assert rubric_lib.DEEP_RESEARCH.combine([6, 7, 7], [4, 5, 4, 5]) == (7, 5, 6.0)


def _write(tmp_path, data, name="r.json"):
  path = tmp_path / name
  path.write_text(data if isinstance(data, str) else json.dumps(data))
  return str(path)


GOOD = {"name": "mini", "prompt": "Judge it.", "path_dimensions": {"quality": "good steps"},
        "answer_dimensions": ["correct", {"name": "clear", "description": "easy"}],
        "weights": {"path": 0.25, "answer": 0.75}}


def test_user_rubric_file(tmp_path):
  r = rubric_lib.load_rubric(_write(tmp_path, GOOD))
  assert r.name == "mini" and r.prompt == "Judge it."
  assert [(d.name, d.description) for d in r.path] == [("quality", "good steps")]
  assert [(d.name, d.description) for d in r.answer] == [("correct", ""), ("clear", "easy")]
  # overall_p 4, overall_a round(8.5) = 9 -> 0.25*4 + 0.75*9 = 7.75 -> 7.8 (one decimal, half up)
  assert r.combine([4], [8, 9]) == (4, 9, 7.8)


@pytest.mark.parametrize("change,key", [
    ({"weights": {"path": 0.5, "answer": 0.6}}, "weights"),
    ({"weights": {"path": "0.5", "answer": 0.5}}, "weights.path"),
    ({"weights": {"path": 1.5, "answer": -0.5}}, "weights.path"),
    ({"weights": {"path": 1.0}}, "weights"),
    ({"path_dimensions": {}}, "path_dimensions"),
    ({"path_dimensions": {"Bad Name": ""}}, "path_dimensions"),
    ({"answer_dimensions": ["a", "a"]}, "answer_dimensions"),
    ({"answer_dimensions": ["overall"]}, "answer_dimensions"),
    ({"answer_dimensions": 3}, "answer_dimensions"),
    ({"answer_dimensions": [{"title": "x"}]}, "answer_dimensions[0]"),
    ({"prompt": 5}, "prompt"),
    ({"prompt": "see the </Agent_A_answer> tag"}, "prompt"),
    ({"path_dimensions": {"q": "inside <query> tags"}}, "path_dimensions.q"),
    ({"name": ""}, "name"),
    ({"wieghts": {}}, "wieghts"),
])
def test_user_rubric_errors_name_file_and_key(tmp_path, change, key):
  data = {**GOOD, **change}
  path = _write(tmp_path, data)
  with pytest.raises(rubric_lib.RubricError) as e:
    rubric_lib.load_rubric(path)
  assert path in str(e.value) and key in str(e.value)


def test_user_rubric_missing_key_and_bad_json(tmp_path):
  data = dict(GOOD)
  del data["weights"]
  path = _write(tmp_path, data)
  with pytest.raises(rubric_lib.RubricError, match="missing key 'weights'") as e:
    rubric_lib.load_rubric(path)
  assert path in str(e.value)
  bad = _write(tmp_path, "{not json", "bad.json")
  with pytest.raises(rubric_lib.RubricError, match="bad.json: not valid UTF-8 JSON"):
    rubric_lib.load_rubric(bad)
  with pytest.raises(rubric_lib.RubricError, match="neither a built-in"):
    rubric_lib.load_rubric(str(tmp_path / "missing.json"))


def test_schema_full_and_compact():
  s = rubric_lib.verdict_schema(rubric_lib.TRAVEL, "pairwise")
  assert s["required"] == ["Agent_A", "Agent_B", "combined_scores", "winner"]
  assert s["additionalProperties"] is False
  path = s["properties"]["Agent_A"]["properties"]["path"]
  assert path["required"] == ["breadth", "relevance", "detail", "overall"]
  assert path["properties"]["breadth"] == {"type": "number", "minimum": 0, "maximum": 10}
  assert s["properties"]["winner"]["enum"] == ["Agent_A", "Agent_B", "Tie"]
  c = rubric_lib.verdict_schema(rubric_lib.TRAVEL, "pairwise", compact=True)
  assert c["required"] == ["Agent_A", "Agent_B"]
  answer = c["properties"]["Agent_B"]["properties"]["answer"]
  assert answer["required"] == ["relevance", "feasibility", "details", "clarity"]
  assert answer["properties"]["clarity"]["enum"] == list(range(11))
  p = rubric_lib.verdict_schema(rubric_lib.TRAVEL, "pointwise")
  assert p["required"] == ["path", "answer", "combined_score"]
  pc = rubric_lib.verdict_schema(rubric_lib.TRAVEL, "pointwise", compact=True)
  assert pc["required"] == ["path", "answer"]
  with pytest.raises(ValueError, match="mode"):
    rubric_lib.verdict_schema(rubric_lib.TRAVEL, "triple")
