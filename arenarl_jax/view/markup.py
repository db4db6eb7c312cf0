"""The viewer's HTML building blocks: escaping, elements, and the page shell with its inline style
and filter script.

Everything a run wrote is untrusted text (a policy can write any string into its answer, its
tool arguments or its task's fields), so markup is only ever built here from constant tag and
attribute names, with every value passed through :func:`esc` (``html.escape`` with quotes), both
in text and in attribute values. The script embeds no run data at all: the filters read the
escaped ``data-*`` attributes of the page's elements and only toggle their ``hidden`` property,
so no run string reaches a script context or ``innerHTML``. Pages need no network or server:
no external stylesheet, script, font or image. As a second line of defence each page's
Content-Security-Policy allows no network at all and no script but the filter script (by its
hash), so even markup that slipped through could neither run nor load anything.
"""
from __future__ import annotations

import base64
import hashlib
import html
from typing import Any, Iterable

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0 1.2em 3em;color:#222;background:#fafafa}
h1{font-size:1.4em}h2{font-size:1.15em;margin:.2em 0}h3{font-size:1em;margin:.8em 0 .3em}
a{color:#2451a6}[hidden]{display:none!important}.bracket a{color:inherit;text-decoration:none}
pre{white-space:pre-wrap;word-break:break-word;margin:.2em 0;font:12px/1.35 ui-monospace,monospace}
table{border-collapse:collapse;margin:.3em 0}td,th{border:1px solid #ccc;padding:2px 6px;
text-align:right}th:first-child,td:first-child{text-align:left}
.filters{position:sticky;top:0;background:#fafafa;padding:.5em 0;border-bottom:1px solid #ddd;
z-index:1}.filters span.label{display:inline-block;min-width:5em;font-weight:600}
.filters button{margin:1px;border:1px solid #999;background:#fff;border-radius:3px;cursor:pointer}
.filters button.active{background:#2451a6;color:#fff}
.group{background:#fff;border:1px solid #ccc;border-radius:6px;margin:1em 0;padding:.6em 1em}
.query{background:#f0f4fa;padding:.4em;border-radius:4px}
.bracket{display:flex;gap:1.2em;overflow-x:auto;align-items:flex-start;margin:.5em 0}
.round{min-width:11em}.round h3{margin-top:0}
.match{border:1px solid #999;border-radius:4px;margin:.3em 0;padding:.2em .4em;background:#fff}
.match .side{display:flex;justify-content:space-between;gap:1em}
.match .side.winner{font-weight:700;color:#176b1f}.match.failed{border-color:#c00;
background:#fff0f0}.match.tied{background:#f7f7e8}
.badge{display:inline-block;border-radius:3px;padding:0 4px;margin:0 2px;font-size:12px;
background:#eee}.badge.good{background:#d8f0da}.badge.bad{background:#f8dada}
.players{display:flex;gap:.8em;overflow-x:auto;align-items:flex-start}
.player{flex:0 0 28em;max-width:40em;border:1px solid #ddd;border-radius:4px;padding:.3em .5em}
.turn{border-top:1px dashed #ddd;padding:.2em 0}.role{font-size:11px;color:#666;
text-transform:uppercase}.reasoning{color:#555;font-style:italic}
.call{background:#f5f0fa;border-radius:3px;padding:.1em .3em;margin:.2em 0}
.result{background:#f3f3f3;border-radius:3px;padding:.1em .3em}
.error{color:#b00}.unmet{color:#b00;margin:.2em 0 .2em 1.2em;padding:0}
"""

# Filters: every button has data-filter (one of the fixed names below) and data-value; a
# section of class "group" is shown when, for each filter, the chosen value is "" (all) or
# equals its data-<filter> attribute (data-outcomes: a space-separated set).
SCRIPT = """
(function(){
  var state = {subtask: "", outcome: "", solved: ""};
  var groups = document.querySelectorAll(".group");
  var buttons = document.querySelectorAll("button[data-filter]");
  function keep(g){
    if (state.subtask && g.dataset.subtask !== state.subtask) return false;
    if (state.outcome && g.dataset.outcomes.split(" ").indexOf(state.outcome) < 0) return false;
    if (state.solved && g.dataset.solved !== state.solved) return false;
    return true;
  }
  function apply(){
    var shown = 0;
    groups.forEach(function(g){ var k = keep(g); g.hidden = !k; if (k) shown++; });
    buttons.forEach(function(b){
      b.classList.toggle("active", state[b.dataset.filter] === b.dataset.value);
    });
    var count = document.getElementById("shown");
    if (count) count.textContent = shown + " of " + groups.length + " shown";
  }
  buttons.forEach(function(b){
    b.addEventListener("click", function(){
      if (Object.prototype.hasOwnProperty.call(state, b.dataset.filter)) {
        state[b.dataset.filter] = b.dataset.value;
        apply();
      }
    });
  });
  apply();
})();
"""


def esc(value: Any) -> str:
  """``value`` as HTML text or attribute value: ``&``, ``<``, ``>``, ``"`` and ``'`` escaped."""
  return html.escape(value if isinstance(value, str) else str(value), quote=True)


def attrs(**values: Any) -> str:
  """`` name="value"`` pairs (escaped); a trailing ``_`` is dropped (``class_``), ``_`` in a
  name becomes ``-`` (``data_subtask``); None values are left out."""
  out = []
  for name, value in values.items():
    if value is None:
      continue
    out.append(f' {name.rstrip("_").replace("_", "-")}="{esc(value)}"')
  return "".join(out)


def el(tag: str, body: str = "", **values: Any) -> str:
  """An element: ``tag`` is a constant of the caller, ``body`` already-safe markup (use
  :func:`text` for run strings)."""
  return f"<{tag}{attrs(**values)}>{body}</{tag}>"


def text(tag: str, value: Any, **values: Any) -> str:
  """An element whose body is ``value`` escaped."""
  return el(tag, esc(value), **values)


def join(parts: Iterable[str]) -> str:
  return "".join(parts)


def number(x: Any, digits: int = 3) -> str:
  """A logged number compactly (``%g``), anything else escaped as text; ``-`` for missing."""
  if x is None:
    return "-"
  if isinstance(x, bool) or not isinstance(x, (int, float)):
    return esc(x)
  return esc(f"{x:.{digits}g}")


def _policy(script: bool) -> str:
  digest = base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()
  scripts = f"'sha256-{digest}'" if script else "'none'"
  return (f"default-src 'none'; style-src 'unsafe-inline'; script-src {scripts}; "
          "img-src 'none'; form-action 'none'; base-uri 'none'")


def document(title: str, body: str, *, script: bool = False) -> str:
  """A whole self-contained page: inline style and, with ``script``, the filter script."""
  tail = f"<script>{SCRIPT}</script>" if script else ""
  return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
          f"<meta http-equiv=\"Content-Security-Policy\" content=\"{esc(_policy(script))}\">"
          "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
          f"<title>{esc(title)}</title><style>{STYLE}</style></head>"
          f"<body>{body}{tail}</body></html>\n")
