"""A run's config: made from a config file and its overrides, saved in the workdir, read back.

``load(spec, overrides)`` is what ``--config=path[:arg] --config.<key>=<value> ...`` means on
the command line: the file's locked config with each override applied by ml_collections' own
parser (values cast to the key's type, a typo names the key). ``write`` saves it as
``<workdir>/config.json``; ``read`` is the one reader of that file: today's defaults
(``config_tree``) with the run's keys on top, locked, so a run saved before a key existed still
reads. ``read_tree`` is the file's JSON as written (what a hash of the run's config covers).
Standard library and ml_collections only: no jax.
"""
from __future__ import annotations

import json
import os
from typing import Any, Sequence

import ml_collections

from arenarl_jax import config_tree

CONFIG_FILE = "config.json"


def load(spec: str, overrides: Sequence[str] = ()) -> ml_collections.ConfigDict:
  """The locked config of ``spec`` (``path[:arg]``) with ``--config.<key>=<value>`` overrides.

  Raises FileNotFoundError for a missing file and ValueError for an argument that is not an
  override, a key the config lacks or a value of the wrong type.
  """
  from absl import flags  # pylint: disable=g-import-not-at-top
  from ml_collections import config_flags  # pylint: disable=g-import-not-at-top
  config = config_tree.load_config_file(spec)
  config.lock()
  argv = ["arenarl", *overrides]
  values = flags.FlagValues()  # private: the process's absl flags stay untouched
  try:
    config_flags.DEFINE_config_dict("config", config, flag_values=values, lock_config=True,
                                    sys_argv=argv)
    rest = values(argv)[1:]
  except (flags.Error, AttributeError, KeyError, TypeError) as e:
    while e.args and isinstance(e.args[0], Exception):  # ml_collections wraps its KeyError
      e = e.args[0]
    raise ValueError(f"config override: {e.args[0] if e.args else e}") from e
  if rest:
    raise ValueError(f"unexpected arguments {rest}: a config key is set as --config.<key>=<value>")
  return values.config


def write(workdir: str, config: ml_collections.ConfigDict) -> str:
  """Saves ``config`` as ``<workdir>/config.json``; returns the file's path."""
  os.makedirs(workdir, exist_ok=True)
  path = os.path.join(workdir, CONFIG_FILE)
  with open(path, "w", encoding="utf-8") as f:
    f.write(config.to_json_best_effort(indent=2))
  return path


def read_tree(workdir: str) -> dict[str, Any]:
  """``<workdir>/config.json`` as written (nested dicts)."""
  path = os.path.join(workdir, CONFIG_FILE)
  if not os.path.isfile(path):
    raise FileNotFoundError(f"{path}: not found (--workdir must be a run's workdir)")
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def read(workdir: str) -> ml_collections.ConfigDict:
  """The run's config: today's defaults with ``<workdir>/config.json``'s keys on top, locked."""
  config = config_tree.make_base_config()
  config.update_from_flattened_dict(config_tree.flat(read_tree(workdir)))
  config.lock()
  return config

