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

import argparse
import json
import os
import sys
from typing import Any, Sequence, TextIO

from arenarl_jax import run_config
from arenarl_jax.data import builder, records
from arenarl_jax.data.settings import DataSettings

COMMANDS = ("build", "show")


def dataset_path(source: builder.SourceConfig, data_dir: str = "") -> str:
  """Where the dataset of ``source`` is (or will be) built under ``data_dir`` (``data.dir``)."""
  return str(builder.make_builder(source, data_dir or None).data_dir)


def build(source: builder.SourceConfig, data_dir: str = "", *, overwrite: bool = False,
          out: TextIO = sys.stdout) -> str:
  """Builds the dataset of ``source`` under ``data_dir`` (``data.dir``) and prints its
  directory and split sizes."""
  path = builder.build(source, data_dir or None, overwrite=overwrite)
  out.write(f"{path}\n")
  for split, n in builder.splits(path).items():
    out.write(f"  {split}: {n} records\n")
  skipped = builder.load(path).info.metadata.get("skipped_count")
  if skipped:
    out.write(f"  skipped bad rows: {skipped} (listed in {os.path.join(path, 'metadata.json')})\n")
  return path


def show(path: str, split: str, count: int, *,
         out: TextIO = sys.stdout) -> list[dict[str, Any]]:
  """Prints the first ``count`` records of ``split`` of the dataset at ``path`` (messages and
  reference decoded)."""
  src = builder.data_source(path, split)
  shown = []
  for i in range(min(count, len(src))):
    ex = records.Example.from_record(src[i])
    shown.append({"task_id": ex.task_id, "env": ex.env, "subtask": ex.subtask, "query": ex.query,
                  "messages": list(ex.messages), "reference": list(ex.reference)})
    out.write(json.dumps(shown[-1], ensure_ascii=False, indent=1) + "\n")
  return shown


def main(argv: Sequence[str] | None = None) -> None:
  parser = argparse.ArgumentParser(prog="python -m arenarl_jax.data.cli", allow_abbrev=False,
                                   description=__doc__.split("\n", 1)[0])
  parser.add_argument("command", choices=COMMANDS)
  parser.add_argument("--config", required=True,
                      help="config file (configs/*.py[:arg]); --config.<key>=<value> sets a key")
  parser.add_argument("--overwrite", action="store_true",
                      help="build: rebuild even if the dataset exists")
  parser.add_argument("--split", default="train", help="show: the split to print")
  parser.add_argument("--count", type=int, default=3,
                      help="show: how many records to print (from the first)")
  args, overrides = parser.parse_known_args(argv)
  try:
    config = run_config.load(args.config, overrides)
  except (FileNotFoundError, ValueError) as e:
    parser.error(str(e))
  data = DataSettings.from_config(config.data)
  source = builder.make_source_config(data, config.env)
  if args.command == "build":
    build(source, data.dir, overwrite=args.overwrite)
  else:
    show(dataset_path(source, data.dir), args.split, args.count)


if __name__ == "__main__":
  main()
