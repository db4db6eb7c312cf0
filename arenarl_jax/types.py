"""Types that cross stage boundaries (sampler -> rollout -> tournament/judge -> advantages -> train).

Shape legend used across the package (suffixes on array names, e.g. ``tokens_NT``):
  B  prompts in a batch            G  group size (trajectories per prompt)
  N  rows = B * G (row r belongs to prompt r // G; row 0 of a group is the greedy anchor)
  T  tokens (time)                 S  KV-cache slots            V  vocabulary
  L  layers   D  model width   H  query heads   K  KV heads   F  head dim

The host-side types here are plain frozen dataclasses (hashable where cheap, never traced by jit).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np


# How a trajectory ended (``Trajectory.finish_reason``): a final answer, the token budget, the
# turn limit, an unparseable turn, or a failure outside the policy. Not a turn's stop reason
# (sampling/settings.py TURN_STOP_REASONS).
TRAJECTORY_FINISH_REASONS = ("answer", "length", "max_turns", "invalid", "error")


@dataclasses.dataclass(frozen=True)
class ToolCall:
  """One tool call the policy asked for: a name and its parsed JSON arguments."""

  name: str
  arguments: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Step:
  """One assistant turn and the tool observations it caused (in call order)."""

  reasoning: str = ""
  content: str = ""
  tool_calls: tuple[ToolCall, ...] = ()
  tool_results: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, eq=False)
class Trajectory:
  """One agent rollout for one query.

  ``steps`` is what the judge sees (process-aware: reasoning, tool calls, tool results, final answer).
  ``tokens``/``loss_mask`` are what training sees: the whole multi-turn conversation as ONE sequence,
  loss_mask = 1 exactly on policy-generated tokens (0 on prompt and tool observations). Both are
  optional so judges and tournaments can be used (and tested) without a model.
  """

  query: str
  steps: tuple[Step, ...] = ()
  tokens: np.ndarray | None = None  # int32 [T]
  loss_mask: np.ndarray | None = None  # int32/bool [T]
  logprobs: np.ndarray | None = None  # float32 [T]: sampler log-probs on sampled ids, 0 elsewhere
  messages: tuple[Mapping[str, Any], ...] = ()  # the reference-format conversation (text/messages.py)
  finish_reason: str = ""  # "answer" | "length" | "max_turns" | "invalid" | "error"
  # task_id, subtask, policy_step, temperature, greedy, turn_stop_reasons, tool_log, ...;
  # ranked=False (set by rl/experience.py) when the judge gave it no rank evidence (a failed
  # match or pointwise score, or a dropped group): it trains with loss mask 0 (rl/batch.py)
  metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)

  @property
  def final_answer(self) -> str:
    """Content of the last assistant step ("" when there is none)."""
    return self.steps[-1].content if self.steps else ""


@dataclasses.dataclass(frozen=True)
class Match:
  """Trajectory ``i`` of group ``group`` (as P) against trajectory ``j`` (as Q), for one ``query``."""

  group: int
  i: int
  j: int
  query: str
  p: Trajectory | None = None
  q: Trajectory | None = None


@dataclasses.dataclass(frozen=True)
class MatchResult:
  """Bidirectional-sum scores in [0, 20] (forward A + backward B, and vice versa).

  A failed match (a reply that still fails after constrained decoding and the bounded repair
  path) has ``ok=False`` and an ``error`` message; its scores carry no information (backends put
  0, 0) and are ignored. Which side broke the judge is unknowable, so the failure rule holds for
  both: the tournament leaves the match out of the ranking evidence and UNRANKS both players
  (``GroupResult.ranked`` False: advantage 0, loss mask 0), so a failure teaches nothing and no
  trajectory gains or loses by it (tournament/topology.py). It is never a tie. A failed
  evaluation match is left out of the win rate and counted
  (``eval/tally.py``).
  ``requests`` counts the judge requests this match actually sent, set by the judge itself (2 per
  match when both orders were asked, 0 when cached, more with re-asks); ``detail`` carries
  backend-specific diagnostics (per-direction scores, raw replies' lengths, ...).
  """

  score_p: float
  score_q: float
  ok: bool = True
  error: str | None = None
  requests: int = 0
  detail: Mapping[str, Any] | None = None


@runtime_checkable
class Judge(Protocol):
  """Anything that scores a batch of matches. It owns its concurrency; results align with input.

  ``offset`` is the position of ``matches[0]`` in the whole batch when this call is one host's
  share of it (a judge whose randomness depends on a request's position uses it, so the shares
  together draw what the whole batch would; the others ignore it). ``state_dict()`` is what a
  resumed run must restore for the judge to continue exactly (``{}`` for most judges).
  Pointwise judges (GRPO/GSPO) also have ``score(trajectories, *, offset=0) ->
  PointwiseScores``.
  """

  def judge(self, matches: Sequence[Match], *, offset: int = 0) -> list[MatchResult]:
    ...

  def state_dict(self) -> dict[str, Any]:
    ...

  def load_state_dict(self, state: Mapping[str, Any]) -> None:
    ...


class Stateless:
  """The ``state_dict`` half of the judge protocol for judges with nothing to restore."""

  def state_dict(self) -> dict[str, Any]:
    return {}

  def load_state_dict(self, state: Mapping[str, Any]) -> None:
    del state


@dataclasses.dataclass(frozen=True)
class GroupResult:
  """What the tournament computed for one group of N trajectories."""

  order: tuple[int, ...]  # trajectory indices, best first; the unranked last
  ranks: np.ndarray  # int32 [N], 1 = best ("min" ranks for ties; the unranked share the last)
  base_rewards: np.ndarray  # float32 [N] in [0, 1]: standing among the ranked; unranked 0
  advantages: np.ndarray  # float32 [N], standardized over the ranked; unranked 0
  # bool [N]: True = has rank evidence and trains (loss mask 1). False for the players of a
  # failed match, and for every player of a group with fewer than two ranked (dropped).
  ranked: np.ndarray
  matches: tuple[tuple[Match, MatchResult], ...]  # the match log, in play order
  requests: int  # judge requests (one match = two), as the judge counted them
  failures: int  # failed matches (left out of the evidence; both players unranked)
  # The judged round of each logged match (0 = the first), parallel to ``matches``: a viewer
  # draws the bracket from it. Every group plays from round 0, one judged round per engine round.
  rounds: tuple[int, ...] = ()


def subtask_of(trajectory: Trajectory) -> str:
  """``metadata["subtask"]``, else the middle part of an ``env/subtask/number`` task id."""
  subtask = trajectory.metadata.get("subtask")
  if isinstance(subtask, str) and subtask:
    return subtask
  parts = str(trajectory.metadata.get("task_id", "")).split("/")
  return parts[1] if len(parts) == 3 and parts[1] else "unknown"
