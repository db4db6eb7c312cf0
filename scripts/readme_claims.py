"""The README's table of the paper's claims, generated from the experiments' CSVs.

  .venv/bin/python scripts/readme_claims.py           # rewrites the block in README.md
  .venv/bin/python scripts/readme_claims.py --check   # exits 1 when the block is not what the CSVs say

One table per paper claim, across every experiment: each row gives the paper's number, ours with
its 95% interval, the verdict and the command that produced it. The training studies' rows come
from their ``claims.csv`` (written by ``python -m arenarl_jax.experiments.run``); the
judge-agreement rows from its ``summary.csv`` (agreement with the noise-free checker over all
pairs, whose gap to chance, 0.5, gets the same rule). Every verdict is recomputed here from the
row's interval and direction by the rule of ``arenarl_jax/experiments/claims.py``, never copied:
a ``claims.csv`` whose verdict disagrees with its own interval is an error (a hand-edited
verdict), and so is a ``stale`` verdict that names no stale run. The rubric judges of the
agreement study are its reference (the checker itself) and its control (the checker plus noise):
they get a row each, but no verdict, after the model judges. A study without its CSV gets one
row that says so and names its command. Nothing in the block is typed in. Ends with
``RESULT readme_claims=<rows> studies_run=<n>``.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
BEGIN = "<!-- claims:begin (written by scripts/readme_claims.py; do not edit) -->"
END = "<!-- claims:end -->"
# (study folder, the paper's claim as a heading), in the README's order. Sources name the
# paper (arXiv 2601.06487) and where in it.
PAPER = "arXiv 2601.06487"
STUDIES = (
    ("arena_vs_pointwise", "Ranking by tournament beats pointwise scoring (GRPO, GSPO) at equal "
                           f"judge budget ({PAPER}, main results: ArenaRL 41.8, GRPO 16.4, "
                           "GSPO 17.2)"),
    ("topologies", "The topology order: round robin ≈ seeded single elimination > double "
                   f"elimination > swiss > anchor ({PAPER}, topology ablation: 32.9, 32.5, 30.2, "
                   "28.3, 27.8)"),
    ("group_size", f"A larger group helps monotonically, N = 16 best ({PAPER}, main results and "
                   "analysis)"),
    ("valid_generation", "ArenaRL raises valid generations on deep research, 32% → 99% "
                         f"({PAPER}, main results and analysis)"),
    ("judge_agreement", "The pairwise judge can be trusted ({PAPER}, main results and analysis: "
                        "73.9% agreement with humans). Measured here: each judge's agreement "
                        "with the noise-free checker on {pairs} travel pairs of known order; the "
                        "rubric judges are the reference and the control, not verdicts"),
    ("quickstart_control", "The gain is the ranking's: ArenaRL above its own start and above "
                           f"advantages without information ({PAPER}, method: the premise)"),
)
STUDY_COMMAND = "python -m arenarl_jax.experiments.run experiments/{}"
AGREEMENT_COMMAND = "python -m arenarl_jax.experiments.agreement experiments/judge_agreement"
CHANCE = 0.5  # a judge that guesses agrees with the checker on half the pairs
# Where the paper reports its judge's agreement with human annotators.
HUMANS = f"{PAPER}, main results and analysis: 73.9% agreement with humans"
NOT_RUN, STALE = "not run yet", "stale"  # the harness's words for a claim without a verdict
HEAD = ("| claim | paper | ours [95%] | seeds x tasks | verdict | command |\n"
        "|---|---|---|---|---|---|")


def _read(path: pathlib.Path) -> list[dict[str, str]]:
  with open(path, encoding="utf-8", newline="") as f:
    return list(csv.DictReader(f))


def _signed(text: str) -> str:
  return f"{float(text):+.3f}"


def rule(low: float, high: float, direction: int = 1) -> str:
  """The harness's verdict rule (``claims.verdict``) on an interval: reproduced when it excludes
  0 on the paper's side (``direction``), contradicted on the other, otherwise cannot tell (an
  interval that touches 0, or none: NaN)."""
  side = 1 if low > 0 else -1 if high < 0 else 0  # NaN compares false both ways
  if side == 0:
    return "cannot tell"
  return "reproduced" if side == direction else "contradicted"


def verdict(low: float, high: float) -> str:
  """The rule for a gap above chance: the paper's direction is +1."""
  return rule(low, high, 1)


def row_verdict(r: dict[str, str]) -> str:
  """A ``claims.csv`` row's verdict, recomputed: ValueError when the row's own disagrees."""
  written = r["verdict"]
  if written == NOT_RUN:
    if r["gap"]:
      raise ValueError(f"claims.csv row {r['claim']!r} ({r['outcome']}): 'not run yet' with a gap")
    return written
  if written == STALE:
    if not r.get("stale_runs", "").strip():
      raise ValueError(f"claims.csv row {r['claim']!r} ({r['outcome']}): 'stale' names no "
                       "stale run")
    return written
  low = float(r["low"]) if r["low"] not in ("", "nan") else math.nan
  high = float(r["high"]) if r["high"] not in ("", "nan") else math.nan
  computed = rule(low, high, int(r["direction"]))
  if computed != written:
    raise ValueError(f"claims.csv row {r['claim']!r} ({r['outcome']}) reads {written!r}, but "
                     f"its interval [{r['low']}, {r['high']}] in direction {r['direction']} "
                     f"gives {computed!r}: rebuild it with its study command")
  return computed


def study_rows(directory: pathlib.Path) -> list[str] | None:
  """A training study's rows from its ``claims.csv`` (None when it has none)."""
  path = directory / "claims.csv"
  if not path.is_file():
    return None
  rows = []
  for r in _read(path):
    word = row_verdict(r)
    if word == NOT_RUN:
      ours, size = "-", "-"
    elif r["low"] in ("nan", ""):
      ours, size = f"{_signed(r['gap'])} [n/a]", f"{r['seeds']} x {r['tasks']}"
    else:
      ours = f"{_signed(r['gap'])} [{_signed(r['low'])}, {_signed(r['high'])}]"
      size = f"{r['seeds']} x {r['tasks']}"
    rows.append(f"| {r['claim']} ({r['outcome']}) | {r['paper'] or '-'} | {ours} | {size} | "
                f"**{word}** | `{r['command']}` |")
  return rows


def judge_role(directory: pathlib.Path, judge: str) -> str | None:
  """``reference`` (the rubric judge without noise: the checker itself), ``control`` (the rubric
  judge with noise) or None (a model judge), from the judge's result file."""
  path = directory / "results" / f"{judge}.json"
  if not path.is_file():
    return None
  rec = json.loads(path.read_text(encoding="utf-8"))
  if rec.get("kind") != "rubric":
    return None
  noise = (rec.get("options") or {}).get("noise") or {}
  return "control" if any(v for v in noise.values() if not isinstance(v, bool)) else "reference"


ROLES = {"reference": "the reference: the noise-free checker itself, 1.0 by construction",
         "control": "the control: the checker plus the quickstart's stated noise"}


def agreement_pairs(directory: pathlib.Path) -> int | None:
  """The most pairs any judge was scored on over all bins (the pair set's size)."""
  path = directory / "summary.csv"
  if not path.is_file():
    return None
  return max((int(r["pairs"]) for r in _read(path) if r["bin"] == "all"), default=None)


def agreement_rows(directory: pathlib.Path) -> list[str] | None:
  """Per judge, its agreement with the checker over all pairs, minus chance: the model judges
  with a verdict, then the rubric judges (reference and control) without one."""
  path = directory / "summary.csv"
  if not path.is_file():
    return None
  models, rubrics = [], []
  for r in _read(path):
    if r["bin"] != "all":
      continue
    value, low, high = (float(r[k]) for k in ("agreement", "agreement_low", "agreement_high"))
    role = judge_role(directory, r["judge"])
    if role is None:
      models.append(f"| {r['judge']} agrees with the checker above chance (agreement "
                    f"{value:.3f} [{low:.3f}, {high:.3f}]) | {HUMANS} | "
                    f"{value - CHANCE:+.3f} [{low - CHANCE:+.3f}, {high - CHANCE:+.3f}] | "
                    f"{r['pairs']} pairs | **{verdict(low - CHANCE, high - CHANCE)}** | "
                    f"`{AGREEMENT_COMMAND}` |")
    else:
      rubrics.append(f"| {r['judge']}, {ROLES[role]} (agreement {value:.3f} [{low:.3f}, "
                     f"{high:.3f}]) | - | {value - CHANCE:+.3f} [{low - CHANCE:+.3f}, "
                     f"{high - CHANCE:+.3f}] | {r['pairs']} pairs | {role}, no verdict | "
                     f"`{AGREEMENT_COMMAND}` |")
  return models + rubrics


def render(root: pathlib.Path = ROOT) -> tuple[str, int, int]:
  """(the block between the markers, rows, studies with results)."""
  parts, total, found = [], 0, 0
  for name, heading in STUDIES:
    directory = root / "experiments" / name
    rows = agreement_rows(directory) if name == "judge_agreement" else study_rows(directory)
    if "{pairs}" in heading:
      heading = heading.format(PAPER=PAPER, pairs=agreement_pairs(directory) or "its")
    parts += [f"**{heading}** — [`experiments/{name}/`](experiments/{name}/)", "", HEAD]
    if rows is None:
      command = AGREEMENT_COMMAND if name == "judge_agreement" else STUDY_COMMAND.format(name)
      rows = [f"| not run yet | - | - | - | - | `{command}` |"]
    else:
      found += 1
      total += len(rows)
    parts += [*rows, ""]
  return "\n".join(parts).rstrip("\n"), total, found


def replace_block(readme: str, block: str) -> str:
  """README text with the marked block replaced; the markers must each appear once, in order."""
  if readme.count(BEGIN) != 1 or readme.count(END) != 1 or readme.index(BEGIN) > readme.index(END):
    raise ValueError(f"README.md must hold the markers {BEGIN!r} and {END!r} once each, in order")
  before, rest = readme.split(BEGIN, 1)
  return before + BEGIN + "\n" + block + "\n" + END + rest.split(END, 1)[1]


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--check", action="store_true",
                      help="only compare README.md's block with the CSVs")
  args = parser.parse_args(argv)
  readme_path = ROOT / "README.md"
  try:
    block, rows, found = render(ROOT)
  except ValueError as e:  # a claims.csv whose verdict is not its interval's
    print(f"error: {e}")
    return 1
  readme = readme_path.read_text(encoding="utf-8")
  updated = replace_block(readme, block)
  if args.check:
    if updated != readme:
      print("README.md's claims block differs from the experiments' CSVs: "
            "run .venv/bin/python scripts/readme_claims.py")
      return 1
  elif updated != readme:
    readme_path.write_text(updated, encoding="utf-8")
  print(f"RESULT readme_claims={rows} studies_run={found}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
