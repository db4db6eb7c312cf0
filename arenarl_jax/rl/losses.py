"""The clipped policy objective with a KL penalty (ARENARL.md §5): its terms, the trainer's loss.

Per token t of row n (mask m = 1 on policy-generated tokens):
  w      = exp(logp - old_logp)                     (``ratio="token"``), or GSPO's sequence ratio
           s_n = exp(mean_t m (logp - old_logp)) given to every token of the row (``"sequence"``);
           log-ratios are clamped to +-``log_ratio_clamp`` before ``exp``
  pg     = -min(w A_n, clip(w, 1 - clip_low, 1 + clip_high) A_n)
  loss   = sum_{n,t} weight_{n,t} (pg + kl_coef * KL_{n,t})

The aggregation only sets the weights, and every weight uses batch-wide normalisers
(``trainer.normalisers`` of the whole minibatch), so the loss is a plain sum over rows: splitting
a batch into micro-batches, accumulation steps or devices and adding the parts gives the same
loss and gradient (no mean of means):
  token_mean           m / (masked tokens in the batch)
  seq_mean_token_mean  m / (row's masked tokens * rows in the batch)   (GRPO: mean per row, then rows)
  dr_grpo              m / (rows in the batch * dr_grpo_tokens)        (Dr. GRPO: a constant per row,
                                                                        so long rows are not shrunk)
"Rows" counts rows with at least one masked token (bucket padding rows do not count).
Each choice is a registry keyed by its config value (``RATIOS``, ``KL_ESTIMATORS``,
``AGGREGATIONS``): a new estimator or aggregation is one entry, not another branch.
``make_rl_loss`` is the loss ``trainer.Trainer`` minimises: the token ratio's objective is per
token, so its gradient comes from the fused head; the sequence ratio's from the log-probs.
"""
from __future__ import annotations

import functools
from typing import Mapping

import jax
import jax.numpy as jnp

from arenarl_jax import trainer
from arenarl_jax.rl.settings import LossSettings


def _token_ratio(log_w_NT, mask_NT, clamp: float):
  del mask_NT
  return jnp.exp(jnp.clip(log_w_NT, -clamp, clamp))


def _sequence_ratio(log_w_NT, mask_NT, clamp: float):
  """GSPO: the row's length-normalised log-ratio, given to every token of the row."""
  len_N = jnp.maximum(mask_NT.sum(-1), 1.0)
  log_s_N = jnp.clip(log_w_NT.sum(-1) / len_N, -clamp, clamp)
  return jnp.broadcast_to(jnp.exp(log_s_N)[:, None], log_w_NT.shape)


# loss.ratio -> (masked log-ratio [N, T], mask [N, T], clamp) -> w [N, T]
RATIOS = {"token": _token_ratio, "sequence": _sequence_ratio}

# loss.kl -> Schulman's estimator of KL(pi || pi_ref) from log r = ref_logp - logp (kl_estimate)
KL_ESTIMATORS = {
    "k1": lambda log_r: -log_r,
    "k2": lambda log_r: 0.5 * log_r * log_r,
    "k3": lambda log_r: jnp.exp(log_r) - 1.0 - log_r,
}
KLS = tuple(KL_ESTIMATORS)

# loss.aggregation -> (mask [N, T] float32, batch normalisers, LossSettings) -> weight [N, T]
AGGREGATIONS = {
    "token_mean": lambda m, norm, cfg: m / norm["tokens"],
    "seq_mean_token_mean":
        lambda m, norm, cfg: m / (jnp.maximum(m.sum(-1, keepdims=True), 1.0) * norm["rows"]),
    "dr_grpo": lambda m, norm, cfg: m / (norm["rows"] * cfg.dr_grpo_tokens),
}


def kl_estimate(logp_NT, ref_logp_NT, kind: str, clamp: float = 20.0):
  """Per-token estimate of KL(pi || pi_ref) from samples of pi (Schulman's k1, k2, k3).

  With r = pi_ref / pi at the sampled token (log r = ref_logp - logp):
    k1 = -log r             unbiased value; its expected gradient is zero (useless as a loss term)
    k2 = (log r)^2 / 2      biased value; its gradient is the exact (unbiased) reverse-KL gradient
    k3 = r - 1 - log r      unbiased, non-negative value; its gradient is BIASED as a reverse-KL
                            gradient (in expectation it is the gradient of KL(pi_ref || pi))
  The presets keep k3, as the reference does.
  """
  if kind not in KL_ESTIMATORS:
    raise ValueError(f"loss.kl: unknown estimator {kind!r}; expected one of {KLS}")
  return KL_ESTIMATORS[kind](jnp.clip(ref_logp_NT - logp_NT, -clamp, clamp))


def importance_ratio(logp_NT, old_logp_NT, mask_NT, kind: str, clamp: float = 20.0):
  """w_NT: per-token ratio, or GSPO's length-normalised sequence ratio broadcast over the row."""
  if kind not in RATIOS:
    raise ValueError(f"loss.ratio: unknown value {kind!r}; expected one of {tuple(RATIOS)}")
  return RATIOS[kind]((logp_NT - old_logp_NT) * mask_NT, mask_NT, clamp)


def token_weights(mask_NT, norm: Mapping[str, jax.Array], cfg: LossSettings):
  """weight_NT of the aggregation (see the module docstring); sums to 1 over the batch except for
  dr_grpo (sum = mean row length / dr_grpo_tokens)."""
  if cfg.aggregation not in AGGREGATIONS:
    raise ValueError(f"loss.aggregation: unknown value {cfg.aggregation!r}; expected "
                     f"{tuple(AGGREGATIONS)}")
  return AGGREGATIONS[cfg.aggregation](mask_NT.astype(jnp.float32), norm, cfg)


def clipped_surrogate(w_NT, adv_N1, cfg: LossSettings):
  """pg = -min(w A, clip(w, 1 - clip_low, 1 + clip_high) A) per token."""
  clipped_NT = jnp.clip(w_NT, 1.0 - cfg.clip_low, 1.0 + cfg.clip_high)
  return -jnp.minimum(w_NT * adv_N1, clipped_NT * adv_N1)


def token_objective(logp_NT, extras: Mapping[str, jax.Array], cfg: LossSettings):
  """The token-ratio objective's per-token terms, weight * (pg + kl_coef * KL), whose sum is
  ``policy_loss``'s loss: elementwise in (n, t), the form the fused head differentiates
  (``models/loss_head.py``). ``extras`` ([N, T] each): ``weight`` (``token_weights``), ``mask``,
  ``advantage`` (the row's advantage on every token), and ``old_logp`` / ``ref_logp`` when there
  are any (absent: the current log-probs, stop-gradient: ratio 1 / no KL)."""
  if cfg.ratio != "token":
    raise ValueError("token_objective: the sequence ratio couples a row's tokens")
  current = jax.lax.stop_gradient(logp_NT)
  w_NT = importance_ratio(logp_NT, extras.get("old_logp", current), extras["mask"], "token",
                          cfg.log_ratio_clamp)
  kl_NT = kl_estimate(logp_NT, extras.get("ref_logp", current), cfg.kl, cfg.log_ratio_clamp)
  return extras["weight"] * (clipped_surrogate(w_NT, extras["advantage"], cfg)
                             + cfg.kl_coef * kl_NT)


def policy_loss(logp_NT, old_logp_NT, ref_logp_NT, advantages_N, mask_NT,
                norm: Mapping[str, jax.Array], cfg: LossSettings, entropy_NT=None):
  """(loss, metrics) for this part of a batch; ``norm``: ``trainer.normalisers`` of the whole.

  Both are additive over parts: ``loss`` and metrics named ``*_sum`` add up over micro-batches and
  devices (the metrics are token means: divide-free, weighted by m / batch tokens); ``ratio_max``
  combines by max and ``ratio_min`` by min.
  """
  mask_NT = mask_NT.astype(jnp.float32)
  adv_N1 = advantages_N.astype(jnp.float32)[:, None]
  w_NT = importance_ratio(logp_NT, old_logp_NT, mask_NT, cfg.ratio, cfg.log_ratio_clamp)
  pg_NT = clipped_surrogate(w_NT, adv_N1, cfg)
  kl_NT = kl_estimate(logp_NT, ref_logp_NT, cfg.kl, cfg.log_ratio_clamp)
  weight_NT = token_weights(mask_NT, norm, cfg)
  loss = jnp.sum(weight_NT * (pg_NT + cfg.kl_coef * kl_NT))

  tok_NT = mask_NT / norm["tokens"]  # metrics are global token means whatever the aggregation
  w_NT = jax.lax.stop_gradient(w_NT)
  low_NT = (adv_N1 < 0) & (w_NT < 1.0 - cfg.clip_low)  # clipping active: no gradient
  high_NT = (adv_N1 > 0) & (w_NT > 1.0 + cfg.clip_high)
  big = jnp.finfo(jnp.float32).max
  metrics = {
      "loss_sum": loss,
      "pg_loss_sum": jnp.sum(weight_NT * pg_NT),
      "kl_sum": jnp.sum(tok_NT * kl_NT),
      "clip_frac_low_sum": jnp.sum(tok_NT * low_NT),
      "clip_frac_high_sum": jnp.sum(tok_NT * high_NT),
      "ratio_mean_sum": jnp.sum(tok_NT * w_NT),
      "ratio_max": jnp.max(jnp.where(mask_NT > 0, w_NT, -big)),
      "ratio_min": jnp.min(jnp.where(mask_NT > 0, w_NT, big)),
  }
  if entropy_NT is not None:
    metrics["entropy_sum"] = jnp.sum(tok_NT * jax.lax.stop_gradient(entropy_NT))
  return loss, jax.tree.map(jax.lax.stop_gradient, metrics)


def batch_loss(policy: trainer.Forward, reference: trainer.Forward,
               batch: Mapping[str, jax.Array], norm: Mapping[str, jax.Array], cfg: LossSettings):
  """(loss, metrics) of ``batch`` (a part of a minibatch whose normalisers are ``norm``).

  ``old_logp_NT`` from the batch when present, else the current log-probs (on-policy: ratio 1);
  ``ref_logp`` from ``reference`` (skipped when ``cfg.kl_coef`` is 0). The token ratio's
  objective is per-token, so its gradient comes from the fused head; the sequence ratio's from
  the log-probs.
  """
  mask_NT = batch["loss_mask_NT"].astype(jnp.float32)
  ref_NT = None
  if cfg.kl_coef:
    ref_NT = jax.lax.stop_gradient(reference.logprobs(batch))
  if cfg.ratio == "token":
    adv_NT = jnp.broadcast_to(batch["advantages_N"].astype(jnp.float32)[:, None], mask_NT.shape)
    extras = {"weight": token_weights(mask_NT, norm, cfg), "mask": mask_NT, "advantage": adv_NT}
    if "old_logp_NT" in batch:
      extras["old_logp"] = batch["old_logp_NT"]
    if ref_NT is not None:
      extras["ref_logp"] = ref_NT
    objective, logp_NT, ent_NT = policy.fused_objective(
        batch, functools.partial(token_objective, cfg=cfg), extras)
  else:
    objective = None
    logp_NT, ent_NT = policy.logprobs(batch, entropy=True)
  old_NT = batch["old_logp_NT"] if "old_logp_NT" in batch else jax.lax.stop_gradient(logp_NT)
  ref_NT = jax.lax.stop_gradient(logp_NT) if ref_NT is None else ref_NT
  loss, metrics = policy_loss(logp_NT, old_NT, ref_NT, batch["advantages_N"],
                              batch["loss_mask_NT"], norm, cfg, ent_NT)
  loss = trainer.with_gradient_of(loss, objective)
  # The sampler's log-probs against the trainer's (same temperature): should be ~0.
  gap_NT = jnp.abs(batch["sampler_logp_NT"] - old_NT) * mask_NT
  metrics["logp_mismatch_sum"] = jnp.sum(gap_NT) / norm["tokens"]
  metrics["logp_mismatch_max"] = jnp.max(gap_NT)
  return loss, metrics


def make_rl_loss(cfg: LossSettings) -> trainer.Loss:
  """The ``loss.*`` objective as ``trainer.Trainer``'s loss; it reads the frozen reference."""
  return trainer.Loss("rl", functools.partial(batch_loss, cfg=cfg), uses_reference=True)
