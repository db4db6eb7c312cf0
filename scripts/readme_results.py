"""Puts what the quickstart printed on the README's first screen (numbers never typed in).

  .venv/bin/python scripts/readme_results.py --run           # runs the README's main job, then updates
  .venv/bin/python scripts/readme_results.py --log FILE      # updates from a saved run's output

``--run`` runs exactly the README's main-job command (``python -m arenarl_jax.main
--config=configs/quickstart.py --workdir=runs/quickstart``, or ``--workdir``) in a fresh workdir:
a workdir that already holds files is refused (the job would resume from its checkpoints and
the block would show a resumed run's times), never deleted. It tees its output to ``<workdir>/output.txt`` and then copies the final
evaluation's table, the time per stage and the ``RESULT`` line into README.md between the
``quickstart-output`` markers, with the run's wall time, date and load average (``--log``: only
when the saved output was read, since its run was not timed here). Ends with
``RESULT readme_updated=1 wall_s=…``.
"""
from __future__ import annotations

import argparse
import datetime
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
BEGIN = "<!-- quickstart-output:begin (written by scripts/readme_results.py; do not edit) -->"
END = "<!-- quickstart-output:end -->"
COMMAND = ["-m", "arenarl_jax.main", "--config=configs/quickstart.py"]


def final_section(output: str) -> str:
  """The final evaluation's table through the pipeline's ``RESULT`` line, from a run's output."""
  lines = output.splitlines()
  starts = [i for i, line in enumerate(lines) if line.startswith("final evaluation at RL step")]
  ends = [i for i, line in enumerate(lines) if line.startswith("RESULT win_rate_vs_")]
  if not starts or not ends or ends[-1] < starts[-1]:
    raise ValueError("the output holds no final evaluation followed by its RESULT line: "
                     "was it a complete quickstart run?")
  return "\n".join(lines[starts[-1]:ends[-1] + 1])


def render_block(section: str, *, wall_s: float | None, when: str, load: str | None) -> str:
  """The marked block. A run this script timed (``wall_s`` and ``load`` given) names its load
  and wall time; a saved log (both None) names only when it was read."""
  if wall_s is None or load is None:
    head = f"Printed by a run of the command above (its saved output, read {when}):"
  else:
    head = (f"Printed by the last run of the command above ({when}, load average {load}, "
            f"{wall_s / 60:.1f} min end to end):")
  return f"{BEGIN}\n{head}\n```\n{section}\n```\n{END}"


def replace_block(readme: str, block: str) -> str:
  """README text with the marked block replaced; the markers must each appear exactly once."""
  if readme.count(BEGIN) != 1 or readme.count(END) != 1 or readme.index(BEGIN) > readme.index(END):
    raise ValueError(f"README.md must hold the markers {BEGIN!r} and {END!r} once each, in order")
  before, rest = readme.split(BEGIN, 1)
  after = rest.split(END, 1)[1]
  return before + block + after


def run_quickstart(workdir: pathlib.Path) -> tuple[str, float]:
  """Runs the main job in a fresh ``workdir``, streaming and saving its output; (output, wall
  seconds). A workdir with files in it is refused: the job would resume instead of running."""
  if workdir.exists() and any(workdir.iterdir()):
    raise SystemExit(f"--workdir {workdir} already holds a run (the quickstart would resume from "
                     "it): move it away or pass another --workdir; README.md left unchanged")
  workdir.mkdir(parents=True, exist_ok=True)
  cmd = [sys.executable, *COMMAND, f"--workdir={workdir}"]
  t0 = time.monotonic()
  out: list[str] = []
  with subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                        text=True, bufsize=1) as proc:
    assert proc.stdout is not None
    for line in proc.stdout:
      sys.stdout.write(line)
      out.append(line)
  wall = time.monotonic() - t0
  text = "".join(out)
  (workdir / "output.txt").write_text(text)
  if proc.returncode:
    raise SystemExit(f"the quickstart exited with {proc.returncode}; README.md left unchanged")
  return text, wall


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  group = parser.add_mutually_exclusive_group(required=True)
  group.add_argument("--run", action="store_true", help="run the quickstart, then update")
  group.add_argument("--log", help="a saved quickstart output to take the numbers from")
  parser.add_argument("--workdir", default="runs/quickstart")
  parser.add_argument("--readme", default=str(ROOT / "README.md"))
  args = parser.parse_args(argv)
  if args.run:
    output, wall = run_quickstart(ROOT / args.workdir)
    load = f"{os.getloadavg()[0]:.1f}"
  else:
    output, wall, load = pathlib.Path(args.log).read_text(), None, None
  when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
  block = render_block(final_section(output), wall_s=wall, when=when, load=load)
  readme = pathlib.Path(args.readme)
  readme.write_text(replace_block(readme.read_text(), block))
  print(f"RESULT readme_updated=1 wall_s={wall if wall is not None else float('nan'):.1f}")


if __name__ == "__main__":
  main()
