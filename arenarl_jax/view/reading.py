"""A run's logs read into what the viewer draws: pages of groups, each with its players, matches
and bracket.

Two kinds of log become pages (every line checked; a bad one raises ``ViewError`` naming the file
and the line):
  ``<workdir>/eval/eval_<step>.jsonl`` (``eval/report.py``): a summary line, then one line per
    policy trajectory with the strict verifier's verdict (``solved``, ``met``, ``total``,
    ``unmet``) and one match per opponent (the reference, the starting policy), all in round 0.
    Each line becomes a group: the policy trajectory and its opponents, side by side.
  ``<workdir>/rollouts/step_<k>.jsonl`` (``rl/rollout_log.py``): one line per RL group with its
    trajectories, the tournament's standing (order, ranks, rewards, advantages, ranked) and its
    match log in play order, each match with the judged round it was played in. A log written
    before matches carried their round has ``round`` null: such matches are drawn in play order
    as one column, not as invented rounds.
The rollout logs carry no verifier verdicts, so their groups are neither solved nor unsolved.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Any, Mapping, Sequence

from arenarl_jax import jsonl, run_config
from arenarl_jax.envs import settings as env_settings
from arenarl_jax.judges import rubric as rubric_lib
from arenarl_jax.tournament import topology

EVAL_DIR = "eval"  # eval/run.py's EVAL_DIR (not imported: that module loads the sampler)
ROLLOUTS_DIR = "rollouts"  # rl/rollout_log.py's ROLLOUTS_DIR (that module imports jax)
# eval_<step>[_<n>].jsonl and step_<step>[_p<process>][_<n>].jsonl; summary.jsonl is not a page.
_EVAL_RE = re.compile(r"^eval_(\d+)(_\d+)?\.jsonl$")
_STEP_RE = re.compile(r"^step_(\d+)(_p\d+)?(_\d+)?\.jsonl$")
OUTCOMES = ("won", "lost", "tied", "failed")


class ViewError(ValueError):
  """A run's file the viewer cannot read; the message names the file (and line)."""


@dataclasses.dataclass(frozen=True)
class Call:
  """One tool call as the policy wrote it: a name and its arguments as text."""

  name: str
  arguments: str


@dataclasses.dataclass(frozen=True)
class Turn:
  """One message of a conversation: who spoke, its reasoning, text and tool calls."""

  role: str
  content: str
  reasoning: str = ""
  calls: tuple[Call, ...] = ()


@dataclasses.dataclass(frozen=True)
class Player:
  """One trajectory of a group: its conversation, how it ended and, where the log has them, the
  verifier's verdict and the tournament's standing."""

  label: str  # "#0", "policy", "reference", ...
  turns: tuple[Turn, ...]
  finish_reason: str | None = None
  valid: bool | None = None
  greedy: bool = False
  solved: bool | None = None  # None: no verdict in the log
  met: Any = None
  total: Any = None
  unmet: tuple[str, ...] = ()
  rank: Any = None
  reward: Any = None
  advantage: Any = None
  ranked: bool | None = None


@dataclasses.dataclass(frozen=True)
class Bout:
  """One judged match: player ``p`` (shown first to the judge) against player ``q``."""

  round: int | None
  p: int
  q: int
  score_p: Any
  score_q: Any
  ok: bool
  error: str | None
  detail: Mapping[str, Any]

  @property
  def winner(self) -> int | None:
    """The winning player's index; None for a tie or a failed match."""
    if not self.ok or not _is_number(self.score_p) or not _is_number(self.score_q):
      return None
    points = topology.p_points(float(self.score_p), float(self.score_q))
    return self.p if points == 1.0 else self.q if points == 0.0 else None

  @property
  def outcome(self) -> str:
    """``failed``, ``tied``, or from P's side ``won`` / ``lost``."""
    if not self.ok:
      return "failed"
    w = self.winner
    return "tied" if w is None else "won" if w == self.p else "lost"


@dataclasses.dataclass(frozen=True)
class Group:
  """What one section of a page shows: a task's players, their matches and the bracket."""

  number: int
  title: str
  task_id: str
  subtask: str
  query: str
  players: tuple[Player, ...]
  bouts: tuple[Bout, ...]
  topology: str = ""
  order: tuple[int, ...] = ()
  outcomes: frozenset[str] = frozenset()  # what its matches were, for the outcome filter

  @property
  def solved(self) -> str:
    """``solved`` / ``unsolved`` by the verifier (the first player, the policy in an
    evaluation), ``unknown`` without a verdict."""
    s = self.players[0].solved if self.players else None
    return "unknown" if s is None else "solved" if s else "unsolved"


@dataclasses.dataclass(frozen=True)
class Page:
  """One log file as a page."""

  kind: str  # "eval" or "rollouts"
  step: int
  name: str  # the log's file name without .jsonl (safe: matched by the patterns above)
  source: str
  groups: tuple[Group, ...]
  summary: Mapping[str, Any] | None = None


def _is_number(x: Any) -> bool:
  return isinstance(x, (int, float)) and not isinstance(x, bool)


def read_jsonl(path: str) -> list[tuple[int, dict]]:
  """The JSON objects of ``path`` with their line numbers (``jsonl.read_numbered``); a bad line
  is a ViewError naming the file and line."""
  try:
    return jsonl.read_numbered(path)
  except ValueError as e:
    raise ViewError(str(e)) from None


def _get(row: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
  if key not in row:
    raise ViewError(f"{where}: missing key {key!r}")
  value = row[key]
  if not isinstance(value, kind):
    names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
    raise ViewError(f"{where}: key {key!r}: expected {names}, got {type(value).__name__}")
  return value


def _text(x: Any) -> str:
  """A log value as display text (JSON for anything that is not already a string)."""
  if x is None:
    return ""
  return x if isinstance(x, str) else json.dumps(x, ensure_ascii=False)


def _arguments(raw: Any) -> str:
  """Tool arguments pretty-printed when they are JSON, else as written."""
  if isinstance(raw, str):
    try:
      raw = json.loads(raw)
    except json.JSONDecodeError:
      return raw
  return json.dumps(raw, ensure_ascii=False, indent=1)


def turns_of(messages: Any, where: str) -> tuple[Turn, ...]:
  """The conversation of a logged ``messages`` list (text/messages.py's format)."""
  if not isinstance(messages, list):
    raise ViewError(f"{where}: 'messages' must be a list, got {type(messages).__name__}")
  out = []
  for k, m in enumerate(messages):
    if not isinstance(m, dict):
      raise ViewError(f"{where}: messages[{k}] must be an object, got {type(m).__name__}")
    calls = []
    for c in m.get("tool_calls") or ():
      fn = c.get("function", c) if isinstance(c, dict) else {}
      fn = fn if isinstance(fn, dict) else {}
      calls.append(Call(_text(fn.get("name")), _arguments(fn.get("arguments", ""))))
    out.append(Turn(role=_text(m.get("role")), content=_text(m.get("content")),
                    reasoning=_text(m.get("reasoning_content", m.get("reasoning"))),
                    calls=tuple(calls)))
  return tuple(out)


def _bout(m: Any, where: str, players: int) -> Bout:
  if not isinstance(m, dict):
    raise ViewError(f"{where}: expected an object, got {type(m).__name__}")
  p, q = _get(m, "i", int, where), _get(m, "j", int, where)
  if not (0 <= p < players and 0 <= q < players):
    raise ViewError(f"{where}: players {p} and {q} outside the group's {players}")
  rnd = m.get("round")
  detail = m.get("detail")
  return Bout(round=rnd if isinstance(rnd, int) and not isinstance(rnd, bool) else None,
              p=p, q=q, score_p=m.get("score_p"), score_q=m.get("score_q"),
              ok=bool(m.get("ok", True)), error=None if m.get("error") is None
              else _text(m.get("error")), detail=detail if isinstance(detail, dict) else {})


def _index(values: Any, g: int) -> Any:
  return values[g] if isinstance(values, list) and g < len(values) else None


def rollout_group(row: Mapping[str, Any], where: str) -> Group:
  """A ``rl/rollout_log.py`` group record as a group."""
  rows = _get(row, "trajectories", list, where)
  players = []
  for g, t in enumerate(rows):
    at = f"{where}: trajectories[{g}]"
    if not isinstance(t, dict):
      raise ViewError(f"{at}: expected an object, got {type(t).__name__}")
    players.append(Player(
        label=f"#{_text(t.get('index', g))}", turns=turns_of(t.get("messages", []), at),
        finish_reason=_text(t.get("finish_reason")), valid=t.get("valid"),
        greedy=bool(t.get("greedy")), rank=_index(row.get("ranks"), g),
        reward=t.get("reward"), advantage=t.get("advantage"),
        ranked=t.get("ranked", _index(row.get("ranked"), g))))
  bouts = tuple(_bout(m, f"{where}: matches[{k}]", len(players))
                for k, m in enumerate(row.get("matches") or ()))
  order = row.get("order") if isinstance(row.get("order"), list) else []
  outcomes = set()
  for b in bouts:  # a decided match is one player's win and the other's loss
    outcomes.update(("won", "lost") if b.outcome in ("won", "lost") else (b.outcome,))
  number = row.get("group", 0)
  return Group(number=number if isinstance(number, int) else 0,
               title=f"group {_text(number)}", task_id=_text(row.get("task_id")),
               subtask=_text(row.get("subtask")) or "unknown", query=_text(row.get("query")),
               players=tuple(players), bouts=bouts, topology=_text(row.get("topology")),
               order=tuple(o for o in order if isinstance(o, int) and 0 <= o < len(players)),
               outcomes=frozenset(outcomes))


def eval_group(row: Mapping[str, Any], where: str) -> Group:
  """An ``eval/report.py`` trajectory record as a group: the policy, then each opponent."""
  policy_turns = turns_of(_get(row, "messages", list, where), where)
  solved = row.get("solved")
  unmet = row.get("unmet") if isinstance(row.get("unmet"), list) else []
  players = [Player(label="policy", turns=policy_turns,
                    finish_reason=_text(row.get("finish_reason")), valid=row.get("valid"),
                    solved=solved if isinstance(solved, bool) else None, met=row.get("met"),
                    total=row.get("total"), unmet=tuple(_text(u) for u in unmet))]
  bouts, outcomes = [], set()
  for k, m in enumerate(_get(row, "matches", list, where)):
    at = f"{where}: matches[{k}]"
    if not isinstance(m, dict):
      raise ViewError(f"{at}: expected an object, got {type(m).__name__}")
    opponent = m.get("opponent_messages")
    players.append(Player(label=_text(m.get("opponent")) or f"opponent {k}",
                          turns=() if opponent is None else turns_of(opponent, at)))
    bout = _bout({**m, "i": 0, "j": len(players) - 1}, at, len(players))
    bouts.append(bout)
    outcomes.add(bout.outcome)
  index = row.get("index", 0)
  return Group(number=index if isinstance(index, int) else 0,
               title=f"trajectory {_text(index)}", task_id=_text(row.get("task_id")),
               subtask=_text(row.get("subtask")) or "unknown", query=_text(row.get("query")),
               players=tuple(players), bouts=tuple(bouts), outcomes=frozenset(outcomes))


def read_page(path: str) -> Page:
  """One eval or rollout log as a page (the kind from its file name)."""
  base = os.path.basename(path)
  name = base[:-len(".jsonl")]
  groups, summary = [], None
  if (hit := _EVAL_RE.match(base)):
    kind = "eval"
    for n, row in read_jsonl(path):
      where = f"{path}:{n}"
      if row.get("kind") == "summary":
        summary = row
      elif row.get("kind") == "trajectory":
        groups.append(eval_group(row, where))
      else:
        raise ViewError(f"{where}: unknown kind {row.get('kind')!r} (expected 'summary' or "
                        "'trajectory')")
  elif (hit := _STEP_RE.match(base)):
    kind = "rollouts"
    for n, row in read_jsonl(path):
      where = f"{path}:{n}"
      if row.get("kind", "group") != "group":
        raise ViewError(f"{where}: unknown kind {row.get('kind')!r} (expected 'group')")
      groups.append(rollout_group(row, where))
  else:
    raise ViewError(f"{path}: not an eval_<step>.jsonl or step_<step>.jsonl log")
  return Page(kind=kind, step=int(hit.group(1)), name=name, source=path, groups=tuple(groups),
              summary=summary)


def log_files(workdir: str) -> list[str]:
  """The eval and rollout logs of ``workdir``, evaluations first, each in step order."""
  if not os.path.isdir(workdir):
    raise ViewError(f"{workdir}: no such directory (expected a run's --workdir)")
  out = []
  for sub, pattern in ((EVAL_DIR, _EVAL_RE), (ROLLOUTS_DIR, _STEP_RE)):
    folder = os.path.join(workdir, sub)
    names = os.listdir(folder) if os.path.isdir(folder) else []
    hits = sorted((int(m.group(1)), n) for n in names if (m := pattern.match(n)))
    out += [os.path.join(folder, n) for _, n in hits]
  if not out:
    raise ViewError(f"{workdir}: no {EVAL_DIR}/eval_<step>.jsonl or {ROLLOUTS_DIR}/step_<step>"
                    ".jsonl logs (is it a run's --workdir? a run writes them at its evaluations)")
  return out


def rubric_names(workdir: str, *, checker: bool = False) -> dict[str, Sequence[str]]:
  """The dimension names per rubric section (``path``, ``answer``) from the run's
  ``config.json``: the training judge's rubric (``judge.rubric``, else the environment's) or,
  with ``checker``, the environment's (the evaluation's checker judge); empty when it cannot be
  told (the pages then number the dimensions)."""
  try:
    config = run_config.read(workdir)
    spec = "" if checker else config.judge.rubric
    rubric = rubric_lib.load_rubric(spec or env_settings.rubric_of(config.env.name))
  except (OSError, ValueError, KeyError, TypeError, AttributeError):
    return {}
  return {s: [d.name for d in rubric.dimensions(s)] for s in rubric_lib.SECTIONS}
