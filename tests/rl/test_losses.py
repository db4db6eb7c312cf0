"""The clipped objective, KL estimators, aggregations and GSPO's sequence ratio, by hand."""
import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from arenarl_jax import trainer
from arenarl_jax.rl import losses
from arenarl_jax.rl import settings as rl_settings
from arenarl_jax.rl.settings import LossSettings

F = jnp.float32


def _loss(logp, old, ref, adv, mask, cfg):
  logp, old, ref, mask = (jnp.asarray(x, F) for x in (logp, old, ref, mask))
  return losses.policy_loss(logp, old, ref, jnp.asarray(adv, F), mask, trainer.normalisers(mask),
                            cfg)


@pytest.mark.parametrize("adv, want_loss, want_grad, low, high", [
    # w = 1.5, 0.5, 1.1, 1.0; clip range [0.8, 1.28].
    (1.0, -(1.28 + 0.5 + 1.1 + 1.0) / 4, [0.0, -0.5, -1.1, -1.0], 0.0, 0.25),
    (-1.0, (1.5 + 0.8 + 1.1 + 1.0) / 4, [1.5, 0.0, 1.1, 1.0], 0.25, 0.0),
])
def test_clipping_on_both_sides(adv, want_loss, want_grad, low, high):
  cfg = LossSettings(kl_coef=0.0, clip_low=0.2, clip_high=0.28, aggregation="token_mean")
  old = np.zeros((1, 4), np.float32)
  logp = np.log([[1.5, 0.5, 1.1, 1.0]]).astype(np.float32)
  mask = np.ones((1, 4))
  loss, metrics = _loss(logp, old, old, [adv], mask, cfg)
  np.testing.assert_allclose(float(loss), want_loss, rtol=1e-6)
  # d pg / d logp = -w A where the unclipped term is the minimum, 0 where the clipped one is.
  grad = jax.grad(lambda lp: _loss(lp, old, old, [adv], mask, cfg)[0])(jnp.asarray(logp))
  np.testing.assert_allclose(np.asarray(grad)[0] * 4, want_grad, rtol=1e-5, atol=1e-7)
  m = trainer.finish_metrics(metrics)
  assert float(m["clip_frac_low"]) == pytest.approx(low)
  assert float(m["clip_frac_high"]) == pytest.approx(high)
  assert float(m["ratio_max"]) == pytest.approx(1.5) and float(m["ratio_min"]) == pytest.approx(0.5)
  assert float(m["ratio_mean"]) == pytest.approx((1.5 + 0.5 + 1.1 + 1.0) / 4)


@pytest.mark.parametrize("kind, want", [
    ("k1", 0.5), ("k2", 0.125), ("k3", math.exp(-0.5) - 1 + 0.5)])
def test_each_kl_estimator(kind, want):
  # log r = ref - logp = -1.5 - (-1.0) = -0.5; advantage 0 leaves only the KL term.
  cfg = LossSettings(kl=kind, kl_coef=0.1, aggregation="token_mean")
  logp = np.full((1, 3), -1.0)
  loss, metrics = _loss(logp, logp, np.full((1, 3), -1.5), [0.0], np.ones((1, 3)), cfg)
  assert float(loss) == pytest.approx(0.1 * want, rel=1e-6)
  assert float(trainer.finish_metrics(metrics)["kl"]) == pytest.approx(want, rel=1e-6)


def test_kl_gradients_k2_is_the_score_function_gradient_k1_has_none_in_expectation():
  logp = jnp.asarray([-1.0, -2.0])
  ref = jnp.asarray([-1.5, -1.0])
  g = {k: jax.grad(lambda lp: losses.kl_estimate(lp, ref, k).sum())(logp) for k in losses.KLS}
  np.testing.assert_allclose(g["k1"], [1.0, 1.0])  # constant: E_pi[grad log pi] = 0
  np.testing.assert_allclose(g["k2"], logp - ref)  # (log pi - log ref) grad log pi
  np.testing.assert_allclose(g["k3"], 1 - np.exp(ref - logp), rtol=1e-6)  # (1 - r) grad log pi


@pytest.mark.parametrize("aggregation, want", [
    ("token_mean", (2 + 1 + 1 + 1) / 4),
    ("seq_mean_token_mean", (2 + 1) / 2),
    ("dr_grpo", (2 + 3) / (2 * 4)),  # 2 real rows x dr_grpo_tokens 4
])
def test_each_aggregation(aggregation, want):
  # k1 with logp - ref as the per-token value: row 0 = [2] (1 token), row 1 = [1, 1, 1], row 2 padding.
  cfg = LossSettings(kl="k1", kl_coef=1.0, aggregation=aggregation, dr_grpo_tokens=4)
  logp = np.array([[2, 9, 9], [1, 1, 1], [5, 5, 5]], np.float32)
  mask = np.array([[1, 0, 0], [1, 1, 1], [0, 0, 0]], np.float32)
  loss, _ = _loss(logp, logp, np.zeros_like(logp), [0.0, 0.0, 0.0], mask, cfg)
  assert float(loss) == pytest.approx(want, rel=1e-6)


def test_sequence_ratio_is_length_normalised_and_clamped():
  cfg = LossSettings(ratio="sequence", kl_coef=0.0, clip_low=0.05, clip_high=4e-4,
                   aggregation="seq_mean_token_mean")
  old = np.zeros((1, 3), np.float32)
  logp = np.array([[0.2, -0.4, 0.5]], np.float32)  # the last token is not trained
  mask = np.array([[1, 1, 0]], np.float32)
  s = math.exp(-0.1)  # exp of the masked mean log-ratio
  w = losses.importance_ratio(jnp.asarray(logp), jnp.asarray(old), jnp.asarray(mask), "sequence")
  np.testing.assert_allclose(w, [[s, s, s]], rtol=1e-6)
  assert float(_loss(logp, old, old, [1.0], mask, cfg)[0]) == pytest.approx(-s, rel=1e-6)
  assert float(_loss(logp, old, old, [-1.0], mask, cfg)[0]) == pytest.approx(0.95, rel=1e-6)
  # The gradient of the unclipped sequence term: -A s * (1 / len) per masked token.
  grad = jax.grad(lambda lp: _loss(lp, old, old, [1.0], mask, cfg)[0])(jnp.asarray(logp))
  np.testing.assert_allclose(grad, [[-s / 2, -s / 2, 0.0]], rtol=1e-5)
  # Clamp: a log-ratio of 100 would overflow exp; clamped at 20 it stays finite.
  huge = np.full((1, 3), 100.0, np.float32)
  w = losses.importance_ratio(jnp.asarray(huge), jnp.asarray(old), jnp.ones((1, 3)), "sequence",
                              clamp=20.0)
  np.testing.assert_allclose(w, np.full((1, 3), math.exp(20.0)), rtol=1e-5)
  loss, metrics = _loss(huge, old, old, [-1.0], np.ones((1, 3)), cfg)
  assert np.isfinite(float(loss)) and float(loss) == pytest.approx(math.exp(20.0), rel=1e-5)
  assert float(trainer.finish_metrics(metrics)["clip_frac_high"]) == 0.0


@pytest.mark.parametrize("aggregation, ratio", [
    ("seq_mean_token_mean", "token"), ("token_mean", "sequence"), ("dr_grpo", "token")])
def test_loss_and_gradient_are_the_same_however_the_batch_is_split(aggregation, ratio):
  rng = np.random.default_rng(0)
  n, t = 8, 6
  logp = jnp.asarray(rng.normal(-1, 0.3, (n, t)), F)
  old = logp + jnp.asarray(rng.normal(0, 0.2, (n, t)), F)
  ref = logp + jnp.asarray(rng.normal(0, 0.2, (n, t)), F)
  adv = jnp.asarray(rng.normal(size=n), F)
  mask = jnp.asarray(rng.random((n, t)) < 0.6, F).at[3].set(0.0)
  cfg = LossSettings(ratio=ratio, aggregation=aggregation, dr_grpo_tokens=5)
  norm = trainer.normalisers(mask)

  @jax.jit
  def part_loss(lp, rows):
    return losses.policy_loss(lp[rows], old[rows], ref[rows], adv[rows], mask[rows], norm, cfg)

  part_grad = jax.jit(jax.grad(lambda lp, rows: part_loss(lp, rows)[0]))
  whole, whole_m = part_loss(logp, np.arange(n))
  g_whole = part_grad(logp, np.arange(n))
  for parts in ([np.arange(0, 3), np.arange(3, 8)], [np.arange(0, 8, 2), np.arange(1, 8, 2)]):
    total, metrics, grad = 0.0, None, 0.0
    for rows in parts:
      loss, m = part_loss(logp, rows)
      total += loss
      metrics = m if metrics is None else trainer.combine_metrics(metrics, m)
      grad = grad + part_grad(logp, rows)
    np.testing.assert_allclose(total, whole, rtol=1e-5)
    np.testing.assert_allclose(grad, g_whole, rtol=1e-5, atol=1e-8)
    for key in whole_m:
      np.testing.assert_allclose(metrics[key], whole_m[key], rtol=1e-5, err_msg=key)


def test_bad_config_values_are_named():
  with pytest.raises(ValueError, match="loss.kl: unknown value 'k4'"):
    LossSettings(kl="k4")
  with pytest.raises(ValueError, match="loss.aggregation"):
    LossSettings(aggregation="mean")
  assert LossSettings.from_config(dataclasses.asdict(LossSettings(kl="k2"))).kl == "k2"


def test_the_settings_name_exactly_the_registries_choices():
  """``LossSettings`` checks a config without jax against names that must be the registries'."""
  assert tuple(losses.RATIOS) == rl_settings.LOSS_RATIOS
  assert losses.KLS == rl_settings.LOSS_KLS
  assert tuple(losses.AGGREGATIONS) == rl_settings.LOSS_AGGREGATIONS
