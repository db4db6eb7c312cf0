"""Strict verdict parsing: a corpus of replies, arithmetic checks, the combine, the skeleton."""
import json

import numpy as np
import pytest

from arenarl_jax.judges import rubric as rubric_lib
from arenarl_jax.judges import verdict as verdict_lib

R = rubric_lib.TRAVEL
A = verdict_lib.score_agent(R, [7, 8, 6], [5, 5, 6, 6])  # overall 7, 6 -> combined 6.6
B = verdict_lib.score_agent(R, [3, 4, 5], [9, 9, 9, 9])  # overall 4, 9 -> combined 6.0
VALID = verdict_lib.format_verdict(R, "pairwise", [A, B])
VALID_COMPACT = verdict_lib.format_verdict(R, "pairwise", [A, B], compact=True)


def _obj(**changes):
  obj = json.loads(VALID)
  for path, value in changes.items():
    *keys, last = path.split("__")
    node = obj
    for k in keys:
      node = node[k]
    if value is KeyError:
      del node[last]
    else:
      node[last] = value
  return json.dumps(obj)


def test_valid_full_reply_by_hand():
  v = verdict_lib.parse_pairwise(VALID, R)
  assert v.a.path == (7, 8, 6) and v.a.answer == (5, 5, 6, 6)
  assert (v.a.overall_path, v.a.overall_answer, v.a.combined) == (7, 6, 6.6)
  assert (v.b.overall_path, v.b.overall_answer, v.b.combined) == (4, 9, 6.0)
  assert v.winner == "Agent_A" and v.mismatches == 0
  assert json.loads(VALID)["combined_scores"] == {"Agent_A": 6.6, "Agent_B": 6.0}


@pytest.mark.parametrize("reply", [
    VALID,
    "  \n" + VALID + "\n\n",
    "```json\n" + VALID + "\n```",
    "```\n" + VALID + "\n```",
    "```JSON\n" + json.dumps(json.loads(VALID), indent=2) + "\n```\n",
    json.dumps(json.loads(VALID), indent=1),
])
def test_accepted_forms(reply):
  assert verdict_lib.parse_pairwise(reply, R) == verdict_lib.parse_pairwise(VALID, R)


CORPUS = {
    "empty": "",
    "non_json": "Agent_A is better.",
    "extra_text_before": "Here is my verdict: " + VALID,
    "extra_text_after": VALID + " Agent_B wins.",
    "truncated": VALID[:-7],
    "truncated_fence": "```json\n" + VALID,
    "text_after_fence": "```json\n" + VALID + "\n```\nAgent_B wins",
    "two_fences": "```json\n" + VALID + "\n```\n```json\n" + VALID + "\n```",
    "duplicated_object": VALID + "\n" + VALID,
    "duplicated_key": VALID[:-1] + ', "Agent_A": ' + json.dumps(json.loads(VALID)["Agent_B"]) + "}",
    "array": "[" + VALID + "]",
    "string": json.dumps(VALID),
    "nan": _obj(Agent_A__path__breadth=7).replace('"breadth": 7', '"breadth": NaN'),
    "above_range": _obj(Agent_A__path__breadth=11),
    "below_range": _obj(Agent_B__answer__clarity=-1),
    "string_score": _obj(Agent_A__path__detail="6"),
    "bool_score": _obj(Agent_A__path__detail=True),
    "null_score": _obj(Agent_A__path__detail=None),
    "missing_dimension": _obj(Agent_A__answer__clarity=KeyError),
    "missing_agent": _obj(Agent_B=KeyError),
    "missing_winner": _obj(winner=KeyError),
    "missing_overall": _obj(Agent_B__path__overall=KeyError),
    "extra_dimension": _obj(Agent_A__path__speed=5),
    "extra_top_key": _obj(reasoning="because"),
    "bad_winner": _obj(winner="Agent_C"),
    "combined_out_of_range": _obj(combined_scores__Agent_A=12),
    "section_not_object": _obj(Agent_A__path=[7, 8, 6, 7]),
    "deep_nesting": "{" + '"a": [' * 5000 + "]" * 5000 + "}",
    "huge": "{" + " " * 200_000 + "}",
    "not_text": None,
}


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_rejected_replies(name):
  with pytest.raises(verdict_lib.VerdictError):
    verdict_lib.parse_pairwise(CORPUS[name], R)


def test_error_messages_name_the_key():
  with pytest.raises(verdict_lib.VerdictError, match=r"Agent_A\.path\.breadth.*outside"):
    verdict_lib.parse_pairwise(CORPUS["above_range"], R)
  with pytest.raises(verdict_lib.VerdictError, match=r"missing key 'Agent_A\.answer\.clarity'"):
    verdict_lib.parse_pairwise(CORPUS["missing_dimension"], R)
  with pytest.raises(verdict_lib.VerdictError, match="duplicate key"):
    verdict_lib.parse_pairwise(CORPUS["duplicated_key"], R)
  with pytest.raises(verdict_lib.VerdictError, match="text after the JSON object"):
    verdict_lib.parse_pairwise(CORPUS["duplicated_object"], R)


def test_judge_arithmetic_is_checked_never_used():
  # The judge claims B wins with wrong overalls and combined scores: scores come from dimensions.
  reply = _obj(Agent_A__path__overall=3, Agent_A__answer__overall=6,
               combined_scores__Agent_A=1.0, combined_scores__Agent_B=9.9, winner="Agent_B")
  v = verdict_lib.parse_pairwise(reply, R)
  assert (v.a.combined, v.b.combined, v.winner) == (6.6, 6.0, "Agent_A")
  assert v.mismatches == 4  # A's path overall, both combined scores, the winner
  # Rounding a .5 mean either way is not a mismatch (mean of [5, 5, 6, 6] is 5.5).
  assert verdict_lib.parse_pairwise(_obj(Agent_A__answer__overall=5), R).mismatches == 0
  # A one-decimal combined within 0.05 is fine.
  assert verdict_lib.parse_pairwise(_obj(combined_scores__Agent_B=6.04), R).mismatches == 0


def test_winner_derived_from_scores_with_ties():
  t = verdict_lib.score_agent(R, [5, 5, 5], [5, 5, 5, 5])
  assert verdict_lib.PairVerdict(t, t).winner == "Tie"
  assert verdict_lib.PairVerdict(B, A).winner == "Agent_B"


def test_compact_replies():
  v = verdict_lib.parse_pairwise(VALID_COMPACT, R, compact=True)
  assert (v.a.combined, v.b.combined, v.mismatches) == (6.6, 6.0, 0)
  with pytest.raises(verdict_lib.VerdictError, match="unexpected key"):
    verdict_lib.parse_pairwise(VALID, R, compact=True)  # the full shape is not the compact one
  with pytest.raises(verdict_lib.VerdictError, match="missing key"):
    verdict_lib.parse_pairwise(VALID_COMPACT, R)


def test_pointwise_full_and_compact():
  full = verdict_lib.format_verdict(R, "pointwise", [A])
  assert json.loads(full)["combined_score"] == 6.6
  assert verdict_lib.parse_pointwise(full, R).score == 6.6
  compact = verdict_lib.format_verdict(R, "pointwise", [B], compact=True)
  assert verdict_lib.parse_pointwise(compact, R, compact=True).score == 6.0
  wrong = json.loads(full)
  wrong["combined_score"] = 9.0
  assert verdict_lib.parse_pointwise(json.dumps(wrong), R).mismatches == 1
  with pytest.raises(verdict_lib.VerdictError):
    verdict_lib.parse_pointwise(VALID, R)


def test_combine_bidirectional_sums():
  fwd = verdict_lib.PairVerdict(A, B)  # A = P: P 6.6, Q 6.0
  bwd = verdict_lib.PairVerdict(verdict_lib.score_agent(R, [2, 2, 2], [2, 2, 2, 2]),  # Q: 2.0
                                verdict_lib.score_agent(R, [9, 9, 9], [8, 8, 8, 8]))  # P: 8.6
  r = verdict_lib.combine(fwd, bwd)
  assert r.ok and r.requests == 2
  assert r.score_p == pytest.approx(6.6 + 8.6) and r.score_q == pytest.approx(6.0 + 2.0)
  assert r.detail["forward"] == (6.6, 6.0) and r.detail["backward"] == (2.0, 8.6)


@pytest.mark.parametrize("mode", rubric_lib.MODES)
@pytest.mark.parametrize("rubric", [rubric_lib.TRAVEL, rubric_lib.DEEP_RESEARCH])
def test_skeleton_matches_the_compact_schema(mode, rubric):
  texts, slots = verdict_lib.verdict_skeleton(rubric, mode)
  assert len(texts) == len(slots) + 1
  n_agents = 2 if mode == "pairwise" else 1
  assert len(slots) == n_agents * (len(rubric.path) + len(rubric.answer))
  values = np.random.default_rng(0).integers(0, 11, len(slots)).tolist()
  reply = verdict_lib.fill_skeleton(texts, values)
  obj = json.loads(reply)
  for (agent, section, dim), v in zip(slots, values):
    assert (obj[agent] if agent else obj)[section][dim] == v
  parse = verdict_lib.parse_pairwise if mode == "pairwise" else verdict_lib.parse_pointwise
  parse(reply, rubric, compact=True)
  # The schema's required keys are exactly the skeleton's keys.
  schema = rubric_lib.verdict_schema(rubric, mode, compact=True)
  agents = [a for a in dict.fromkeys(s[0] for s in slots)]
  assert schema["required"] == (agents if mode == "pairwise" else ["path", "answer"])


def test_combine_scores_sums_the_two_orders():
  # forward shows (A=P, B=Q), backward (A=Q, B=P): each side gets its score from both.
  r = verdict_lib.combine_scores((7.0, 3.5), (4.0, 6.0), requests=3, detail={"score_mass": 0.9})
  assert (r.score_p, r.score_q, r.ok, r.requests) == (13.0, 7.5, True, 3)
  assert r.detail == {"forward": (7.0, 3.5), "backward": (4.0, 6.0), "score_mass": 0.9}


def test_failed_names_each_order_that_has_no_verdict():
  r = verdict_lib.failed(None, "unparseable verdict", requests=2)
  assert not r.ok and (r.score_p, r.score_q) == (verdict_lib.FAILED, verdict_lib.FAILED)
  assert r.error == "backward: unparseable verdict" and r.requests == 2
  assert verdict_lib.failed("x", "y", requests=4).error == "forward: x; backward: y"
