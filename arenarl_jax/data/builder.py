"""The TFDS builder: one dataset per source (an environment and its seed, or an import directory).

Written as ``array_record`` (random access; TensorFlow is never imported) under
``<data_dir>/arena_dataset/<config name>/<version>/`` with records in generation order
(``disable_shuffling``) and serialised deterministically (see :func:`_deterministic_protos`), so
the same source gives byte-identical record files in any process. Read back with
:func:`load` (``tfds.builder_from_directory``: no builder class or environment needed) and
``as_data_source(split)``.

Config names say what was built: ``<env>-seed<s>-err<rate>-<code>[-set<digest>]`` for an
environment, where ``<code>`` digests the source that writes its records (the environment's
package and this package's record code: edited code is a new dataset, never a stale cache) and
``<digest>`` the environment's settings that shape records and differ from their defaults
(``base.records_settings``: ``env.tool_max_chars``, ``env.travel.train_per_subtask``, ...; a
changed split size is a new dataset, never a stale one), and
``<env>-import-<hash of the files>[-skip]`` for imported data (a changed file is a new dataset).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
from typing import Any, Iterable, Iterator, Mapping

import tensorflow_datasets as tfds
from tensorflow_datasets.core import example_serializer

from arenarl_jax import cache_dirs
from arenarl_jax.data import env_examples, importer, records
from arenarl_jax.data.settings import DataSettings
from arenarl_jax.envs import base

SOURCES = ("env", "import")
_VERSION = "1.0.0"


class SourceConfig(tfds.core.BuilderConfig):
  """Where the records come from; the config name is derived from it (see the module doc)."""

  def __init__(self, *, source: str = "env", env: str = "travel", env_seed: int = 0,
               error_rate: float = 0.3, import_dir: str = "",
               import_subtasks: tuple[str, ...] = (), skip_bad_rows: bool = False,
               env_settings: dict[str, Any] | None = None):
    if source not in SOURCES:
      raise ValueError(f"data.source: {source!r} is not one of {SOURCES}")
    if not 0.0 <= error_rate <= 1.0:
      raise ValueError(f"env.reference_error_rate: {error_rate} is outside [0, 1]")
    self.source, self.env, self.env_seed = source, env, int(env_seed)
    self.error_rate, self.skip_bad_rows = float(error_rate), bool(skip_bad_rows)
    self.import_dir = os.path.abspath(os.path.expanduser(import_dir)) if import_dir else ""
    self.import_subtasks = tuple(import_subtasks)
    self.layout: importer.Layout | None = None
    self.env_settings = dict(sorted((env_settings or {}).items()))
    if source == "env":
      name = f"{env}-seed{self.env_seed}-err{self.error_rate:g}-{env_code_version(env)[:12]}"
      settings = ""
      if self.env_settings:
        text = json.dumps(self.env_settings, sort_keys=True)
        name += "-set" + hashlib.sha256(text.encode()).hexdigest()[:8]
        settings = f" Settings: {text}."
      description = (f"Environment {env!r} built from env.seed={self.env_seed}: train prompts, "
                     f"expert SFT conversations (error rate 0) and test prompts with expert "
                     f"references at error rate {self.error_rate:g}.{settings}")
    else:
      if not self.import_dir:
        raise ValueError("data.import_dir must name a directory when data.source='import'")
      self.layout = importer.discover(self.import_dir, self.import_subtasks)
      name = f"{env}-import-{self.layout.fingerprint()}" + ("-skip" if skip_bad_rows else "")
      description = (f"Reference jsonl files imported from {self.import_dir} for environment "
                     f"{env!r} (subtasks {', '.join(self.layout.subtasks)}).")
    super().__init__(name=name, version=_VERSION, description=description)


def env_code_version(env: str) -> str:
  """Digest of the code that writes an environment's records: its own package
  (:func:`base.code_version`) and the record code here (expert rollouts, splits, fields)."""
  h = hashlib.sha256(base.code_version(env).encode())
  for module in (env_examples, records):
    with open(module.__file__, "rb") as f:
      h.update(f.read())
  return h.hexdigest()


def make_source_config(data: DataSettings, env: Mapping[str, Any]) -> SourceConfig:
  """The source a run asks for: ``data`` (``data.*``) and the ``env`` config section (its
  name, seed, reference error rate and the settings that shape records)."""
  env_settings = base.records_settings(env) if data.source == "env" else None
  return SourceConfig(source=data.source, env=env["name"], env_seed=env["seed"],
                      error_rate=env["reference_error_rate"], import_dir=data.import_dir,
                      import_subtasks=data.subtasks, skip_bad_rows=data.skip_bad_rows,
                      env_settings=env_settings)


class ArenaDataset(tfds.core.GeneratorBasedBuilder):
  """Task prompts, SFT conversations and test references of one source (see the module doc)."""

  VERSION = tfds.core.Version(_VERSION)
  RELEASE_NOTES = {_VERSION: "Records task_id, env, subtask, query, messages and reference "
                             "(JSON lists of reference-format messages)."}

  def _info(self) -> tfds.core.DatasetInfo:
    cfg: SourceConfig = self.builder_config
    return tfds.core.DatasetInfo(
        builder=self, description=cfg.description,
        features=tfds.features.FeaturesDict({f: tfds.features.Text() for f in records.FIELDS}),
        disable_shuffling=True,
        metadata=tfds.core.MetadataDict(source=cfg.source, env=cfg.env, env_seed=cfg.env_seed,
                                        error_rate=cfg.error_rate, import_dir=cfg.import_dir,
                                        env_settings=json.dumps(cfg.env_settings)))

  def _split_generators(self, dl_manager: Any) -> dict[str, Iterable[tuple[int, dict[str, str]]]]:
    del dl_manager  # nothing is downloaded
    cfg: SourceConfig = self.builder_config
    if cfg.source == "env":
      env = base.make_environment(cfg.env, cfg.env_seed, **cfg.env_settings)
      return {split: self._generate_examples(env_examples.split_records(
                  env, split, seed=cfg.env_seed, error_rate=cfg.error_rate))
              for split in records.splits_for(env.subtasks)}
    # Imported rows are validated up front, so a bad row fails before anything is written and
    # the skipped rows' report lands in the dataset's metadata.
    report = importer.ImportReport()
    splits = {split: importer.split_records(cfg.layout, split, env=cfg.env,
                                            skip_bad_rows=cfg.skip_bad_rows, report=report)
              for split in records.splits_for(cfg.layout.subtasks)}
    if not cfg.layout.files["sft"]:
      del splits[records.SFT]  # the reference layout has no SFT conversations unless given
    self.info.metadata.update(report.as_metadata())
    return {split: self._generate_examples(recs) for split, recs in splits.items()}

  def _generate_examples(self, recs: Iterable[dict[str, str]]):
    for key, record in enumerate(recs):
      yield key, record


def make_builder(source: SourceConfig, data_dir: str | None = None) -> ArenaDataset:
  return ArenaDataset(config=source, data_dir=data_dir or cache_dirs.cache_dir("datasets"),
                      file_format="array_record")


@contextlib.contextmanager
def _deterministic_protos() -> Iterator[None]:
  """Serialises records with their feature map sorted by key while building.

  A record is a ``tf.train.Example`` whose features are a protobuf map; TFDS serialises it in the
  map's iteration order, which follows a per-process hash seed, so two processes would write the
  same records as different bytes. TFDS has no option for this, hence the scoped override.
  """
  cls = example_serializer.ExampleSerializer
  original = cls.serialize_example

  def serialize_example(self, example):
    return self.get_tf_example(example).SerializeToString(deterministic=True)

  cls.serialize_example = serialize_example
  try:
    yield
  finally:
    cls.serialize_example = original


def build(source: SourceConfig, data_dir: str | None = None, *, overwrite: bool = False) -> str:
  """Builds the dataset (reusing an existing one unless ``overwrite``); returns its directory."""
  builder = make_builder(source, data_dir)
  mode = (tfds.download.GenerateMode.FORCE_REDOWNLOAD if overwrite
          else tfds.download.GenerateMode.REUSE_DATASET_IF_EXISTS)
  with _deterministic_protos():
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(download_mode=mode))
  return str(builder.data_dir)


def load(path: str) -> tfds.core.DatasetBuilder:
  """A read-only builder over a built dataset directory (as returned by :func:`build`)."""
  if not os.path.isfile(os.path.join(path, "dataset_info.json")):
    raise FileNotFoundError(f"{path} holds no built dataset (no dataset_info.json); build it with "
                            f"`python -m arenarl_jax.data.cli build --config=...`")
  return tfds.builder_from_directory(path)


def data_source(path: str, split: str):
  """Random-access records of one split; a missing split is an error naming the ones there are."""
  builder = load(path)
  if split not in builder.info.splits:
    raise ValueError(f"{path}: no split {split!r}; splits: {sorted(builder.info.splits)}")
  return builder.as_data_source(split)


def splits(path: str) -> dict[str, int]:
  """Split name -> number of records of a built dataset."""
  return {name: info.num_examples for name, info in sorted(load(path).info.splits.items())}
