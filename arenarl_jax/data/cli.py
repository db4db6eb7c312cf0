"""Build and inspect datasets from a run's config.

  python -m arenarl_jax.data.cli build --config=configs/quickstart.py [--overwrite]
  python -m arenarl_jax.data.cli show --config=configs/quickstart.py --split=train --count=3

``build`` builds the dataset the config names (``data.source``: the environment ``env.name`` from
``env.seed``, or the jsonl files under ``data.import_dir``) into ``data.dir`` and prints its
directory and splits; ``show`` prints records of one split as JSON (messages decoded). Any config
key can be overridden, e.g. ``--config.env.seed=3`` or
``--config.data.source=import --config.data.import_dir=/path/to/open_travel``.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Any, TextIO

from absl import app, flags
import ml_collections
from ml_collections import config_flags

from arenarl_jax.data import builder, records

_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file (configs/*.py[:arg]).",
                                          lock_config=True)
_OVERWRITE = flags.DEFINE_bool("overwrite", False, "build: rebuild even if the dataset exists.")
_SPLIT = flags.DEFINE_string("split", "train", "show: the split to print.")
_COUNT = flags.DEFINE_integer("count", 3, "show: how many records to print (from the first).")
COMMANDS = ("build", "show")


def dataset_path(config: ml_collections.ConfigDict) -> str:
  """Where the dataset the config names is (or will be) built."""
  return str(builder.make_builder(builder.make_source_config(config),
                                  config.data.dir or None).data_dir)


def build(config: ml_collections.ConfigDict, *, overwrite: bool = False,
          out: TextIO = sys.stdout) -> str:
  """Builds the config's dataset and prints its directory and split sizes."""
  path = builder.build(builder.make_source_config(config), config.data.dir or None,
                       overwrite=overwrite)
  out.write(f"{path}\n")
  for split, n in builder.splits(path).items():
    out.write(f"  {split}: {n} records\n")
  skipped = builder.load(path).info.metadata.get("skipped_count")
  if skipped:
    out.write(f"  skipped bad rows: {skipped} (listed in {os.path.join(path, 'metadata.json')})\n")
  return path


def show(config: ml_collections.ConfigDict, split: str, count: int, *,
         out: TextIO = sys.stdout) -> list[dict[str, Any]]:
  """Prints the first ``count`` records of ``split`` (messages and reference decoded)."""
  src = builder.data_source(dataset_path(config), split)
  shown = []
  for i in range(min(count, len(src))):
    ex = records.Example.from_record(src[i])
    shown.append({"task_id": ex.task_id, "env": ex.env, "subtask": ex.subtask, "query": ex.query,
                  "messages": list(ex.messages), "reference": list(ex.reference)})
    out.write(json.dumps(shown[-1], ensure_ascii=False, indent=1) + "\n")
  return shown


def main(argv: list[str]) -> None:
  if len(argv) != 2 or argv[1] not in COMMANDS:
    raise app.UsageError(f"usage: python -m arenarl_jax.data.cli {'|'.join(COMMANDS)} "
                         f"--config=configs/<file>.py [flags]")
  if argv[1] == "build":
    build(_CONFIG.value, overwrite=_OVERWRITE.value)
  else:
    show(_CONFIG.value, _SPLIT.value, _COUNT.value)


if __name__ == "__main__":
  flags.mark_flags_as_required(["config"])
  app.run(main)
