"""Content-free and misattributed trajectories against the evaluation's reference.

Each adversary (see :func:`adversaries`) is built for the first :data:`TASKS_PER_KIND` test tasks
of every subtask whose reference says something about the task. Each must score below that
task's reference trajectory (the expert at ``env.reference_error_rate``, exactly as
eval/compare.py builds it) by the noise-free checker's pointwise combination (the rubric judge's
``Rubric.combine``), and none may be solved by the verifier. Adversaries that keep "the expert's
calls" keep the reference's own calls, so they differ from it in the answer only.

A reference whose errors left it addressing none of its pages (every page missed, or its facts
cut off) is itself content-free: an adversary can tie it but not fall below it, so such tasks are
skipped rather than counted.
"""
from __future__ import annotations

import json
import re

import pytest

from arenarl_jax.envs.research import evidence, expert, search, tasks
from arenarl_jax.eval import compare
from arenarl_jax.judges import rubric as rubric_lib
from arenarl_jax.text import messages as messages_lib

RUBRIC = rubric_lib.load_rubric("deep_research")
TASKS_PER_KIND = 6
HEADINGS = {"technical_writing": ("Overview", "Usage", "Caveats"),
            "ideation": ("Background", "Ideas"), "explanation": ("Explanation", "Summary")}


def _combined(scores):
  return RUBRIC.combine([scores["path"][d.name] for d in RUBRIC.path],
                        [scores["answer"][d.name] for d in RUBRIC.answer])[2]


def _structured(task, body):
  """``body`` under each of the task kind's headings (ideation's ideas as three list items)."""
  parts = []
  for h in HEADINGS[task.subtask]:
    text = "\n".join(f"{k}. {body}" for k in (1, 2, 3)) if h == "Ideas" else body
    parts.append(f"## {h}\n\n{text}")
  return "\n\n".join(parts)


def _fluff(task):
  names = tasks.format_names(task.constraints["pages"])
  body = (f"This report looks at {names}. These are important and widely used tools, and "
          "developers should understand them well before using them in real projects. They are "
          "flexible, well designed and useful in many situations, which makes them worth "
          "learning. Used carefully they make programs clearer and easier to maintain.")
  return _structured(task, body)


def _tool_turns(source, turns):
  """Messages for assistant turns of (content, [(tool, args)]) with the real tools' results."""
  msgs = []
  for t, (content, calls) in enumerate(turns):
    ids = [f"adv_{t}_{k}" for k in range(len(calls))]
    msgs.append({"role": "assistant", "content": content, "tool_calls": [
        {"id": i, "type": "function",
         "function": {"name": name, "arguments": json.dumps(args)}}
        for i, (name, args) in zip(ids, calls)]})
    for i, (name, args) in zip(ids, calls):
      msgs.append({"role": "tool", "tool_call_id": i,
                   "content": source.call_sync(name, args).text})
  return msgs


def _calls(msgs):
  """The (content, [(tool, args)]) turns of a conversation's tool-calling assistant messages."""
  return [(m.get("content") or "", [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                                    for c in m["tool_calls"]])
          for m in msgs if m["role"] == "assistant" and m.get("tool_calls")]


def _swap(text, pages):
  """Every needed page's name (its dotted id, and its last part in code) moved to the next page,
  and the numbers rotated one place: the same facts and figures, attributed to the wrong page."""
  ids = list(pages)
  moved = dict(zip(ids, ids[1:] + ids[:1]))
  moved.update({a.rsplit(".", 1)[-1]: b.rsplit(".", 1)[-1] for a, b in moved.items()})
  full = "|".join(re.escape(i) for i in sorted(ids, key=len, reverse=True))
  last = "|".join(re.escape(i.rsplit(".", 1)[-1]) for i in sorted(ids, key=len, reverse=True))
  pattern = re.compile(rf"(?<![\w.])({full})(?![\w])|(?<=`)({last})(?=[`(])")
  text = pattern.sub(lambda m: moved[m.group(0)], text)
  numbers = re.findall(r"(?<![\w.])\d{2,}(?![\w])", text)
  if len(set(numbers)) > 1:
    it = iter(numbers[1:] + numbers[:1])
    text = re.sub(r"(?<![\w.])\d{2,}(?![\w])", lambda m: next(it), text)
  return text


def adversaries(env, task, reference, other):
  """name -> (messages, finish_reason) for ``task``; ``reference`` is its reference
  conversation (with the prompt), ``other`` a test task of the same kind on another module.

  fluff: no calls, generic praise of the pages under the kind's headings. off_topic: successful
  searches and pages of another module, then the fluff. echo: the reference's calls, then the
  question under the kind's headings. truncated: the reference's calls and the expert's report
  cut at a third, stopped at the length limit. misattributed: the reference's calls and the
  expert's report with page names and numbers swapped. wrong_topic: the reference's calls and
  ``other``'s expert report. repeated: every reference call made three times, then the fluff.
  copied: the reference's calls and their raw results as the answer.
  """
  q = [{"role": "user", "content": task.query}]
  source = env.tool_source()
  ref_path = reference[1:-1]
  ideal = env.expert(task, 0.0, 0)[-1]["content"]
  foreign = [p for p in env.tasks("train") if p.constraints["module"] != task.constraints["module"]]
  off = foreign[0].constraints["pages"]
  off_turns = [("Plan:\n1. Search.\n2. Read.",
                [("web_search", {"query": p, "k": 3}) for p in off]),
               ("Reading.", [("open_page", {"page_id": p}) for p in off])]
  repeated = [(content, calls * 3) for content, calls in _calls(reference)]
  results = "\n\n".join(m["content"] for m in reference if m["role"] == "tool")
  out = {
      "fluff": (q + [{"role": "assistant", "content": _fluff(task)}], ""),
      "off_topic": (q + _tool_turns(source, off_turns)
                    + [{"role": "assistant", "content": _fluff(task)}], ""),
      "echo": (q + ref_path + [{"role": "assistant", "content": _structured(task, task.query)}],
               ""),
      "truncated": (q + ref_path + [{"role": "assistant",
                                     "content": expert.truncate_mid_sentence(ideal, 1 / 3)}],
                    "length"),
      "misattributed": (q + ref_path + [{"role": "assistant", "content": _swap(
          ideal, task.constraints["pages"])}], ""),
      "wrong_topic": (q + ref_path + [{"role": "assistant",
                                       "content": env.expert(other, 0.0, 0)[-1]["content"]}], ""),
      "repeated": (q + _tool_turns(source, repeated)
                   + [{"role": "assistant", "content": _fluff(task)}], ""),
      "copied": (q + ref_path + [{"role": "assistant", "content": results}], ""),
  }
  return out


def _content_free(env, task, ref):
  """Whether the reference's answer addresses none of the task's pages (it missed or lost them
  all): a content-free answer can tie it, never fall below it."""
  c = task.constraints
  research = evidence.research_of(ref.steps, c["pages"])
  answer = evidence.Answer(ref.steps[-1].content, task.query, c["pages"], c["facts"], research)
  return not any(answer.addresses(p, c["facts"]) for p in c["pages"])


KINDS_OF_ADVERSARY = ("fluff", "off_topic", "echo", "truncated", "misattributed", "wrong_topic",
                      "repeated", "copied")


@pytest.fixture(scope="module")
def cases(env):
  """(task, reference trajectory, {adversary: trajectory}) for the chosen test tasks."""
  out = []
  for kind in tasks.KINDS:
    split = env.tasks(f"test_{kind}")
    refs = compare.reference_trajectories(env, split[:3 * TASKS_PER_KIND])
    chosen = [(t, r) for t, r in zip(split, refs) if not _content_free(env, t, r)]
    for task, ref in chosen[:TASKS_PER_KIND]:
      other = next(t for t in split if t.constraints["module"] != task.constraints["module"])
      built = adversaries(env, task, [dict(m) for m in ref.messages], other)
      out.append((task, ref, {
          name: messages_lib.trajectory_from_messages(
              msgs, metadata={"task_id": task.id}, finish_reason=finish)
          for name, (msgs, finish) in built.items()}))
  return out


def test_every_adversary_kind_is_built(cases):
  assert len(cases) == TASKS_PER_KIND * len(tasks.KINDS)
  assert all(tuple(adv) == KINDS_OF_ADVERSARY for _, _, adv in cases)


@pytest.mark.parametrize("name", KINDS_OF_ADVERSARY)
def test_adversary_scores_below_the_reference(env, cases, name):
  for task, ref, adv in cases:
    ref_score = _combined(env.checker(ref))
    score = _combined(env.checker(adv[name]))
    assert score < ref_score, (task.id, name, score, ref_score, env.checker(adv[name]))


@pytest.mark.parametrize("name", KINDS_OF_ADVERSARY)
def test_adversary_is_not_solved(env, cases, name):
  for task, _, adv in cases:
    v = env.verify(adv[name])
    assert not v.solved, (task.id, name)


def test_adversaries_keep_their_premise(env, cases):
  """Copies are the raw results, swaps kept every name, calls are the reference's (or none of
  the task's pages), repeats repeat them."""
  for task, ref, adv in cases:
    assert adv["echo"].steps[:-1] == ref.steps[:-1]
    assert adv["truncated"].finish_reason == "length"
    pages = task.constraints["pages"]
    swapped = adv["misattributed"].steps[-1].content
    assert swapped != env.expert(task, 0.0, 0)[-1]["content"] and all(p in swapped for p in pages)
    off = {c.arguments.get("page_id") for s in adv["off_topic"].steps for c in s.tool_calls}
    assert off and not off & set(pages)
    assert adv["copied"].steps[-1].content == "\n\n".join(
        r for s in ref.steps for r in s.tool_results)
    calls = [c for s in ref.steps for c in s.tool_calls]
    assert [c for s in adv["repeated"].steps for c in s.tool_calls] == [
        c for s in ref.steps if s.tool_calls for c in s.tool_calls * 3]
    assert len(calls) and search.result_page_ids(adv["copied"].steps[-1].content)
