"""CLI: python -m arenarl_jax.view --workdir=RUN [--out=DIR]

Writes the run's static viewer (``view/site.py``) and prints where its index is; a file it cannot
read is named (with its line) and the exit status is 2.
"""
from __future__ import annotations

import argparse
import os
import sys

from arenarl_jax.view import reading, site


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="python -m arenarl_jax.view",
                                   description="A static HTML viewer of a run's evaluations and "
                                   "RL rollouts: brackets, judge scores, trajectories.")
  parser.add_argument("--workdir", required=True, help="the run's --workdir")
  parser.add_argument("--out", default=None, help="where the site goes (default WORKDIR/view)")
  args = parser.parse_args(argv)
  try:
    written = site.write_site(args.workdir, args.out)
  except reading.ViewError as e:
    print(f"arenarl_jax.view: {e}", file=sys.stderr)
    return 2
  index = os.path.abspath(written[0])
  print(f"wrote {len(written) - 1} pages; open file://{index}")
  print(f"or serve: python -m http.server --directory {os.path.dirname(index)}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
