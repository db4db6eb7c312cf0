"""The research verifier: all or nothing, the evaluation's headline metric (never a reward).

A trajectory solves its task when every requirement holds; ``unmet`` names those that do not:

- ``finished``: it ended with an answer (``envs.base.final_answer``); otherwise nothing else is
  checked and ``met`` is 0.
- ``valid``: the answer passes the validity rules every research answer keeps (valid.py).
- ``section:<name>`` for each section the task requires (technical writing: Overview, Usage,
  Caveats; explanation: Summary), and ``kind`` for ideation's at least ``min_ideas`` ideas.
- ``own_words``: the answer is a report, not pasted tool output (``evidence.Answer.pasted``).
- ``fact:<page>#<k>`` for the k-th key fact of each needed page: stated about that page (in a
  sentence about it, evidence.Answer), AND that page opened successfully by this trajectory, whose
  text as retrieved states the fact too (a fact the agent did not read here is unmet, however
  true).
- ``claims_supported``: no checkable claim is missing from this trajectory's tool results, and
  none is attributed to a needed page whose retrieved text lacks it while another's has it.

The truth (what was retrieved, which facts are stated where) is the checker's (evidence.py); none
of the checker's partial credit is used.
"""
from __future__ import annotations

from arenarl_jax import types
from arenarl_jax.envs import base
from arenarl_jax.envs.research import evidence, valid


def requirements(task: base.Task) -> list[str]:
  """The names of the task's requirements, in the order they are checked."""
  c = task.constraints
  names = ["finished", "valid"] + [f"section:{s}" for s in c.get("sections", ())]
  if c.get("min_ideas"):
    names.append("kind")
  return names + ["own_words"] + fact_names(task) + ["claims_supported"]


def fact_names(task: base.Task) -> list[str]:
  counts: dict[str, int] = {}
  names = []
  for f in task.constraints["facts"]:
    counts[f["page"]] = counts.get(f["page"], 0) + 1
    names.append(f"fact:{f['page']}#{counts[f['page']]}")
  return names


def verify(task: base.Task, trajectory: types.Trajectory) -> base.Verification:
  """Which of ``task``'s requirements ``trajectory`` meets."""
  names = requirements(task)
  text = base.final_answer(trajectory)
  if not text.strip():
    return base.verdict([(n, False) for n in names], False, is_content)
  c = task.constraints
  pages, facts = list(c["pages"]), list(c["facts"])
  r = evidence.research_of(trajectory.steps, pages)
  a = evidence.Answer(text, task.query, pages, facts, r)
  found = valid.sections(text)
  holds = {"finished": True, "valid": valid.valid_answer(text)[0], "own_words": not a.pasted,
           "claims_supported": not a.unsupported and not a.misattributed_claims}
  for s in c.get("sections", ()):
    holds[f"section:{s}"] = valid.has_section(found, s)
  if c.get("min_ideas"):
    holds["kind"] = valid.list_items(text) >= int(c["min_ideas"])
  for name, fact, grounded in zip(fact_names(task), facts, a.grounded):
    holds[name] = grounded and fact["page"] in r.opened
  return base.verdict([(n, holds[n]) for n in names], True, is_content)


def is_content(name: str) -> bool:
  """Only the facts are content: ``finished``, ``valid``, ``own_words``, ``section:*``,
  ``kind`` and ``claims_supported`` can all be met by a well-formed answer that claims nothing."""
  return name.startswith("fact:")
