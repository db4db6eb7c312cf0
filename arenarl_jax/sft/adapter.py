"""Low-rank adapter SFT (``sft.adapter_rank`` = r > 0): the base weights stay frozen and SFT
trains, per block matrix W [in, out], factors ``a`` [in, r] and ``b`` [r, out] with
W' = W + a @ b, and the whole delta of every norm scale; the embedding (tied to the head) is
left as it is.

Why: a start fine-tuned from a pretrained model must fit in the repository. Truncating a full
fine-tune's delta afterwards loses what SFT taught (benchmarks/README.md: SmolLM2 after 96
updates, rank 32, meets 0.440 instead of 0.677 on 20 validation tasks); training the low-rank
update itself makes the stored start exactly the trained one (``sft/delta.py`` stores these
very tensors, by the same names). It also shrinks the optimizer state from the model's size to
the adapter's.

``b`` starts at zero, so SFT starts from the base exactly; ``a`` starts N(0, 1/r), so each row
of ``a`` has norm about 1 and a step on ``b`` moves W by about what a full fine-tune's step would
(the adapter's learning rate then means what ``sft.lr`` means for full SFT).

The trainer (``trainer.Trainer``) differentiates the adapter tensors (its state's parameters)
and reads the frozen base through the reference slot: ``make_loss`` lifts the tensors onto the
base (``delta.lift``) inside the jitted step and hands the full weights to the SFT loss.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np

from arenarl_jax import trainer
from arenarl_jax.sft import delta

ADAPTED = ("layers.",)  # parameters under these prefixes are adapted; others stay frozen


def adapted(name: str, shape: tuple[int, ...]) -> str | None:
  """How parameter ``name`` is adapted: "low_rank" (a matrix), "whole" (a vector) or None."""
  if not name.startswith(ADAPTED) and name != "final_norm.scale":
    return None
  return "low_rank" if len(shape) == 2 else "whole" if len(shape) == 1 else None


def init(base: Mapping[str, Any], rank: int, seed: int) -> dict[str, np.ndarray]:
  """The adapter's starting tensors for ``base`` (flat, ``delta.flat_params``), by the names
  ``delta`` stores: the lifted weights equal the base."""
  if rank < 1:
    raise ValueError(f"sft.adapter_rank must be >= 1 to make an adapter, got {rank}")
  rng = np.random.default_rng(seed)
  out: dict[str, np.ndarray] = {}
  for name in sorted(base):
    shape = tuple(np.shape(base[name]))
    kind = adapted(name, shape)
    if kind == "low_rank":
      out[name + delta.A] = rng.normal(0.0, 1.0 / np.sqrt(rank),
                                       (shape[0], rank)).astype(np.float32)
      out[name + delta.B] = np.zeros((rank, shape[1]), np.float32)
    elif kind == "whole":
      out[name + delta.FULL] = np.zeros(shape, np.float32)
  if not out:
    raise ValueError("sft.adapter_rank: the model has no parameters under "
                     f"{ADAPTED} to adapt")
  return out


def make_loss(inner: trainer.Loss) -> trainer.Loss:
  """``inner`` (a loss that reads no reference) on the base lifted by the adapter: the trainer's
  parameters are the adapter's tensors and its reference is the frozen base."""
  if inner.uses_reference:
    raise ValueError(f"adapter: the {inner.name!r} loss reads a reference; the adapter's "
                     "reference slot holds the frozen base")

  def fn(policy: trainer.Forward, reference: trainer.Forward, batch, norm):
    full = delta.lift(delta.flat_params(reference.params), policy.params)
    weights = delta.nested_params(full, reference.params)
    return inner(dataclasses.replace(policy, params=weights), None, batch, norm)

  return trainer.Loss(inner.name, fn, uses_reference=True)


def weights(base_nested: Mapping[Any, Any], tensors: Mapping[str, Any]) -> dict[Any, Any]:
  """The adapted model's weights (nested like ``base_nested``, placed like it)."""
  return delta.nested_params(delta.apply(delta.flat_params(base_nested), tensors), base_nested)
