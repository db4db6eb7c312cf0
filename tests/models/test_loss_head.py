"""models/loss_head.py and the trainer's fused objectives: the fused head's loss, log-probs,
entropies and gradients equal token_logprobs followed by the same per-token loss (tied and untied
heads, per-row temperatures with a greedy row, chunks that do not divide T), its backward computes
no logits, and the policy / SFT objectives built on it equal the unfused ones."""
import jax
import jax.extend.core as jax_core
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from arenarl_jax import trainer
from arenarl_jax.rl import losses
from arenarl_jax.rl.settings import LossSettings
from arenarl_jax.models import loss_head
from arenarl_jax.models.config import ModelConfig
from arenarl_jax.models.logprobs import token_logprobs
from arenarl_jax.models.transformer import Transformer, make_model
from arenarl_jax.sft import loss as sft_loss
from arenarl_jax.trainer import Forward, batch_logprobs

V = 61  # a vocabulary size no other dimension has (the logits' products are found by it)
N, T = 4, 12


def _cfg(tie=True):
  return ModelConfig(vocab_size=V, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=8,
                     ffn_dim=32, tie_embeddings=tie)


def _token_loss(lp, ex):
  """Elementwise and non-linear in the log-prob, so f' varies per token."""
  return ex["a"] * lp + ex["b"] * jnp.exp(2.0 * lp)


def _inputs(seed=0):
  rng = np.random.default_rng(seed)
  tokens = jnp.asarray(rng.integers(0, V, (N, T)), jnp.int32)
  extras = {"a": jnp.asarray(rng.normal(size=(N, T)), jnp.float32),
            "b": jnp.asarray(rng.normal(size=(N, T)), jnp.float32)}
  return tokens, extras, jnp.asarray([1.0, 0.7, 0.0, 1.3], jnp.float32)  # row 2 greedy: T = 1


def _reference(model, tokens, extras, temp, chunk):
  logp, ent = token_logprobs(model, tokens, chunk=chunk, temperature=temp, return_entropy=True)
  return jnp.sum(_token_loss(logp, extras)[:, 1:]), logp, ent


def _grads(fn, graphdef, state):
  return jax.value_and_grad(lambda s: fn(nnx.merge(graphdef, s)), has_aux=True)(state)


@pytest.mark.parametrize("tie, chunk", [(True, 4), (True, 5), (False, 3)])
def test_fused_head_equals_logprobs_then_loss(tie, chunk):
  graphdef, state = nnx.split(make_model(_cfg(tie), seed=1))
  tokens, extras, temp = _inputs()

  def fused(model):
    loss, logp, ent = loss_head.fused_token_loss(model, tokens, _token_loss, extras,
                                                 chunk=chunk, temperature=temp)
    return loss, (logp, ent)

  def unfused(model):
    loss, logp, ent = _reference(model, tokens, extras, temp, chunk)
    return loss, (logp, ent)

  (l1, (lp1, e1)), g1 = jax.jit(lambda s: _grads(fused, graphdef, s))(state)
  (l2, (lp2, e2)), g2 = jax.jit(lambda s: _grads(unfused, graphdef, s))(state)
  np.testing.assert_allclose(l1, l2, rtol=1e-5)
  np.testing.assert_allclose(lp1, lp2, atol=1e-5)
  np.testing.assert_allclose(e1, e2, atol=1e-5)
  assert float(jnp.max(jnp.abs(lp1[:, 0]))) == 0.0
  for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
    np.testing.assert_allclose(a, b, atol=2e-5, rtol=1e-4)
  assert max(float(jnp.max(jnp.abs(a))) for a in jax.tree.leaves(g1)) > 1e-3


def _vocab_products(jaxpr) -> int:
  """dot_generals with a V-sized operand dimension, in every sub-program (scans, custom rules)."""
  count = 0
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == "dot_general":
      count += any(V in v.aval.shape for v in eqn.invars)
    for sub in jax_core.jaxprs_in_params(eqn.params):
      count += _vocab_products(sub)
  return count


def test_the_fused_backward_recomputes_no_logits():
  """Per chunk the fused pass has three vocabulary products (logits, dL/dh, dL/dW); the
  checkpointed token_logprobs path has four (the logits again in its backward)."""
  graphdef, state = nnx.split(make_model(_cfg(), seed=1))
  tokens, extras, temp = _inputs()
  fused = lambda m: loss_head.fused_token_loss(m, tokens, _token_loss, extras, chunk=4,  # noqa
                                               temperature=temp)[0]
  unfused = lambda m: _reference(m, tokens, extras, temp, 4)[0]  # noqa: E731
  count = lambda f: _vocab_products(jax.make_jaxpr(  # noqa: E731
      jax.grad(lambda s: f(nnx.merge(graphdef, s))))(state).jaxpr)
  assert count(fused) == 3
  assert count(unfused) == 4


def test_logprobs_carry_no_gradient_and_a_custom_head_is_refused():
  graphdef, state = nnx.split(make_model(_cfg(), seed=1))
  tokens, extras, temp = _inputs()
  grads = jax.grad(lambda s: jnp.sum(loss_head.fused_token_loss(
      nnx.merge(graphdef, s), tokens, _token_loss, extras, chunk=4, temperature=temp)[1]))(state)
  assert all(float(jnp.max(jnp.abs(g))) == 0.0 for g in jax.tree.leaves(grads))

  class OwnHead(Transformer):
    def head(self, h_NTD):
      return super().head(h_NTD) * 2.0

  model = OwnHead(_cfg(), rngs=nnx.Rngs(params=0))
  assert not loss_head.supports(model)
  with pytest.raises(ValueError, match="plain Transformer head"):
    loss_head.fused_token_loss(model, tokens, _token_loss, extras)


def _batch(seed=0):
  rng = np.random.default_rng(seed)
  mask = (rng.random((N, T)) < 0.7).astype(np.float32)
  mask[:, :2] = 0.0
  return {"tokens_NT": jnp.asarray(rng.integers(0, V, (N, T)), jnp.int32),
          "loss_mask_NT": jnp.asarray(mask),
          "advantages_N": jnp.asarray(rng.normal(size=N), jnp.float32),
          "temperature_N": jnp.asarray([1.0, 0.8, 0.0, 1.2], jnp.float32),
          "sampler_logp_NT": jnp.asarray(rng.normal(-3, 0.1, (N, T)) * mask, jnp.float32)}


@pytest.mark.parametrize("aggregation, kl, kl_coef, off_policy", [
    ("seq_mean_token_mean", "k3", 0.1, True), ("token_mean", "k1", 0.5, True),
    ("dr_grpo", "k2", 0.3, False), ("seq_mean_token_mean", "k3", 0.0, True)])
def test_policy_objective_equals_the_unfused_loss(aggregation, kl, kl_coef, off_policy):
  graphdef, state = nnx.split(make_model(_cfg(), seed=2))
  params = nnx.to_pure_dict(state)
  ref = jax.tree.map(lambda x: x * 1.03, params)
  b = _batch()
  if off_policy:  # the sampling policy's log-probs far enough away that both clips act
    noise = np.random.default_rng(7).normal(0.0, 0.4, (N, T)).astype(np.float32)
    b["old_logp_NT"] = batch_logprobs(graphdef, ref, b, chunk=5) + noise
  cfg = LossSettings(aggregation=aggregation, kl=kl, kl_coef=kl_coef, clip_low=0.1,
                          clip_high=0.1, dr_grpo_tokens=7)
  norm = trainer.normalisers(b["loss_mask_NT"])

  def unfused(p):
    logp, ent = batch_logprobs(graphdef, p, b, chunk=5, entropy=True)
    old = b.get("old_logp_NT", jax.lax.stop_gradient(logp))
    ref_lp = batch_logprobs(graphdef, ref, b, chunk=5) if kl_coef else jax.lax.stop_gradient(logp)
    return losses.policy_loss(logp, old, ref_lp, b["advantages_N"], b["loss_mask_NT"], norm, cfg,
                              ent)

  loss = losses.make_rl_loss(cfg)
  fused = lambda p: loss(Forward(graphdef, p, 5), Forward(graphdef, ref, 5), b, norm)  # noqa
  (l1, m1), g1 = jax.jit(jax.value_and_grad(fused, has_aux=True))(params)
  (l2, m2), g2 = jax.jit(jax.value_and_grad(unfused, has_aux=True))(params)
  np.testing.assert_allclose(l1, l2, rtol=1e-5, atol=1e-7)
  for key, value in m2.items():
    np.testing.assert_allclose(m1[key], value, rtol=1e-5, atol=1e-6, err_msg=key)
  if off_policy:
    assert float(m1["clip_frac_low_sum"]) > 0 and float(m1["clip_frac_high_sum"]) > 0
  for a, c in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
    np.testing.assert_allclose(a, c, atol=2e-6, rtol=1e-4)


def test_sft_objective_equals_the_unfused_loss():
  graphdef, state = nnx.split(make_model(_cfg(tie=False), seed=3))
  params = nnx.to_pure_dict(state)
  b = _batch(1)
  norm = trainer.normalisers(b["loss_mask_NT"])

  def unfused(p):
    logp, ent = batch_logprobs(graphdef, p, b, chunk=4, entropy=True)
    return sft_loss.sft_loss(logp, b["loss_mask_NT"], norm, ent)

  loss = sft_loss.make_sft_loss()
  fused = lambda p: loss(Forward(graphdef, p, 4), None, b, norm)  # noqa: E731
  (l1, m1), g1 = jax.jit(jax.value_and_grad(fused, has_aux=True))(params)
  (l2, m2), g2 = jax.jit(jax.value_and_grad(unfused, has_aux=True))(params)
  np.testing.assert_allclose(l1, l2, rtol=1e-5)
  np.testing.assert_allclose(m1["entropy_sum"], m2["entropy_sum"], rtol=1e-5)
  for a, c in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
    np.testing.assert_allclose(a, c, atol=2e-6, rtol=1e-4)
