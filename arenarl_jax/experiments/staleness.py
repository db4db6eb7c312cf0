"""Is a committed result what its study would produce now? The values that shape a run's result,
recorded in its result file and compared with what ``study.py`` resolves to today.

A result file's ``provenance`` holds (``runner.run_one`` writes them, from what ran):

  settings  every value of the run's resolved config by dotted key, except ``NOT_SHAPING`` (where
            files go, logging, checkpoint cadence, read speed: keys that change no number)
  start     the pinned start the run began from (``start.name`` set and not building): its
            ``START.json`` ``settings_hash`` and the SHA-256 of its ``model.safetensors``; None
            without one, or when its folder is missing
  dataset   the name of the dataset the config reads (``data/builder.py``: it names the
            record-shaping settings and digests the code that writes the records); computing it
            builds nothing

A result is **stale** when one of these differs from the run's config now: a setting changed or
removed, or absent from the record at a value other than its base default
(``config_tree.stale_keys``: a key added later at the value that keeps the old behaviour changes
nothing, and so does a key of ``NOT_SHAPING``), another pinned start or another dataset. A result
file written before these records existed has no ``settings`` and is stale too (``NO_RECORD``).
The study command reruns stale runs; ``--tables-only`` withholds their claims' verdicts;
``--check`` lists them (``run.py``). Nothing here builds a dataset or trains anything.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Mapping

import ml_collections

from arenarl_jax import config_tree

# Config keys that change no number of a finished run (a key lies under an entry or equals it).
# Everything else in the resolved config counts: a key missing here errs towards rerunning.
NOT_SHAPING = (
    # Where files go: datasets, converted parameters, caches, the pinned start's folder (its
    # content is digested in ``start``).
    "data.dir", "model.cache_dir", "env.research.cache_dir", "judge.http.cache_dir", "start.dir",
    # Logging, progress bars, TensorBoard, and how often SFT logs.
    "metrics", "sft.log_every",
    # Checkpoint cadence and retention (the runner starts every run in a fresh workdir).
    "checkpoint", "sft.checkpoint_every",
    # How fast records are read: grain's threads and prefetch (the same records, same order).
    "data.read_threads", "data.prefetch",
    # Names and addresses of the machinery: the judge's API-key variable, the coordinator.
    "judge.http.api_key_env", "distributed.coordinator_address",
)
NO_RECORD = "no recorded settings (result predates staleness records)"
ABSENT = "<absent>"
WEIGHTS = "model.safetensors"


def _under(key: str, prefix: str) -> bool:
  return key == prefix or key.startswith(prefix + ".")


def shapes(key: str) -> bool:
  """Whether the dotted config key ``key`` can change a run's result (not in ``NOT_SHAPING``)."""
  return not any(_under(key, p) for p in NOT_SHAPING)


def settings(config: ml_collections.ConfigDict | Mapping[str, Any]) -> dict[str, Any]:
  """The values of ``config`` (a config, or its JSON tree as a workdir's ``config.json`` holds
  it) that shape a run's result, by dotted key, as JSON reads them back."""
  if isinstance(config, ml_collections.ConfigDict):
    config = json.loads(config.to_json_best_effort())
  return {k: v for k, v in config_tree.flat(config).items() if shapes(k)}


def defaults() -> dict[str, Any]:
  """``settings`` of the base config: a key a record lacks counts only away from these."""
  return settings(config_tree.make_base_config())


def sha256(path: str) -> str:
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      h.update(block)
  return h.hexdigest()


def start_digest(config: ml_collections.ConfigDict) -> dict[str, Any] | None:
  """The pinned start ``config`` begins from: its record's ``settings_hash`` and its weights'
  SHA-256; None when it names none, builds it, or its folder is missing."""
  if not config.start.name or config.start.build:
    return None
  from arenarl_jax.sft import start as start_lib  # pylint: disable=g-import-not-at-top
  from arenarl_jax.sft.settings import StartSettings  # pylint: disable=g-import-not-at-top
  directory = start_lib.start_dir(StartSettings.from_config(config.start))
  record_path = os.path.join(directory, start_lib.START_FILE)
  if not os.path.isfile(record_path):
    return None
  with open(record_path, encoding="utf-8") as f:
    record = json.load(f)
  weights = os.path.join(directory, WEIGHTS)
  if not os.path.isfile(weights):  # a delta start stores only what SFT changed
    weights = os.path.join(directory, start_lib.DELTA_FILE)
  return {"settings_hash": record.get("settings_hash"),
          "weights_sha256": sha256(weights) if os.path.isfile(weights) else None}


def dataset_name(config: ml_collections.ConfigDict) -> str:
  """The name of the dataset ``config`` reads (``builder.make_source_config``: no build), or
  ``<unavailable: why>`` when it cannot be named (an import folder that is not there)."""
  from arenarl_jax.data import builder  # pylint: disable=g-import-not-at-top
  from arenarl_jax.data.settings import DataSettings  # pylint: disable=g-import-not-at-top
  try:
    return builder.make_source_config(DataSettings.from_config(config.data), config.env).name
  except (OSError, ValueError) as e:
    return f"<unavailable: {e}>"


def facts(config: ml_collections.ConfigDict,
          tree: Mapping[str, Any] | None = None) -> dict[str, Any]:
  """What a result file's provenance records (module docstring); ``tree``: the config's JSON as
  written by the run (its settings then come from there: what ran)."""
  return {"settings": settings(config if tree is None else tree),
          "start": start_digest(config), "dataset": dataset_name(config)}


def _show(value: Any) -> str:
  text = json.dumps(value, sort_keys=True) if value is not ABSENT else ABSENT
  return text if len(text) <= 80 else text[:77] + "..."


def reasons(provenance: Mapping[str, Any], config: ml_collections.ConfigDict,
            base: Mapping[str, Any] | None = None) -> list[str]:
  """Why a result with ``provenance`` is stale against the run's config now (``[]``: it is
  not), each as ``what: recorded -> now``. ``base``: ``defaults()`` (computed when None)."""
  recorded = provenance.get("settings")
  if recorded is None:
    return [NO_RECORD]
  now = facts(config)
  base = defaults() if base is None else base
  out = [f"{k}: {_show(recorded.get(k, ABSENT))} -> {_show(now['settings'].get(k, ABSENT))}"
         for k in config_tree.stale_keys(recorded, now["settings"], base)]
  for what, label in (("start", "pinned start"), ("dataset", "dataset")):
    if provenance.get(what) != now[what]:
      out.append(f"{label}: {_show(provenance.get(what))} -> {_show(now[what])}")
  return out
