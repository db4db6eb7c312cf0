"""The viewer's pages: a log page (every group's bracket, match scores and trajectories, with
filters) and the index of a run's pages.

A group's section shows, top to bottom:
  the bracket: one column per judged round with the two players of every match, their
    bidirectional scores (in [0, 20]) and the winner in bold (a failed match in red, a tie
    shaded), then the final standing (rank, reward, advantage, whether it trains) in the
    tournament's order;
  each match's scores: per rubric dimension, each player's score in the forward order (P shown
    first, as Agent_A) and in the backward order (Q first), the combined score of each order and
    the sums; the judge's reasons where it gave any, its other diagnostics, and a failed match's
    error;
  the trajectories side by side: reasoning, text, tool calls with their arguments and tool
    results of every turn, how it ended and, in an evaluation, the strict verifier's verdict
    with the requirements it did not meet.
Sections carry ``data-subtask``, ``data-outcomes`` (the outcomes of their matches, from P's side
in an evaluation; a decided tournament match is a win and a loss) and ``data-solved``
(``markup.SCRIPT``'s filters).
"""
from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

from arenarl_jax.view import markup
from arenarl_jax.view.markup import el, esc, join, number, text
from arenarl_jax.view.reading import OUTCOMES, Bout, Group, Page, Player, Turn

REASON_KEYS = ("reasons", "reason", "explanation", "rationale")  # a judge's own words, if any
SCORE_KEYS = ("forward", "backward", "dimensions")  # drawn as the score table


def page_file(page: Page) -> str:
  """The page's file name in the site (the log's name is a matched, safe file name)."""
  return page.name + ".html"


def _badge(label: str, value: Any = None, kind: str | None = None) -> str:
  body = esc(label) if value is None else f"{esc(label)} {number(value)}"
  return el("span", body, class_="badge" + (f" {kind}" if kind else ""))


# ------------------------------------------------------------------------------------- bracket
def _side(players: Sequence[Player], k: int, score: Any, winner: bool) -> str:
  return el("div", text("span", players[k].label) + el("span", number(score)),
            class_="side winner" if winner else "side")


def _match_box(group: Group, b: Bout, k: int) -> str:
  w = b.winner
  body = (_side(group.players, b.p, b.score_p, w == b.p)
          + _side(group.players, b.q, b.score_q, w == b.q))
  if not b.ok:
    body += text("div", "failed: " + (b.error or "no verdict"), class_="error")
  return el("a", el("div", body, class_=f"match {b.outcome}",
                    title=f"match {k + 1}: P = {group.players[b.p].label}"),
            href=f"#g{group.number}-m{k}")


def bracket(group: Group) -> str:
  """The rounds (in order; unnumbered matches in one play-order column) and the standing."""
  rounds: dict[Any, list[str]] = {}
  for k, b in enumerate(group.bouts):
    rounds.setdefault(b.round, []).append(_match_box(group, b, k))
  columns = []
  for r in sorted(rounds, key=lambda r: (r is None, r or 0)):
    title = "Matches (play order; no round logged)" if r is None else f"Round {r + 1}"
    columns.append(el("div", text("h3", title) + join(rounds[r]), class_="round"))
  title = "Final standing" if group.topology else "Players"
  columns.append(el("div", text("h3", title) + standing(group), class_="round final"))
  return el("div", join(columns), class_="bracket")


def standing(group: Group) -> str:
  """Players in the tournament's order (best first), or as logged without one; only the
  columns the log has (an evaluation has no ranks, only the policy's verdict)."""
  order = list(group.order) + [g for g in range(len(group.players)) if g not in group.order]
  columns = [("rank", lambda p: number(p.rank)), ("reward", lambda p: number(p.reward)),
             ("advantage", lambda p: number(p.advantage)),
             ("trains", lambda p: esc("-" if p.ranked is None else "yes" if p.ranked
                                      else "no (unranked)")),
             ("verdict", _verdict_badge)]
  present = {"rank": "rank", "reward": "reward", "advantage": "advantage", "trains": "ranked",
             "verdict": "solved"}
  columns = [(h, f) for h, f in columns
             if any(getattr(p, present[h]) is not None for p in group.players)]
  head = el("tr", text("th", "player") + join(text("th", h) for h, _ in columns))
  rows = [el("tr", text("td", group.players[g].label)
             + join(el("td", f(group.players[g])) for _, f in columns)) for g in order]
  return el("table", head + join(rows), class_="standing")


# -------------------------------------------------------------------------------------- scores
def _cells(values: Any, k: int) -> str:
  return number(values[k]) if isinstance(values, list) and k < len(values) else "-"


def _dimension(dims: Any, side: str, order: str, section: str) -> Any:
  try:
    return dims[side][order][section]
  except (KeyError, TypeError):
    return None


def score_table(group: Group, b: Bout, names: Mapping[str, Sequence[str]]) -> str:
  """Per-dimension scores of both players in both orders, the combined and summed scores."""
  p, q = group.players[b.p].label, group.players[b.q].label
  cols = [(p, "forward", "as A"), (p, "backward", "as B"), (q, "forward", "as B"),
          (q, "backward", "as A")]
  head = el("tr", text("th", "dimension") + join(
      text("th", f"{who} {order} ({role})") for who, order, role in cols))
  rows = []
  dims = b.detail.get("dimensions")
  for section in ("path", "answer"):
    lists = [_dimension(dims, side, order, section)
             for side, order in (("p", "forward"), ("p", "backward"), ("q", "forward"),
                                 ("q", "backward"))]
    size = max((len(x) for x in lists if isinstance(x, list)), default=0)
    labels = list(names.get(section, ()))
    for k in range(size):
      label = labels[k] if size == len(labels) else str(k + 1)
      rows.append(el("tr", text("td", f"{section}: {label}")
                     + join(el("td", _cells(x, k)) for x in lists)))
  fwd, bwd = b.detail.get("forward"), b.detail.get("backward")
  if fwd is not None or bwd is not None:
    rows.append(el("tr", text("th", "combined (0-10)") + el("td", _cells(fwd, 0))
                   + el("td", _cells(bwd, 1)) + el("td", _cells(fwd, 1))
                   + el("td", _cells(bwd, 0))))
  rows.append(el("tr", text("th", "sum (0-20)") + el("td", number(b.score_p), colspan=2)
                 + el("td", number(b.score_q), colspan=2)))
  return el("table", head + join(rows))


def match_detail(group: Group, b: Bout, k: int, names: Mapping[str, Sequence[str]]) -> str:
  """One match: who played, the outcome, the score table, reasons, diagnostics, error."""
  p, q = group.players[b.p].label, group.players[b.q].label
  where = "" if b.round is None else f", round {b.round + 1}"
  body = text("h3", f"Match {k + 1}{where}: {p} (P) vs {q} (Q): {b.outcome} for P")
  if not b.ok:
    body += text("p", "Failed match (left out of the ranking; both players unranked): "
                 + (b.error or "no verdict"), class_="error")
  body += score_table(group, b, names)
  for key in REASON_KEYS:
    if key in b.detail:
      body += text("div", "Judge's reasons:") + text("pre", _plain(b.detail[key]))
  other = [(key, v) for key, v in b.detail.items() if key not in SCORE_KEYS + REASON_KEYS]
  if other:
    body += text("div", "diagnostics: " + ", ".join(f"{key}={_plain(v)}" for key, v in other))
  return el("div", body, id=f"g{group.number}-m{k}", class_="match-detail")


def _plain(x: Any) -> str:
  if isinstance(x, str):
    return x
  if isinstance(x, list):
    return "\n".join(_plain(v) for v in x)
  if isinstance(x, dict):
    return "\n".join(f"{k}: {_plain(v)}" for k, v in x.items())
  return str(x)


# -------------------------------------------------------------------------------- trajectories
def _verdict_badge(p: Player) -> str:
  if p.solved is None:
    return ""
  if p.solved:
    return _badge("solved", kind="good")
  return _badge(f"unsolved: met {p.met} of {p.total}", kind="bad")


def turn(t: Turn) -> str:
  """One message: role, reasoning, text and tool calls with their arguments."""
  role = {"tool": "tool result"}.get(t.role, t.role)
  body = text("div", role, class_="role")
  if t.reasoning:
    body += text("pre", t.reasoning, class_="reasoning")
  if t.content:
    body += text("pre", t.content, class_="result" if t.role == "tool" else None)
  for c in t.calls:
    body += el("div", text("b", "call " + c.name) + text("pre", c.arguments), class_="call")
  return el("div", body, class_=f"turn {t.role}" if t.role.isidentifier() else "turn")


def player_card(p: Player, query: str) -> str:
  """A trajectory: its badges, the verifier's unmet requirements, then its turns (the opening
  user message left out when it is the group's query)."""
  badges = []
  if p.greedy:
    badges.append(_badge("greedy"))
  if p.finish_reason:
    badges.append(_badge(p.finish_reason, kind="good" if p.finish_reason == "answer" else "bad"))
  if p.valid is not None:
    badges.append(_badge("valid" if p.valid else "invalid"))
  if p.rank is not None:
    badges.append(_badge("rank", p.rank))
  if p.advantage is not None:
    badges.append(_badge("advantage", p.advantage))
  badges.append(_verdict_badge(p))
  body = text("h3", p.label) + el("div", join(badges))
  if p.unmet:
    body += text("div", "unmet requirements:") + el(
        "ul", join(text("li", u) for u in p.unmet), class_="unmet")
  turns = list(p.turns)
  if turns and turns[0].role == "user" and turns[0].content == query and not turns[0].calls:
    turns = turns[1:]
  if not p.turns:
    body += text("p", "(conversation not logged)")
  body += join(turn(t) for t in turns)
  return el("div", body, class_="player")


# ---------------------------------------------------------------------------------- the pages
def group_section(group: Group, names: Mapping[str, Sequence[str]]) -> str:
  """One group: heading, query, bracket, match details, trajectories."""
  head = text("h2", f"{group.title} · {group.subtask} · {group.task_id}")
  if group.topology:
    head += text("div", f"tournament: {group.topology}, {len(group.bouts)} matches")
  body = head + text("pre", group.query, class_="query") + bracket(group)
  if group.bouts:
    body += el("details", text("summary", f"Judge scores ({len(group.bouts)} matches)")
               + join(match_detail(group, b, k, names) for k, b in enumerate(group.bouts)),
               open="open")
  body += el("details", text("summary", "Trajectories") + el(
      "div", join(player_card(p, group.query) for p in group.players), class_="players"),
             open="open")
  return el("section", body, class_="group", id=f"g{group.number}",
            data_subtask=group.subtask, data_outcomes=" ".join(sorted(group.outcomes)),
            data_solved=group.solved)


def _filter_row(name: str, label: str, values: Sequence[str]) -> str:
  buttons = [el("button", "all", type="button", data_filter=name, data_value="")]
  buttons += [text("button", v, type="button", data_filter=name, data_value=v) for v in values]
  return el("div", text("span", label, class_="label") + join(buttons))


def filters(groups: Sequence[Group]) -> str:
  """The filter buttons: subtasks present, the four outcomes, solved/unsolved (when any group
  has a verdict)."""
  rows = [_filter_row("subtask", "subtask", sorted({g.subtask for g in groups})),
          _filter_row("outcome", "outcome", OUTCOMES)]
  if any(g.solved != "unknown" for g in groups):
    rows.append(_filter_row("solved", "verifier", ("solved", "unsolved")))
  return el("div", join(rows) + el("div", "", id="shown"), class_="filters")


def _summary(page: Page) -> str:
  """An evaluation's headline: solved and met rates, win rates per opponent."""
  s = page.summary or {}
  lines = []
  overall = (s.get("success") or {}).get("overall")
  if isinstance(overall, dict):
    lines.append(f"solved rate {_value(overall.get('solved'))}, requirements met "
                 f"{_value(overall.get('met'))} over {overall.get('tasks')} tasks")
  for name, w in (s.get("win_rates") or {}).items():
    o = w.get("overall", {}) if isinstance(w, dict) else {}
    if isinstance(o, dict):
      lines.append(f"vs {name}: win rate {_value(o.get('rate'))} (wins {o.get('wins')}, ties "
                   f"{o.get('ties')}, losses {o.get('losses')}, failed {o.get('failed')})")
  return join(text("li", line) for line in lines)


def _value(x: Any) -> str:
  if isinstance(x, dict):
    x = x.get("value")
  return f"{x:.3f}" if isinstance(x, (int, float)) and not isinstance(x, bool) else str(x)


def _title(page: Page) -> str:
  what = "Evaluation" if page.kind == "eval" else "RL step rollouts"
  return f"{what} at step {page.step} ({page.name})"


def log_page(page: Page, names: Mapping[str, Sequence[str]]) -> str:
  """A whole log page."""
  intro = el("p", el("a", "&larr; index", href="index.html") + " · "
             + esc(f"{len(page.groups)} groups from {os.path.basename(page.source)}"))
  if page.kind == "rollouts":
    intro += text("p", "The rollout log carries no verifier verdicts.")
  body = text("h1", _title(page)) + intro + el("ul", _summary(page)) + filters(page.groups)
  body += join(group_section(g, names) for g in page.groups)
  return markup.document(_title(page), body, script=True)


def index_page(workdir: str, pages: Sequence[Page]) -> str:
  """The run's index: every page with its step, groups, subtasks and failed matches."""
  rows = [el("tr", join(text("th", h) for h in ("page", "step", "groups", "subtasks",
                                                "matches", "failed")))]
  for p in pages:
    bouts = [b for g in p.groups for b in g.bouts]
    rows.append(el("tr", el("td", text("a", _title(p), href=page_file(p)))
                   + el("td", number(p.step, 12)) + el("td", number(len(p.groups), 12))
                   + text("td", ", ".join(sorted({g.subtask for g in p.groups})))
                   + el("td", number(len(bouts), 12))
                   + el("td", number(sum(not b.ok for b in bouts), 12))))
  body = text("h1", f"Run {os.path.basename(os.path.abspath(workdir))}") + text(
      "p", os.path.abspath(workdir)) + el("table", join(rows))
  return markup.document(f"Run {os.path.abspath(workdir)}", body)
