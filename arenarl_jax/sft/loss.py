"""SFT's loss: the mean over the batch's masked tokens of -log p(token), as the trainer's loss.

``sft_loss`` is its value and metrics from log-probs; ``make_sft_loss`` gives ``trainer.Trainer``
the same loss with its gradient formed by the fused head (``models/loss_head.py``: per-token
terms, no logits recomputed). It reads no frozen reference, so the step takes none.
"""
from __future__ import annotations

from typing import Mapping

import jax
import jax.numpy as jnp

from arenarl_jax import trainer


def sft_token_objective(logp_NT, extras: Mapping[str, jax.Array]):
  """SFT's per-token terms, -weight * logp with weight = mask / batch tokens (``sft_loss``)."""
  return -extras["weight"] * logp_NT


def sft_loss(logp_NT, mask_NT, norm: Mapping[str, jax.Array], entropy_NT=None):
  """(loss, metrics) of supervised fine-tuning: the mean over the batch's masked tokens of
  -log p(token); additive over parts (``norm``: ``trainer.normalisers`` of the whole batch)."""
  tok_NT = mask_NT.astype(jnp.float32) / norm["tokens"]
  loss = -jnp.sum(tok_NT * logp_NT)
  metrics = {"loss_sum": loss}
  if entropy_NT is not None:
    metrics["entropy_sum"] = jnp.sum(tok_NT * jax.lax.stop_gradient(entropy_NT))
  return loss, jax.tree.map(jax.lax.stop_gradient, metrics)


def batch_loss(policy: trainer.Forward, reference: None, batch: Mapping[str, jax.Array],
               norm: Mapping[str, jax.Array]):
  """(loss, metrics) of SFT on ``batch`` (a part of a minibatch whose normalisers are ``norm``),
  its gradient from the fused head."""
  del reference
  weight_NT = batch["loss_mask_NT"].astype(jnp.float32) / norm["tokens"]
  objective, logp_NT, ent_NT = policy.fused_objective(batch, sft_token_objective,
                                                      {"weight": weight_NT})
  loss, metrics = sft_loss(logp_NT, batch["loss_mask_NT"], norm, ent_NT)
  return trainer.with_gradient_of(loss, objective), metrics


def make_sft_loss() -> trainer.Loss:
  """SFT's loss for ``trainer.Trainer`` (the batch needs tokens_NT, loss_mask_NT, temperature_N)."""
  return trainer.Loss("sft", batch_loss)
