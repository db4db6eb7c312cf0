"""CLI: python -m arenarl_jax.main --config=configs/<file>.py[:arg] --workdir=DIR [--mode=...].

Modes (the same command runs on every host of a pod):
  pipeline (default)  SFT (when ``sft.steps`` > 0) -> RL -> evaluation (``pipeline.py``).
  sft                 the SFT stage alone (``sft/stage.py``); its checkpoint is what the others
                      reuse.
  train               the RL loop from the SFT checkpoint (``rl/loop.py``), no evaluation.
  eval                the evaluation of the newest RL checkpoint in the workdir against the
                      references and the SFT policy (reproduces the pipeline's final evaluation).
  export              the newest RL (else SFT) policy as an HF safetensors directory with the
                      run's tokenizer, in <workdir>/export.
Any config key is set with ``--config.<key>=<value>`` (``run_config.load``). Every stage resumes
from what ``--workdir`` already holds.
"""
from __future__ import annotations

import argparse
from typing import Sequence

from arenarl_jax import run_config
from arenarl_jax.models import backend

MODES = ("pipeline", "sft", "train", "eval", "export")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  """The command line as (config: the locked ConfigDict, workdir, mode, verbosity)."""
  parser = argparse.ArgumentParser(prog="python -m arenarl_jax.main", allow_abbrev=False,
                                   description=__doc__.split("\n", 1)[0])
  parser.add_argument("--config", required=True,
                      help="config file (configs/*.py[:arg]); --config.<key>=<value> sets a key")
  parser.add_argument("--workdir", required=True, help="where outputs (logs, metrics, results) go")
  parser.add_argument("--mode", default="pipeline", choices=MODES, help="what to run")
  parser.add_argument("-v", "--verbosity", type=int, default=None,
                      help="absl log level of the libraries (-1 warning, 0 info, 1 debug); "
                      "default: warnings only")
  args, overrides = parser.parse_known_args(argv)
  try:
    args.config = run_config.load(args.config, overrides)
  except (FileNotFoundError, ValueError) as e:
    parser.error(str(e))
  return args


def main(argv: Sequence[str] | None = None) -> None:
  args = parse_args(argv)
  from absl import logging  # pylint: disable=g-import-not-at-top
  # orbax/absl INFO chatter drowns the run's own output unless asked for
  logging.set_verbosity(logging.WARNING if args.verbosity is None else args.verbosity)
  run_config.write(args.workdir, args.config)
  from arenarl_jax import pipeline  # pylint: disable=g-import-not-at-top  (jax, the model)
  pipeline.run_mode(args.mode, args.config, args.workdir)


def run():
  """Console-script entry point (`arenarl`); first the backend prepares the process (on a
  CPU-only host it re-executes itself with the retained-heap allocator settings:
  ``models/backend.py``'s ``prepare_process``)."""
  backend.prepare_process()
  main()


if __name__ == "__main__":
  run()
