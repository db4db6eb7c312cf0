"""Strict parsing of judge replies into verdicts, and the bidirectional combine into a MatchResult.

A reply must be exactly one JSON object (optionally inside one code fence) matching the rubric's
schema; anything else raises ``VerdictError`` (the backend retries or records a failure). Scores
come only from the dimension values: the judge's overalls, combined scores and winner are checked (each
disagreement counts as an arithmetic mismatch) but never used.
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any, Mapping, Sequence

import numpy as np

from arenarl_jax.judges import rubric as rubric_lib
from arenarl_jax.types import MatchResult

MAX_REPLY_CHARS = 100_000
FAILED = 0.0  # each side's score in a failed match (ignored by the tournament: MatchResult docs)
_FENCE_RE = re.compile(r"^```[ \t]*(?:json|JSON)?[ \t]*\n(.*?)\n?[ \t]*```$", re.DOTALL)


class VerdictError(ValueError):
  """The judge's reply is not exactly one schema-valid JSON verdict."""


@dataclasses.dataclass(frozen=True)
class AgentScores:
  """One agent's dimension scores (rubric order) and the overalls/combined WE computed from them."""

  path: tuple[float, ...]
  answer: tuple[float, ...]
  overall_path: int
  overall_answer: int
  combined: float  # in [0, 10]


@dataclasses.dataclass(frozen=True)
class PairVerdict:
  """One direction of a match: Agent_A and Agent_B as shown in that request."""

  a: AgentScores
  b: AgentScores
  mismatches: int = 0  # the judge's own arithmetic disagreeing with ours (full format only)

  @property
  def winner(self) -> str:
    """Derived from the recomputed combined scores, never read from the reply."""
    if self.a.combined > self.b.combined:
      return "Agent_A"
    return "Agent_B" if self.b.combined > self.a.combined else "Tie"


@dataclasses.dataclass(frozen=True)
class PointVerdict:
  """A pointwise verdict: one agent's scores; ``score`` is its combined 0-10 score."""

  agent: AgentScores
  mismatches: int = 0

  @property
  def score(self) -> float:
    return self.agent.combined


@dataclasses.dataclass(frozen=True)
class PointwiseScores:
  """Pointwise results: ``scores`` float32 [N] in [0, 10] (NaN where ``ok`` is False)."""

  scores: np.ndarray
  ok: np.ndarray  # bool [N]
  errors: tuple[str | None, ...]


def score_agent(rubric: rubric_lib.Rubric, path: Sequence[float],
                answer: Sequence[float]) -> AgentScores:
  """AgentScores from dimension scores in rubric order (the one place overall/combined are made)."""
  if len(path) != len(rubric.path) or len(answer) != len(rubric.answer):
    raise ValueError(f"rubric {rubric.name!r} has {len(rubric.path)} path and "
                     f"{len(rubric.answer)} answer dimensions, got {len(path)} and {len(answer)}")
  op, oa, combined = rubric.combine(path, answer)
  return AgentScores(tuple(float(x) for x in path), tuple(float(x) for x in answer), op, oa,
                     combined)


def extract_object(reply: Any) -> dict:
  """The single JSON object a reply consists of (one surrounding code fence allowed)."""
  if not isinstance(reply, str):
    raise VerdictError(f"reply is {type(reply).__name__}, not text")
  if len(reply) > MAX_REPLY_CHARS:
    raise VerdictError(f"reply has {len(reply)} chars (limit {MAX_REPLY_CHARS})")
  text = reply.strip()
  if text.startswith("```"):
    fenced = _FENCE_RE.match(text)
    if not fenced:
      raise VerdictError("reply has a code fence but is not exactly one fenced block")
    text = fenced.group(1).strip()
  if not text.startswith("{"):
    raise VerdictError(f"reply does not start with a JSON object: {_snippet(text)}")
  decoder = json.JSONDecoder(object_pairs_hook=_unique_keys, parse_constant=_no_constants)
  try:
    obj, end = decoder.raw_decode(text)
  except json.JSONDecodeError as e:
    raise VerdictError(f"reply is not valid JSON ({e.msg} at char {e.pos})") from None
  except RecursionError:
    raise VerdictError("reply JSON is nested too deeply") from None
  if text[end:].strip():
    raise VerdictError(f"text after the JSON object: {_snippet(text[end:].strip())}")
  return obj


def parse_pairwise(reply: Any, rubric: rubric_lib.Rubric, compact: bool = False) -> PairVerdict:
  """A pairwise verdict from a reply, validated against ``verdict_schema(rubric, ..., compact)``."""
  obj = extract_object(reply)
  keys = list(rubric_lib.AGENTS) + ([] if compact else ["combined_scores", "winner"])
  _exact_keys(obj, keys, "")
  mismatches = 0
  agents = []
  for name in rubric_lib.AGENTS:
    scores, m = _agent(obj[name], rubric, compact, name + ".")
    agents.append(scores)
    mismatches += m
  verdict = PairVerdict(agents[0], agents[1])
  if not compact:
    claimed = obj["combined_scores"]
    _exact_keys(claimed, rubric_lib.AGENTS, "combined_scores.")
    for name, scores in zip(rubric_lib.AGENTS, agents):
      value = _number(claimed[name], f"combined_scores.{name}")
      mismatches += abs(value - scores.combined) > 0.05 + 1e-9
    if obj["winner"] not in rubric_lib.WINNERS:
      raise VerdictError(f"key 'winner': expected one of {rubric_lib.WINNERS}, "
                         f"got {_snippet(repr(obj['winner']))}")
    mismatches += obj["winner"] != verdict.winner
  return dataclasses.replace(verdict, mismatches=int(mismatches))


def parse_pointwise(reply: Any, rubric: rubric_lib.Rubric, compact: bool = False) -> PointVerdict:
  """A pointwise verdict (one agent) from a reply."""
  obj = extract_object(reply)
  _exact_keys(obj, list(rubric_lib.SECTIONS) + ([] if compact else ["combined_score"]), "")
  scores, mismatches = _agent({s: obj[s] for s in rubric_lib.SECTIONS}, rubric, compact, "")
  if not compact:
    value = _number(obj["combined_score"], "combined_score")
    mismatches += abs(value - scores.combined) > 0.05 + 1e-9
  return PointVerdict(scores, int(mismatches))


def combine(forward: PairVerdict, backward: PairVerdict, requests: int = 2) -> MatchResult:
  """Both orders' parsed verdicts as one match (``combine_scores``), with their dimensions."""
  return combine_scores(
      (forward.a.combined, forward.b.combined), (backward.a.combined, backward.b.combined),
      requests=requests,
      detail={"mismatches": forward.mismatches + backward.mismatches,
              # Each side's dimension scores (rubric order) in each direction, for the logs.
              "dimensions": {"p": {"forward": _dimensions(forward.a),
                                   "backward": _dimensions(backward.b)},
                             "q": {"forward": _dimensions(forward.b),
                                   "backward": _dimensions(backward.a)}}})


def combine_scores(forward: tuple[float, float], backward: tuple[float, float], *,
                   requests: int = 2, detail: Mapping[str, Any] | None = None) -> MatchResult:
  """Bidirectional sums of each order's (Agent_A, Agent_B) scores: forward shows (A=P, B=Q),
  backward (A=Q, B=P), so score_p = fwd A + bwd B and score_q = fwd B + bwd A, in [0, 20].

  Every judge backend combines its two orders here, so they all mean the same by a score.
  ``detail`` (diagnostics) follows the two orders' scores in ``MatchResult.detail``.
  """
  return MatchResult(score_p=forward[0] + backward[1], score_q=forward[1] + backward[0],
                     ok=True, error=None, requests=requests,
                     detail={"forward": tuple(forward), "backward": tuple(backward),
                             **(detail or {})})


def failed(forward_error: str | None, backward_error: str | None, requests: int) -> MatchResult:
  """A match one of whose orders has no verdict: each order's error named, scores ``FAILED``."""
  error = "; ".join(f"{d}: {e}" for d, e in (("forward", forward_error),
                                            ("backward", backward_error)) if e)
  return MatchResult(FAILED, FAILED, ok=False, error=error, requests=requests)


def _dimensions(scores: AgentScores) -> dict[str, list[float]]:
  return {"path": list(scores.path), "answer": list(scores.answer)}


def _agent(obj: Any, rubric: rubric_lib.Rubric, compact: bool,
           where: str) -> tuple[AgentScores, int]:
  _exact_keys(obj, rubric_lib.SECTIONS, where)
  values = {}
  for section in rubric_lib.SECTIONS:
    names = [d.name for d in rubric.dimensions(section)]
    sec = obj[section]
    _exact_keys(sec, names + ([] if compact else ["overall"]), f"{where}{section}.")
    values[section] = [_number(sec[n], f"{where}{section}.{n}") for n in names]
  scores = score_agent(rubric, values["path"], values["answer"])
  mismatches = 0
  if not compact:
    for section in rubric_lib.SECTIONS:
      claimed = _number(obj[section]["overall"], f"{where}{section}.overall")
      mean = sum(values[section]) / len(values[section])
      mismatches += abs(claimed - mean) > 0.5 + 1e-9  # either rounding of a half is fine
  return scores, mismatches


def _exact_keys(obj: Any, keys: Sequence[str], where: str) -> None:
  if not isinstance(obj, dict):
    raise VerdictError(f"key '{where.rstrip('.') or '(top)'}': expected an object, "
                       f"got {type(obj).__name__}")
  for k in keys:
    if k not in obj:
      raise VerdictError(f"missing key '{where}{k}'")
  extra = [k for k in obj if k not in keys]
  if extra:
    raise VerdictError(f"unexpected key(s) {[where + _snippet(k, 40) for k in extra]}")


def _number(value: Any, key: str) -> float:
  if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
    raise VerdictError(f"key '{key}': expected a number, got {_snippet(repr(value), 40)}")
  if not rubric_lib.MIN_SCORE <= value <= rubric_lib.MAX_SCORE:
    raise VerdictError(f"key '{key}': {value} is outside [{rubric_lib.MIN_SCORE}, "
                       f"{rubric_lib.MAX_SCORE}]")
  return float(value)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
  keys = [k for k, _ in pairs]
  if len(set(keys)) != len(keys):
    dup = sorted({k for k in keys if keys.count(k) > 1})
    raise VerdictError(f"duplicate key(s) {[_snippet(k, 40) for k in dup]} in one object")
  return dict(pairs)


def _no_constants(name: str) -> None:
  raise VerdictError(f"non-standard JSON constant {name}")


def _snippet(text: str, limit: int = 80) -> str:
  return text if len(text) <= limit else text[:limit] + "..."


def format_verdict(rubric: rubric_lib.Rubric, mode: str, scores: Sequence[AgentScores],
                   compact: bool = False) -> str:
  """The reply an arithmetic-perfect judge would give (fakes, tests, few-shot examples)."""
  def agent(s: AgentScores) -> dict:
    out = {}
    for section, vals, overall in (("path", s.path, s.overall_path),
                                   ("answer", s.answer, s.overall_answer)):
      sec = {d.name: _plain(v) for d, v in zip(rubric.dimensions(section), vals)}
      if not compact:
        sec["overall"] = overall
      out[section] = sec
    return out

  if mode == "pointwise":
    (only,) = scores
    obj = agent(only) if compact else {**agent(only), "combined_score": only.combined}
    return json.dumps(obj)
  a, b = scores
  obj = {"Agent_A": agent(a), "Agent_B": agent(b)}
  if not compact:
    obj["combined_scores"] = {"Agent_A": a.combined, "Agent_B": b.combined}
    obj["winner"] = PairVerdict(a, b).winner
  return json.dumps(obj)


def _plain(v: float) -> int | float:
  return int(v) if float(v).is_integer() else float(v)


Slot = tuple[str, str, str]  # (agent, section, dimension)


def verdict_skeleton(rubric: rubric_lib.Rubric,
                     mode: str = "pairwise") -> tuple[tuple[str, ...], tuple[Slot, ...]]:
  """The compact verdict as fixed text around score slots (for a teacher-forced local judge).

  Returns ``(texts, slots)`` with ``len(texts) == len(slots) + 1``; each slot is
  ``(agent, section, dimension)`` (agent "" in pointwise mode). The reply
  ``texts[0] + str(s_0) + texts[1] + ... + str(s_k) + texts[k+1]`` parses with ``compact=True``.
  """
  agents = rubric_lib.AGENTS if mode == "pairwise" else ("",)
  if mode not in rubric_lib.MODES:
    raise ValueError(f"mode must be one of {rubric_lib.MODES}, got {mode!r}")
  texts, slots, pending = [], [], "{"
  for k, agent in enumerate(agents):
    if agent:
      pending += ("" if k == 0 else ", ") + json.dumps(agent) + ": {"
    for s_idx, section in enumerate(rubric_lib.SECTIONS):
      pending += ("" if s_idx == 0 else ", ") + json.dumps(section) + ": {"
      for d_idx, dim in enumerate(rubric.dimensions(section)):
        pending += ("" if d_idx == 0 else ", ") + json.dumps(dim.name) + ": "
        texts.append(pending)
        slots.append((agent, section, dim.name))
        pending = ""
      pending += "}"
    if agent:
      pending += "}"
  texts.append(pending + "}")
  return tuple(texts), tuple(slots)


def verdict_gbnf(rubric: rubric_lib.Rubric, mode: str = "pairwise") -> str:
  """The compact verdict as a llama.cpp GBNF grammar: the skeleton's fixed text exactly (single
  spaces, no other whitespace) around scores 0..10; every reply it allows parses."""
  texts, _ = verdict_skeleton(rubric, mode)
  pieces = [json.dumps(texts[0])]
  for text in texts[1:]:
    pieces += ["score", json.dumps(text)]
  return "root ::= " + " ".join(pieces) + '\nscore ::= [0-9] | "10"\n'


def fill_skeleton(texts: Sequence[str], values: Sequence[Any]) -> str:
  """The reply text of a skeleton with ``values`` in its slots."""
  if len(texts) != len(values) + 1:
    raise ValueError(f"{len(texts)} texts need {len(texts) - 1} values, got {len(values)}")
  return "".join(t + str(v) for t, v in zip(texts, values)) + texts[-1]


def scores_from_mapping(rubric: rubric_lib.Rubric, scores: Mapping[str, Mapping[str, float]],
                        where: str = "scores") -> AgentScores:
  """AgentScores from {"path": {dim: x}, "answer": {dim: x}} (exact keys, numbers in 0-10)."""
  values = {}
  for section in rubric_lib.SECTIONS:
    if not isinstance(scores, Mapping) or section not in scores:
      raise ValueError(f"{where}: missing section '{section}'")
    sec = scores[section]
    names = [d.name for d in rubric.dimensions(section)]
    if not isinstance(sec, Mapping) or set(sec) != set(names):
      got = sorted(sec) if isinstance(sec, Mapping) else type(sec).__name__
      raise ValueError(f"{where}: section '{section}' must have exactly {names}, got {got}")
    try:
      values[section] = [_number(sec[n], f"{section}.{n}") for n in names]
    except VerdictError as e:
      raise ValueError(f"{where}: {e}") from None
  return score_agent(rubric, values["path"], values["answer"])
