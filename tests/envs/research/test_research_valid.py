"""valid(answer): hand-made valid and invalid answers of each kind, with the reasons."""
from __future__ import annotations

import pytest

from arenarl_jax.envs.research import valid

FILLER = ("It serialises objects to text and back, keeps the order of keys, and reports errors "
          "with the position of the offending character so that callers can fix their input.")

WRITING = f"""## Overview

`json.dumps` turns Python objects into JSON text. {FILLER}

## Usage

Call `json.dumps(obj, indent=2)` for readable output.

## Caveats

Keys that are not strings are converted or rejected depending on `skipkeys`.
"""

IDEATION = f"""## Background

{FILLER}

## Ideas

1. A configuration differ built on `json.loads`.
2. A pretty-printer command that wraps `json.dumps` with `indent`.
- A validator that reports the position of a decoding error.
"""

EXPLANATION = f"""## Explanation

`heapq.heappush` adds an item while keeping the heap invariant. {FILLER}

## Summary

Both functions keep a list ordered as a binary heap.
"""

WRITING_C = {"sections": ["Overview", "Usage", "Caveats"]}
IDEATION_C = {"min_ideas": 3}
EXPLANATION_C = {"sections": ["Summary"]}


@pytest.mark.parametrize("answer, kind, constraints", [
    (WRITING, "technical_writing", WRITING_C),
    (IDEATION, "ideation", IDEATION_C),
    (EXPLANATION, "explanation", EXPLANATION_C),
    (WRITING.replace("## ", "### "), "technical_writing", WRITING_C),  # any heading level
    (WRITING.replace("## Usage", "## 2. Usage of the function"), "technical_writing", WRITING_C),
    (IDEATION, None, None),  # without a kind, only the generic rules
])
def test_valid_answers(answer, kind, constraints):
  assert valid.valid_answer(answer, kind, constraints) == (True, "")


@pytest.mark.parametrize("answer, kind, constraints, why", [
    ("", "technical_writing", WRITING_C, "empty answer"),
    ("   \n  ", None, None, "empty answer"),
    ("x " * 4001, None, None, "more than the limit 8000"),
    ("## A\n\nshort\n\n## B\n\ntext", "explanation", EXPLANATION_C, "fewer than 40"),
    (FILLER + " " + FILLER, "explanation", EXPLANATION_C, "at least 2 Markdown sections"),
    (f"## Only\n\n{FILLER} {FILLER}", "ideation", IDEATION_C, "found 1"),
    # A heading without text is no section.
    (f"## One\n\n{FILLER} {FILLER}\n\n## Two\n\n", "explanation", EXPLANATION_C, "found 1"),
    (WRITING.replace("## Caveats", "## Notes"), "technical_writing", WRITING_C,
     "lacks the section(s) Caveats"),
    (WRITING.replace("## Overview", "Overview"), "technical_writing", WRITING_C,
     "lacks the section(s) Overview"),
    (IDEATION.replace("- A validator", "A validator"), "ideation", IDEATION_C,
     "lists 2 ideas, fewer than 3"),
    (EXPLANATION.replace("## Summary", "## Conclusion"), "explanation", EXPLANATION_C,
     "lacks the section(s) Summary"),
    (EXPLANATION.replace("## Summary\n\nBoth functions keep a list ordered as a binary heap.\n",
                         "## Summary\n\n## Extra\n\nMore text here.\n"), "explanation",
     EXPLANATION_C, "lacks the section(s) Summary"),
    (WRITING + '\n<tool_call>{"name": "web_search", "arguments": {}}</tool_call>',
     "technical_writing", WRITING_C, "tool-call markup"),
    (WRITING, "poetry", None, "unknown task kind 'poetry'"),
])
def test_invalid_answers(answer, kind, constraints, why):
  ok, reason = valid.valid_answer(answer, kind, constraints)
  assert not ok and why in reason, reason


def test_kind_rules_apply_only_with_the_kind():
  assert not valid.valid_answer(EXPLANATION, "technical_writing", WRITING_C)[0]
  assert not valid.valid_answer(WRITING, "ideation", IDEATION_C)[0]
  assert valid.valid_answer(WRITING, None)[0] and valid.valid_answer(EXPLANATION, None)[0]
  assert valid.valid_answer(123) == (False, "answer must be a string, got int")


def test_environment_valid_takes_a_task_or_its_id(env):
  task = env.tasks("test_technical_writing")[0]
  assert env.valid(WRITING, task) == (True, "")
  assert env.valid(WRITING, task.id) == (True, "")
  assert env.valid(EXPLANATION) == (True, "")
  assert env.valid(EXPLANATION, task)[1] == (
      "technical_writing answer lacks the section(s) Overview, Usage, Caveats")
