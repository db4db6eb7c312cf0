"""The model's config choices as plain data: the ``model.attention`` and ``model.remat`` names.

Standard library only, so ``config_tree`` and the judges' settings can name and check these
choices without importing jax; ``models/attention_choice.py`` and ``models/remat.py`` implement
them and take their lists from here.
"""
from __future__ import annotations

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
