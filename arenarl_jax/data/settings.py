"""The ``data.*`` config section as frozen settings: where datasets come from and how they are read.

Standard library only, so ``config_tree`` declares the section from the class without importing
TFDS or grain; ``data/builder.py`` and ``data/pipeline.py`` read it.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from arenarl_jax.settings import settings_from_config


@dataclasses.dataclass(frozen=True)
class DataSettings:
  """The ``data.*`` config section: TFDS array_record datasets read with grain."""

  source: str = "env"  # env (tasks + expert from env.name/env.seed) | import (reference jsonl)
  dir: str = ""  # where datasets are built; "" = $ARENARL_JAX_CACHE/datasets (~/.cache/arenarl_jax)
  import_dir: str = ""  # data.source=import: <dir>/{train,test[,sft]}/<subtask>.jsonl
  import_subtasks: str = ""  # comma-separated; "" = one per test/*.jsonl file
  skip_bad_rows: bool = False  # import: skip (log and count) bad rows instead of failing
  seed: int = 0  # shuffle seed of the input pipelines
  shuffle: bool = True
  epochs: int = 0  # 0 = repeat forever
  sft_seq_len: int = 512  # SFT rows are cut / padded to this many tokens
  sft_batch_size: int = 8  # global SFT batch (split evenly over processes)
  # Each SFT batch is cut after its last trained token, rounded up to a multiple of this
  # (data/pipeline.trained_width: the same loss, no work on trailing padding); 0 = whole rows
  sft_bucket: int = 256
  read_threads: int = 0  # grain read threads (render + tokenise at read time); 0 = in the caller
  prefetch: int = 0  # grain prefetch buffer (elements) when read_threads > 0

  @classmethod
  def from_config(cls, section: Any, **extra: Any) -> "DataSettings":
    return settings_from_config(cls, section, "data", **extra)

  @property
  def subtasks(self) -> tuple[str, ...]:
    """``import_subtasks`` as a tuple (empty: one per test file)."""
    return tuple(s.strip() for s in self.import_subtasks.split(",") if s.strip())
