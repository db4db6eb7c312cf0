"""The README's table of the paper's claims, generated from the experiments' CSVs.

  .venv/bin/python scripts/readme_claims.py           # rewrites the block in README.md
  .venv/bin/python scripts/readme_claims.py --check   # exits 1 when the block is not what the CSVs say

One table per paper claim, across every experiment: each row gives the paper's number, ours with
its 95% interval, the verdict and the command that produced it. The training studies' rows come
from their ``claims.csv`` (written by ``python -m arenarl_jax.experiments.run``, with the verdict
rule of ``arenarl_jax/experiments/claims.py``); the judge-agreement rows from its
``summary.csv`` (agreement with the noise-free checker over all pairs, whose gap to chance, 0.5,
gets the same rule). A study without its CSV gets one row that says so and names its command.
Nothing in the block is typed in. Ends with ``RESULT readme_claims=<rows> studies_run=<n>``.
"""
from __future__ import annotations

import argparse
import csv
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
BEGIN = "<!-- claims:begin (written by scripts/readme_claims.py; do not edit) -->"
END = "<!-- claims:end -->"
# (study folder, the paper's claim as a heading), in the README's order.
STUDIES = (
    ("arena_vs_pointwise", "Ranking by tournament beats pointwise scoring (GRPO, GSPO) at equal "
                           "judge budget (ARENARL.md §8: ArenaRL 41.8, GRPO 16.4, GSPO 17.2)"),
    ("topologies", "The topology order: round robin ≈ seeded single elimination > double "
                   "elimination > swiss > anchor (ARENARL.md §4)"),
    ("group_size", "A larger group helps monotonically, N = 16 best (ARENARL.md §8)"),
    ("valid_generation", "ArenaRL raises valid generations on deep research, 32% → 99% "
                         "(ARENARL.md §8)"),
    ("judge_agreement", "The pairwise judge can be trusted: 73.9% agreement with humans "
                        "(ARENARL.md §8); here, with the noise-free checker"),
    ("quickstart_control", "The gain is the ranking's: ArenaRL above its own start and above "
                           "advantages without information (the method's premise)"),
)
STUDY_COMMAND = "python -m arenarl_jax.experiments.run experiments/{}"
AGREEMENT_COMMAND = "python -m arenarl_jax.experiments.agreement experiments/judge_agreement"
CHANCE = 0.5  # a judge that guesses agrees with the checker on half the pairs
HEAD = ("| claim | paper | ours [95%] | seeds x tasks | verdict | command |\n"
        "|---|---|---|---|---|---|")


def _read(path: pathlib.Path) -> list[dict[str, str]]:
  with open(path, encoding="utf-8", newline="") as f:
    return list(csv.DictReader(f))


def _signed(text: str) -> str:
  return f"{float(text):+.3f}"


def study_rows(directory: pathlib.Path) -> list[str] | None:
  """A training study's rows from its ``claims.csv`` (None when it has none)."""
  path = directory / "claims.csv"
  if not path.is_file():
    return None
  rows = []
  for r in _read(path):
    if r["verdict"] == "not run yet":
      ours, size = "-", "-"
    elif r["low"] in ("nan", ""):
      ours, size = f"{_signed(r['gap'])} [n/a]", f"{r['seeds']} x {r['tasks']}"
    else:
      ours = f"{_signed(r['gap'])} [{_signed(r['low'])}, {_signed(r['high'])}]"
      size = f"{r['seeds']} x {r['tasks']}"
    rows.append(f"| {r['claim']} ({r['outcome']}) | {r['paper'] or '-'} | {ours} | {size} | "
                f"**{r['verdict']}** | `{r['command']}` |")
  return rows


def verdict(low: float, high: float) -> str:
  """The harness's rule for a gap above chance: the paper's direction is +1."""
  if low > 0:
    return "reproduced"
  if high < 0:
    return "contradicted"
  return "cannot tell"


def agreement_rows(directory: pathlib.Path) -> list[str] | None:
  """Per judge, its agreement with the checker over all pairs, minus chance."""
  path = directory / "summary.csv"
  if not path.is_file():
    return None
  rows = []
  for r in _read(path):
    if r["bin"] != "all":
      continue
    value, low, high = (float(r[k]) for k in ("agreement", "agreement_low", "agreement_high"))
    rows.append(f"| {r['judge']} agrees with the checker above chance (agreement {value:.3f} "
                f"[{low:.3f}, {high:.3f}]) | 73.9% with humans | "
                f"{value - CHANCE:+.3f} [{low - CHANCE:+.3f}, {high - CHANCE:+.3f}] | "
                f"{r['pairs']} pairs | **{verdict(low - CHANCE, high - CHANCE)}** | "
                f"`{AGREEMENT_COMMAND}` |")
  return rows


def render(root: pathlib.Path = ROOT) -> tuple[str, int, int]:
  """(the block between the markers, rows, studies with results)."""
  parts, total, found = [], 0, 0
  for name, heading in STUDIES:
    directory = root / "experiments" / name
    rows = agreement_rows(directory) if name == "judge_agreement" else study_rows(directory)
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
  block, rows, found = render()
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
