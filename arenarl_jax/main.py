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
Every stage resumes from what ``--workdir`` already holds.
"""
from __future__ import annotations

import os

from absl import app, flags, logging
from ml_collections import config_flags

from arenarl_jax.models import backend

_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file (configs/*.py[:arg]).",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Where outputs (logs, metrics, results) go.")
_MODE = flags.DEFINE_enum("mode", "pipeline", ["pipeline", "sft", "train", "eval", "export"],
                          "What to run.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)  # orbax/absl INFO chatter drowns the run's own output
  config, workdir, mode = _CONFIG.value, _WORKDIR.value, _MODE.value
  os.makedirs(workdir, exist_ok=True)
  with open(os.path.join(workdir, "config.json"), "w") as f:
    f.write(config.to_json_best_effort(indent=2))
  from arenarl_jax import pipeline  # heavy imports (jax, model) only once flags are valid
  pipeline.run_mode(mode, config, workdir)


def run():
  """Console-script entry point (`arenarl`); first the backend prepares the process (on a
  CPU-only host it re-executes itself with the retained-heap allocator settings:
  ``models/backend.py``'s ``prepare_process``)."""
  backend.prepare_process()
  app.run(main)


if __name__ == "__main__":
  run()
