"""The SFT stage's config sections as frozen settings: ``sft.*`` and ``start.*``.

``config_tree`` declares both sections from these classes (``settings.defaults``);
``pipeline.py`` builds them once and ``sft/`` reads nothing else. Standard library only.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from arenarl_jax.data.settings import DataSettings
from arenarl_jax.models.settings import REMAT_TRAINING_DEFAULT
from arenarl_jax.settings import MetricsSettings, outside, settings_from_config


@dataclasses.dataclass(frozen=True)
class SftSettings:
  """The ``sft.*`` config section (``sft/stage.py``: supervised cold start on the expert's
  conversations), and what else the stage reads: ``data.*`` (its rows and the drills' seed),
  ``rl.logprob_chunk``, ``model.remat`` and ``metrics.*``."""

  steps: int = 0  # optimizer updates; 0 = no SFT stage (batch: data.sft_batch_size x sft_seq_len)
  lr: float = 1e-3
  schedule: str = "cosine"
  warmup_steps: int = 10
  weight_decay: float = 0.0
  b1: float = 0.9
  b2: float = 0.98
  grad_clip: float = 1.0
  accumulation_steps: int = 1  # micro-batches per update
  # loss weight of the query and tool results (data/pipeline.SFTFeatures)
  context_weight: float = 0.0
  # The first updates of sft.steps on rows cut after the first assistant turn (the query and
  # the calls it asks for), many short rows per update: sft/stage.py says why.
  first_turn_steps: int = 0
  first_turn_rows: int = 32
  # After the first-turn phase, every k-th update on first-turn rows again (0 = none): the
  # query-to-call copy, learned in the phase, is kept while the long answers are learned.
  first_turn_every: int = 0
  first_turn_seq_len: int = 256
  # Which expert turns keep their <think> reasoning in the SFT rows: all | calls (the turns
  # that call tools; the answer turn begins with the answer) | none
  reasoning: str = "all"
  # The share of SFT rows whose world names (cities, places) are swapped, consistently within
  # the row, for others of their group: only reading predicts them (data/renaming.py).
  rename_share: float = 0.0
  # The first updates of sft.steps (before the first-turn phase) on the environment's copy
  # drills (envs/travel/copy_drills.py): short synthetic rows that only reading answers.
  copy_steps: int = 0
  copy_rows: int = 32
  copy_seq_len: int = 512
  # Updates before SFT, with their own optimizer, on rows of random ids said twice: the copy
  # circuit first (sft/induction.py). Not counted in sft.steps.
  induction_steps: int = 0
  induction_rows: int = 8
  induction_len: int = 64
  induction_lr: float = 3e-3
  # 0: SFT updates every parameter. r > 0: the base stays frozen and SFT trains a rank-r update
  # of each block matrix and the norm scales (sft/adapter.py): a fine-tuned pretrained model's
  # start is then stored exactly, and small (start.delta_rank).
  adapter_rank: int = 0
  log_every: int = 10  # steps between metric rows (and the progress bar's loss)
  # Updates between the stage's checkpoints (and one at the end; 0 = only at the end): a stage
  # killed mid-way (out of memory, preempted) resumes from the newest, not from its first update.
  checkpoint_every: int = 100
  data: DataSettings = outside(DataSettings(), "data")
  logprob_chunk: int = outside(64, "rl.logprob_chunk")
  remat: str = outside(REMAT_TRAINING_DEFAULT, "model.remat")
  metrics: MetricsSettings = outside(MetricsSettings(), "metrics")

  @classmethod
  def from_config(cls, section: Any, **extra: Any) -> "SftSettings":
    return settings_from_config(cls, section, "sft", **extra)

  def optim(self) -> dict[str, Any]:
    """The SFT optimizer's settings as ``trainer.make_optimizer`` takes them."""
    return {"lr": self.lr, "schedule": self.schedule, "warmup_steps": self.warmup_steps,
            "weight_decay": self.weight_decay, "b1": self.b1, "b2": self.b2,
            "grad_clip": self.grad_clip}


@dataclasses.dataclass(frozen=True)
class StartSettings:
  """The ``start.*`` config section (``sft/start.py``: a pinned start, built once and committed)."""

  # The start the run begins from instead of model.init + SFT: a folder name under
  # arenarl_jax/starts/ (or start.dir); "" = none, SFT in the job as sft.* says.
  name: str = ""
  build: bool = False  # True: this run builds start.name (SFT, greedy eval on eval.split, write)
  dir: str = ""  # the start's folder instead of arenarl_jax/starts/<name> (tests, experiments)
  # 0: the start stores its whole weights (a model trained from scratch is small). > 0: only a
  # rank-r delta against the weights SFT began from (model.source, or the preset's seeded init),
  # which is how a fine-tuned pretrained model fits in the repository (sft/delta.py).
  delta_rank: int = 0
  delta_dtype: str = "bfloat16"  # of the stored factors: bfloat16 | float32

  @classmethod
  def from_config(cls, section: Any, **extra: Any) -> "StartSettings":
    return settings_from_config(cls, section, "start", **extra)

  @property
  def loads(self) -> bool:
    """Whether this run begins from a pinned start (it names one and does not build it)."""
    return bool(self.name) and not self.build

  def in_job(self, sft_steps: int) -> bool:
    """Whether this run trains its own SFT stage (``sft_steps`` > 0, no pinned start loaded)."""
    return int(sft_steps) > 0 and not self.loads
