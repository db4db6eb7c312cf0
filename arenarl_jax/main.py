"""CLI: python -m arenarl_jax.main --config=configs/<file>.py[:arg] --workdir=DIR [--mode=...].

Modes: ``pipeline`` (default) runs every stage that exists, in order. Today that is the embedded
end-to-end demo (arenarl_jax/demo.py: load SmolLM2, sample a group of tool-using answers per prompt,
parse them, rank each group with a tournament, print advantages). ``train`` runs the RL loop
(arenarl_jax/train.py) with the rollout named by ``rl.rollout`` (today only ``fake``: random
sequences, for checking updates, checkpoints and multi-host runs); the same command runs on every
host of a pod. The sft and eval stages are the next issues; asking for them now fails with a clear
message instead of pretending.
"""
from __future__ import annotations

import os
import sys

from absl import app, flags, logging
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file (configs/*.py[:arg]).",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Where outputs (logs, metrics, results) go.")
_MODE = flags.DEFINE_enum("mode", "pipeline", ["pipeline", "sft", "train", "eval"], "What to run.")
flags.mark_flags_as_required(["config", "workdir"])

_NOT_BUILT = ("mode {mode!r} is not built yet: the SFT/RL/eval stages arrive with the training "
              "issue; `--mode=pipeline` runs everything that exists today")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)  # orbax/absl INFO chatter drowns the run's own output
  config, workdir, mode = _CONFIG.value, _WORKDIR.value, _MODE.value
  os.makedirs(workdir, exist_ok=True)
  with open(os.path.join(workdir, "config.json"), "w") as f:
    f.write(config.to_json_best_effort(indent=2))
  if mode == "train":
    from arenarl_jax import train  # pylint: disable=import-outside-toplevel
    train.main(config, workdir)
    return
  if mode != "pipeline":
    sys.exit(_NOT_BUILT.format(mode=mode))
  from arenarl_jax import demo  # heavy imports (jax, model) only once flags are valid
  logging.info("running the pipeline in %s", workdir)
  demo.run(config, workdir)


def run():
  """Console-script entry point (`arenarl`)."""
  app.run(main)


if __name__ == "__main__":
  run()
