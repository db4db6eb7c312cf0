"""The RL stage's config sections as frozen settings: ``rl``, ``loss``, ``optim``,
``advantage`` and ``tournament``.

    rl = RlSettings.from_config(config.rl, seed=config.seed, remat=config.model.remat,
                                loss=LossSettings.from_config(config.loss),
                                optim=OptimSettings.from_config(config.optim), ...)

``config_tree`` declares each section from its class (``settings.defaults``); ``pipeline.py``
builds the objects once and the RL modules read nothing else. Fields declared with ``outside``
come from keys of other sections (the run's ``seed``, ``model.remat``, ...). Standard library
only: loading a config imports neither jax nor the losses (nor the tournament, whose package
loads numpy: ``tournament.*`` is declared here, beside the advantages that read it).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from arenarl_jax.models.settings import REMAT_TRAINING_DEFAULT
from arenarl_jax.settings import (CheckpointSettings, MetricsSettings, outside,
                                  settings_from_config)

# The values of loss.ratio, loss.kl and loss.aggregation: the keys of rl/losses.py's registries
# (RATIOS, KL_ESTIMATORS, AGGREGATIONS), named here so a config is checked without jax.
LOSS_RATIOS = ("token", "sequence")
LOSS_KLS = ("k1", "k2", "k3")
LOSS_AGGREGATIONS = ("token_mean", "seq_mean_token_mean", "dr_grpo")


@dataclasses.dataclass(frozen=True)
class LossSettings:
  """The ``loss.*`` config section (frozen, hashable: a jit static argument; ``rl/losses.py``)."""

  ratio: str = "token"  # token | sequence (GSPO)
  kl: str = "k3"  # k1 | k2 | k3
  kl_coef: float = 0.02
  clip_low: float = 0.2
  clip_high: float = 0.28
  aggregation: str = "seq_mean_token_mean"  # seq_mean_token_mean | token_mean | dr_grpo
  dr_grpo_tokens: int = 1024  # Dr. GRPO's constant per-row normaliser (not taken from the batch)
  log_ratio_clamp: float = 20.0  # |log ratio| bound before exp (GSPO's sequence ratio, k3)

  def __post_init__(self):
    for key, value, allowed in (("ratio", self.ratio, LOSS_RATIOS), ("kl", self.kl, LOSS_KLS),
                                ("aggregation", self.aggregation, LOSS_AGGREGATIONS)):
      if value not in allowed:
        raise ValueError(f"loss.{key}: unknown value {value!r}; expected one of "
                         f"{tuple(allowed)}")
    if self.clip_low < 0 or self.clip_high < 0 or self.clip_low >= 1:
      raise ValueError(f"loss.clip_low/clip_high: need 0 <= clip_low < 1 and clip_high >= 0, got "
                       f"{self.clip_low}, {self.clip_high}")
    if self.dr_grpo_tokens <= 0 or self.log_ratio_clamp <= 0:
      raise ValueError("loss.dr_grpo_tokens and loss.log_ratio_clamp must be positive")

  @classmethod
  def from_config(cls, section: Any, **extra: Any) -> "LossSettings":
    """From the ``loss`` section; an unknown key is an error naming it (never dropped)."""
    return settings_from_config(cls, section, "loss", **extra)


@dataclasses.dataclass(frozen=True)
class OptimSettings:
  """The ``optim.*`` config section: the RL stage's AdamW (``trainer.make_optimizer``)."""

  lr: float = 1e-6
  weight_decay: float = 0.1
  b1: float = 0.9
  b2: float = 0.98
  grad_clip: float = 1.0
  schedule: str = "constant"  # constant | linear | cosine (decay to 0 after warmup)
  warmup_steps: int = 0

  @classmethod
  def from_config(cls, section: Any, **extra: Any) -> "OptimSettings":
    return settings_from_config(cls, section, "optim", **extra)


@dataclasses.dataclass(frozen=True)
class TournamentSettings:
  """The ``tournament.*`` config section: how each group is ranked (``tournament.rank`` checks
  the topology's name)."""

  # anchor | round_robin | swiss | double_elimination | single_elimination
  topology: str = "single_elimination"
  failure_threshold: float = 0.25  # share of failed matches in one step that stops the run

  @classmethod
  def from_config(cls, section: Any, **extra: Any) -> "TournamentSettings":
    return settings_from_config(cls, section, "tournament", **extra)


@dataclasses.dataclass(frozen=True)
class AdvantageSettings:
  """The ``advantage.*`` config section, and what else turns a step's groups into advantages:
  the tournament (``tournament.*``), the control (``rl.advantage_control``) and the run's seed
  (each step's tournament and control streams are seeded by (seed, step))."""

  source: str = "arena"  # arena | pointwise (rl/advantages.py SOURCES)
  # pointwise: requests per trajectory, averaged (4(N-1)/N matches seeded single elimination's
  # judge budget per group of N)
  pointwise_repeats: int = 1
  control: str = outside("none", "rl.advantage_control")
  seed: int = outside(0, "seed")
  tournament: TournamentSettings = outside(TournamentSettings(), "tournament")

  @classmethod
  def from_config(cls, section: Any, **extra: Any) -> "AdvantageSettings":
    return settings_from_config(cls, section, "advantage", **extra)


@dataclasses.dataclass(frozen=True)
class RlSettings:
  """The ``rl.*`` config section, and what else the RL loop reads: the run's seed (the prompt
  order and the loop's PRNG key), ``model.remat``, the loss, the optimizer, checkpoints and
  metrics."""

  prompts_per_step: int = 2  # B
  steps: int = 1
  minibatches_per_rollout: int = 4  # optimizer updates per rollout batch (the ratio departs from 1)
  accumulation_steps: int = 1  # micro-batches per update (exact batch-wide token means)
  train_anchor: bool = True  # train the greedy anchor row like the others (as the reference does)
  logprob_chunk: int = 64  # the head's chunk over T (token_logprobs, the fused loss head)
  bucket: int = 64  # rows are padded to a multiple of this many tokens
  # none | permute | flip (rl/advantages.py control_advantages): a control run's advantages,
  # shuffled within each group (same magnitudes, no information) or negated.
  advantage_control: str = "none"
  # Comma-separated subtasks the RL prompts are drawn from (the train split's tasks of those
  # subtasks); "" = every subtask. The evaluation is unchanged: it keeps all of them.
  subtasks: str = ""
  seed: int = outside(0, "seed")
  remat: str = outside(REMAT_TRAINING_DEFAULT, "model.remat")
  loss: LossSettings = outside(LossSettings(), "loss")
  optim: OptimSettings = outside(OptimSettings(), "optim")
  checkpoint: CheckpointSettings = outside(CheckpointSettings(), "checkpoint")
  metrics: MetricsSettings = outside(MetricsSettings(), "metrics")

  @classmethod
  def from_config(cls, section: Any, **extra: Any) -> "RlSettings":
    return settings_from_config(cls, section, "rl", **extra)

  @property
  def total_updates(self) -> int:
    """Optimizer updates of the whole stage (the schedule's length)."""
    return int(self.steps) * int(self.minibatches_per_rollout)
