"""Judge rubrics: the criteria text, path/answer dimensions, weights and the verdict JSON schema.

A rubric is data. ``render.py`` turns it (plus trajectories) into prompts, ``verdict.py`` parses a
judge's reply against the schema built here. Scoring arithmetic (ARENARL §3):
overall = round(mean(dimensions)) per section, combined = w_path·overall_p + w_answer·overall_a with
one decimal. Rounding is half-up (7.5 -> 8), the way a human grader (and an LLM judge) rounds.

A user rubric is a JSON file (``load_rubric(path)``)::

  {"name": "my_task",
   "prompt": "What the judge should look for ...",
   "path_dimensions": {"breadth": "what breadth means", "detail": "..."},
   "answer_dimensions": {"accuracy": "...", "clarity": "..."},
   "weights": {"path": 0.6, "answer": 0.4}}

Dimensions may also be a list of names or of {"name", "description"} objects.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from typing import Any, Mapping, Sequence

AGENTS = ("Agent_A", "Agent_B")
WINNERS = ("Agent_A", "Agent_B", "Tie")
SECTIONS = ("path", "answer")
MODES = ("pairwise", "pointwise")
MIN_SCORE, MAX_SCORE = 0, 10
# Tag names the prompt renderer uses; user rubric text must not contain them (render.py keeps each
# exactly once in a prompt and neutralises tag-like text coming from trajectories).
SECTION_TAGS = ("query", "agent_a_path", "agent_a_answer", "agent_b_path", "agent_b_answer",
                "agent_path", "agent_answer")

_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
_FILE_KEYS = ("name", "prompt", "path_dimensions", "answer_dimensions", "weights")


class RubricError(ValueError):
  """A rubric (built in code or loaded from a file) is malformed."""


@dataclasses.dataclass(frozen=True)
class Dimension:
  """One 0-10 criterion of a section, with the text the judge reads."""

  name: str
  description: str = ""


@dataclasses.dataclass(frozen=True)
class Rubric:
  """What a judge is asked to score; the same rubric serves the pairwise and pointwise variants."""

  name: str
  prompt: str  # task-specific guidance shown to the judge before the dimension list
  path: tuple[Dimension, ...]
  answer: tuple[Dimension, ...]
  path_weight: float
  answer_weight: float

  def __post_init__(self):
    _validate(self, where=f"rubric {self.name!r}")

  def dimensions(self, section: str) -> tuple[Dimension, ...]:
    """The dimensions of ``section`` ("path" or "answer")."""
    if section not in SECTIONS:
      raise ValueError(f"section must be one of {SECTIONS}, got {section!r}")
    return self.path if section == "path" else self.answer

  def combine(self, path_scores: Sequence[float],
              answer_scores: Sequence[float]) -> tuple[int, int, float]:
    """(overall_path, overall_answer, combined) from per-dimension scores in rubric order."""
    overall_p = round_half_up(sum(path_scores) / len(path_scores))
    overall_a = round_half_up(sum(answer_scores) / len(answer_scores))
    combined = round_half_up(10 * (self.path_weight * overall_p + self.answer_weight * overall_a))
    return overall_p, overall_a, combined / 10


def round_half_up(x: float) -> int:
  """Nearest integer, halves up; tolerant of float noise such as 7.4999999999."""
  return int(math.floor(x + 0.5 + 1e-9))


def _validate(rubric: Rubric, where: str) -> None:
  if not isinstance(rubric.prompt, str):
    raise RubricError(f"{where}: key 'prompt': expected a string")
  for section in SECTIONS:
    dims = rubric.dimensions(section)
    key = f"{section}_dimensions"
    if not dims:
      raise RubricError(f"{where}: key '{key}': needs at least one dimension")
    names = [d.name for d in dims]
    for name in names:
      if not isinstance(name, str) or not _NAME_RE.match(name) or name == "overall":
        raise RubricError(f"{where}: key '{key}': dimension name {name!r} must match "
                          f"{_NAME_RE.pattern} and not be 'overall'")
    if len(set(names)) != len(names):
      raise RubricError(f"{where}: key '{key}': duplicate dimension names {names}")
  for key, w in (("weights.path", rubric.path_weight), ("weights.answer", rubric.answer_weight)):
    if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 <= w <= 1:
      raise RubricError(f"{where}: key '{key}': expected a number in [0, 1], got {w!r}")
  if abs(rubric.path_weight + rubric.answer_weight - 1) > 1e-6:
    raise RubricError(f"{where}: key 'weights': path + answer must sum to 1, got "
                      f"{rubric.path_weight} + {rubric.answer_weight}")
  texts = [("prompt", rubric.prompt)] + [
      (f"{s}_dimensions.{d.name}", d.description) for s in SECTIONS for d in rubric.dimensions(s)]
  for key, text in texts:
    hit = re.search(r"<\s*/?\s*(" + "|".join(SECTION_TAGS) + r")\s*>", text, re.IGNORECASE)
    if hit:
      raise RubricError(f"{where}: key '{key}': contains the reserved section tag {hit.group(0)!r}")


TRAVEL = Rubric(
    name="travel",
    prompt=(
        "The user asked a travel-planning assistant for help. Judge both the process (the path: "
        "reasoning and the tools actually called, with their results) and the final answer. Only "
        "tool calls that were actually made count; claims of lookups that never happened do not. "
        "Check the answer against the information the tools returned."),
    path=(
        Dimension("breadth", "Explores the relevant angles (time, space, transport, price, "
                  "policy) without redundant or repeated steps."),
        Dimension("relevance", "Every reasoning step and tool call serves the user's needs."),
        Dimension("detail", "Gathers concrete facts: times, costs, distances, booking rules."),
    ),
    answer=(
        Dimension("relevance", "Addresses every sub-need and constraint of the query."),
        Dimension("feasibility", "The plan is consistent and executable, with no conflicts in "
                  "time, place or budget."),
        Dimension("details", "Gives timetables, fares, durations and practical tips, consistent "
                  "with the retrieved information."),
        Dimension("clarity", "Well organised and easy to follow."),
    ),
    path_weight=0.6,
    answer_weight=0.4,
)

DEEP_RESEARCH = Rubric(
    name="deep_research",
    prompt=(
        "The user asked a research assistant a question that needs searching and synthesis. Judge "
        "both the process (the path: plan, reasoning and the tools actually called, with their "
        "results) and the final report. Only tool calls that were actually made count. Check the "
        "report's claims against the information the tools returned."),
    path=(
        Dimension("framework", "The first reply lays out a clear, progressive research plan."),
        Dimension("tool_usage", "Queries are targeted, diverse and not redundant."),
        Dimension("coverage", "The searches cover every aspect the question needs."),
    ),
    answer=(
        Dimension("relevance", "Answers the question that was asked, all of it."),
        Dimension("accuracy", "Claims are correct and supported by the retrieved information."),
        Dimension("depth", "Goes beyond surface facts: analysis, comparison, caveats."),
        Dimension("clarity", "Well structured and easy to read."),
    ),
    path_weight=0.5,
    answer_weight=0.5,
)

BUILTIN = {"travel": TRAVEL, "deep_research": DEEP_RESEARCH}


def load_rubric(spec: str | Rubric) -> Rubric:
  """A built-in rubric by name ("travel", "deep_research"), or one loaded from a JSON file path."""
  if isinstance(spec, Rubric):
    return spec
  if spec in BUILTIN:
    return BUILTIN[spec]
  if not os.path.isfile(spec):
    raise RubricError(f"rubric {spec!r} is neither a built-in ({sorted(BUILTIN)}) nor a file")
  try:
    with open(spec, encoding="utf-8") as f:
      data = json.load(f)
  except (UnicodeDecodeError, json.JSONDecodeError) as e:
    raise RubricError(f"{spec}: not valid UTF-8 JSON: {e}") from None
  return rubric_from_dict(data, where=spec)


def rubric_from_dict(data: Any, where: str = "rubric") -> Rubric:
  """A rubric from the file format above; errors name ``where`` (the file) and the key."""
  if not isinstance(data, Mapping):
    raise RubricError(f"{where}: expected a JSON object at the top level")
  unknown = sorted(set(data) - set(_FILE_KEYS))
  if unknown:
    raise RubricError(f"{where}: unknown key(s) {unknown}; allowed: {list(_FILE_KEYS)}")
  for key in _FILE_KEYS:
    if key not in data:
      raise RubricError(f"{where}: missing key '{key}'")
  if not isinstance(data["name"], str) or not data["name"]:
    raise RubricError(f"{where}: key 'name': expected a non-empty string")
  if not isinstance(data["prompt"], str):
    raise RubricError(f"{where}: key 'prompt': expected a string")
  weights = data["weights"]
  if not isinstance(weights, Mapping) or set(weights) != {"path", "answer"}:
    raise RubricError(f"{where}: key 'weights': expected {{\"path\": w, \"answer\": w}}")
  for key in ("path", "answer"):
    w = weights[key]
    if isinstance(w, bool) or not isinstance(w, (int, float)):
      raise RubricError(f"{where}: key 'weights.{key}': expected a number, got {w!r}")
  path = _dimensions(data["path_dimensions"], where, "path_dimensions")
  answer = _dimensions(data["answer_dimensions"], where, "answer_dimensions")
  try:
    return Rubric(name=data["name"], prompt=data["prompt"], path=path, answer=answer,
                  path_weight=weights["path"], answer_weight=weights["answer"])
  except RubricError as e:  # name the file, not just the rubric
    raise RubricError(f"{where}: {e}") from None


def _dimensions(value: Any, where: str, key: str) -> tuple[Dimension, ...]:
  """Dimensions from {name: description}, [name, ...] or [{"name", "description"}, ...]."""
  if isinstance(value, Mapping):
    items = list(value.items())
  elif isinstance(value, list):
    items = []
    for k, v in enumerate(value):
      if isinstance(v, str):
        items.append((v, ""))
      elif isinstance(v, Mapping) and set(v) <= {"name", "description"} and "name" in v:
        items.append((v["name"], v.get("description", "")))
      else:
        raise RubricError(f"{where}: key '{key}[{k}]': expected a name or "
                          "{\"name\", \"description\"}")
  else:
    raise RubricError(f"{where}: key '{key}': expected an object {{name: description}} or a list")
  for name, desc in items:
    if not isinstance(name, str) or not isinstance(desc, str):
      raise RubricError(f"{where}: key '{key}': dimension {name!r}: name and description must be "
                        "strings")
  return tuple(Dimension(n, d) for n, d in items)


def verdict_schema(rubric: Rubric, mode: str = "pairwise", compact: bool = False) -> dict:
  """JSON schema of the judge's reply.

  Full: per agent, per section, each dimension and the judge's ``overall``, plus
  ``combined_scores`` and ``winner`` (pairwise) or ``combined_score`` (pointwise). The judge's own
  arithmetic is only checked, never used. Compact (for tiny models and constrained decoding): the
  dimension scores only, as integers 0-10.
  """
  if mode not in MODES:
    raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
  dim = ({"type": "integer", "enum": list(range(MIN_SCORE, MAX_SCORE + 1))} if compact else
         {"type": "number", "minimum": MIN_SCORE, "maximum": MAX_SCORE})

  def obj(props: dict) -> dict:
    return {"type": "object", "properties": props, "required": list(props),
            "additionalProperties": False}

  def section(s: str) -> dict:
    props = {d.name: dict(dim) for d in rubric.dimensions(s)}
    if not compact:
      props["overall"] = {"type": "integer", "minimum": MIN_SCORE, "maximum": MAX_SCORE}
    return obj(props)

  agent = {s: section(s) for s in SECTIONS}
  total = {"type": "number", "minimum": MIN_SCORE, "maximum": MAX_SCORE}
  if mode == "pointwise":
    return obj(agent if compact else {**agent, "combined_score": total})
  props = {a: obj(agent) for a in AGENTS}
  if not compact:
    props["combined_scores"] = obj({a: dict(total) for a in AGENTS})
    props["winner"] = {"type": "string", "enum": list(WINNERS)}
  return obj(props)
