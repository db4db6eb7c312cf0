"""The ``eval.*`` config section: when to evaluate, on how many test tasks, which interval.

Standard library only, so ``config_tree`` declares the section from ``EvalSettings``'s fields
without importing the evaluation (numpy, scipy); ``eval/compare.py`` says what each setting does.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from arenarl_jax.settings import settings_from_config

INTERVALS = ("bootstrap", "t")
SPLITS = ("test", "valid")  # eval.split: the held-out tasks, or the validation tasks
STRIP_MODES = ("auto", "always", "never")
REFERENCE = "reference"  # the report's name for the test split's references


@dataclasses.dataclass(frozen=True)
class EvalSettings:
  """The ``eval.*`` config section."""

  # "valid" while choosing settings; "test" (the default) once, for the final table.
  split: str = "test"
  tasks_per_subtask: int = 0  # tasks per subtask (the first ones of each split); 0 = all
  every_steps: int = 0  # evaluate at step 0, every this many RL steps and at the end; 0 = no middle
  group_size: int = 1  # trajectories per test task (row 0 is the greedy anchor)
  greedy: bool = True  # every row greedy (temperature 0); False: rows > 0 use sampling.*
  interval: str = "bootstrap"  # bootstrap (over tasks) | t (per-match scores); module docstring
  bootstrap_samples: int = 2000
  seed: int = 0  # the bootstrap's resampling seed
  strip_tool_results: str = "auto"  # auto | always | never (module docstring)
  opponent: str = "sft"  # the second opponent's name in the report ("" = references only)
  # Rows rolled out at once (0 = every task's rows in one batch). A batch's KV caches grow with
  # its rows; a pretrained model's (SmolLM2: ~46 KB a token) over 250 tasks would not fit a
  # laptop. A row keeps its global index in its wave, so it samples what it would in one batch.
  max_rows: int = 0

  def __post_init__(self):
    for name in ("tasks_per_subtask", "every_steps", "max_rows"):
      if getattr(self, name) < 0:
        raise ValueError(f"eval.{name} must be >= 0, got {getattr(self, name)}")
    if self.group_size < 1:
      raise ValueError(f"eval.group_size must be >= 1, got {self.group_size}")
    if self.split not in SPLITS:
      raise ValueError(f"eval.split must be one of {SPLITS}, got {self.split!r}")
    if self.interval not in INTERVALS:
      raise ValueError(f"eval.interval must be one of {INTERVALS}, got {self.interval!r}")
    if self.bootstrap_samples < 100:
      raise ValueError(f"eval.bootstrap_samples must be >= 100, got {self.bootstrap_samples}")
    if self.strip_tool_results not in STRIP_MODES:
      raise ValueError(f"eval.strip_tool_results must be one of {STRIP_MODES}, got "
                       f"{self.strip_tool_results!r}")
    if self.opponent == REFERENCE:
      raise ValueError(f"eval.opponent: {REFERENCE!r} is the references' own name")

  @classmethod
  def from_config(cls, section: Any, **extra: Any) -> EvalSettings:
    """From the ``eval`` section (a ConfigDict or a mapping); an unknown key is named."""
    return settings_from_config(cls, section, "eval", **extra)

  def is_due(self, step: int, last_step: int) -> bool:
    """Whether to evaluate after RL step ``step`` (0 = before training) of ``last_step``."""
    return (step == 0 or step == last_step
            or (self.every_steps > 0 and step % self.every_steps == 0))

  def sampling(self, settings):
    """The evaluation rollout's ``SamplingSettings``: ``settings`` at temperature 0 if greedy."""
    return dataclasses.replace(settings, temperature=0.0) if self.greedy else settings
