"""SFT's loss (sft/loss.py): the masked mean token NLL, additive over parts, no reference."""
import jax.numpy as jnp
import numpy as np
import pytest

from arenarl_jax import trainer
from arenarl_jax.sft import loss as sft_loss


def test_sft_loss_is_the_masked_mean_token_nll():
  logp = jnp.log(jnp.array([[0.5, 0.25, 0.1], [0.2, 0.8, 0.5]]))
  mask = jnp.array([[0, 1, 1], [1, 0, 0]])
  norm = trainer.normalisers(mask)
  loss, metrics = sft_loss.sft_loss(logp, mask, norm)
  expected = -(np.log(0.25) + np.log(0.1) + np.log(0.2)) / 3
  np.testing.assert_allclose(float(loss), expected, rtol=1e-6)
  # Additive over parts (rows split in two) with the whole batch's normalisers.
  a, _ = sft_loss.sft_loss(logp[:1], mask[:1], norm)
  b, _ = sft_loss.sft_loss(logp[1:], mask[1:], norm)
  np.testing.assert_allclose(float(a + b), expected, rtol=1e-6)
  assert float(metrics["loss_sum"]) == pytest.approx(expected, rel=1e-6)


def test_the_trainer_loss_reads_no_reference():
  loss = sft_loss.make_sft_loss()
  assert loss.name == "sft" and not loss.uses_reference
