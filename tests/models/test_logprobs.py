"""token_logprobs for training: per-row temperature, entropy, gradients (checkpointed chunks)."""
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from arenarl_jax.models.config import ModelConfig
from arenarl_jax.models.logprobs import token_logprobs
from arenarl_jax.models.transformer import make_model

CFG = ModelConfig(vocab_size=97, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8,
                  ffn_dim=64, tie_embeddings=True)


def _setup(n=3, t=11, seed=0):
  model = make_model(CFG, seed=seed)
  graphdef, state = nnx.split(model)
  tokens = jnp.asarray(np.random.default_rng(seed).integers(0, CFG.vocab_size, (n, t)), jnp.int32)
  return graphdef, nnx.to_pure_dict(state), tokens


def _direct(graphdef, params, tokens, temp_N):
  """Full logits -> log_softmax(logits / T) at the next tokens, and the entropy."""
  logits = nnx.merge(graphdef, nnx.State(params))(tokens)[0][:, :-1]
  z = logits / temp_N[:, None, None]
  logp_all = jax.nn.log_softmax(z, axis=-1)
  picked = jnp.take_along_axis(logp_all, tokens[:, 1:, None], axis=-1)[..., 0]
  ent = -jnp.sum(jnp.exp(logp_all) * logp_all, axis=-1)
  pad = jnp.zeros((tokens.shape[0], 1))
  return jnp.concatenate([pad, picked], 1), jnp.concatenate([pad, ent], 1)


def test_per_row_temperature_and_entropy_equal_a_direct_computation():
  graphdef, params, tokens = _setup()
  temp_N = jnp.asarray([1.0, 0.7, 1.6])
  lp, ent = jax.jit(lambda p: token_logprobs(nnx.merge(graphdef, nnx.State(p)), tokens, chunk=4,
                                             temperature=temp_N, return_entropy=True))(params)
  want_lp, want_ent = _direct(graphdef, params, tokens, temp_N)
  np.testing.assert_allclose(lp, want_lp, atol=2e-5)
  np.testing.assert_allclose(ent, want_ent, atol=2e-5)
  assert float(ent[:, 1:].min()) > 0 and float(ent[:, 0].max()) == 0
  # Hand check of one entry at T = 0.7: log_softmax(logits / 0.7) at the chosen token.
  logits = nnx.merge(graphdef, nnx.State(params))(tokens)[0]
  z = np.asarray(logits[1, 4], np.float64) / 0.7
  manual = z[int(tokens[1, 5])] - np.log(np.exp(z - z.max()).sum()) - z.max()
  np.testing.assert_allclose(float(lp[1, 5]), manual, atol=2e-5)
  # A greedy row (T = 0) is scored at T = 1; the default return is the log-probs alone.
  greedy = token_logprobs(nnx.merge(graphdef, nnx.State(params)), tokens, chunk=4,
                          temperature=jnp.asarray([0.0, 1.0, 1.0]))
  np.testing.assert_allclose(greedy[0], want_lp[0], atol=2e-5)


def test_gradient_matches_the_full_logits_gradient_and_finite_differences():
  graphdef, params, tokens = _setup(n=2, t=9, seed=1)
  temp_N = jnp.asarray([1.0, 0.8])
  w = jnp.asarray(np.random.default_rng(2).normal(size=tokens.shape), jnp.float32)

  def f(p):
    lp, ent = token_logprobs(nnx.merge(graphdef, nnx.State(p)), tokens, chunk=3,
                             temperature=temp_N, return_entropy=True)
    return jnp.sum(w * lp) + 0.3 * jnp.sum(ent)

  def f_direct(p):
    lp, ent = _direct(graphdef, p, tokens, temp_N)
    return jnp.sum(w * lp) + 0.3 * jnp.sum(ent)

  g = jax.jit(jax.grad(f))(params)
  g_direct = jax.jit(jax.grad(f_direct))(params)
  for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(g_direct)):
    np.testing.assert_allclose(a, b, atol=1e-4, rtol=1e-3)
  # Central finite differences along two random directions.
  f_jit = jax.jit(f)
  for seed in (3, 4):
    keys = jax.random.split(jax.random.key(seed), len(jax.tree.leaves(params)))
    d = jax.tree.unflatten(jax.tree.structure(params), [
        jax.random.normal(k, x.shape) * jnp.sqrt(jnp.mean(x * x))  # relative to each leaf's scale
        for k, x in zip(keys, jax.tree.leaves(params))])
    eps = 3e-3
    plus = f_jit(jax.tree.map(lambda x, y: x + eps * y, params, d))
    minus = f_jit(jax.tree.map(lambda x, y: x - eps * y, params, d))
    fd = (plus - minus) / (2 * eps)
    analytic = sum(jnp.vdot(a, b) for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(d)))
    np.testing.assert_allclose(float(fd), float(analytic), rtol=1e-2)


def test_vocab_major_head_is_the_head_transposed():
  """The log-probs' head layout [V, N, T] holds the same logits as ``head`` [N, T, V], for a tied
  and an untied head."""
  import dataclasses  # pylint: disable=import-outside-toplevel
  for cfg in (CFG, dataclasses.replace(CFG, tie_embeddings=False)):
    model = make_model(cfg, seed=1)
    h = jax.random.normal(jax.random.key(2), (2, 5, cfg.d_model))
    np.testing.assert_allclose(model.head_vocab_major(h), model.head(h).transpose(2, 0, 1),
                               rtol=1e-5, atol=1e-5)


def test_a_model_with_its_own_head_is_scored_with_it():
  """A subclass that overrides ``head`` gets log-probs from that head, not the embedding's."""
  class Shifted(type(make_model(CFG))):
    def head(self, h_NTD):
      return super().head(h_NTD) * 0.0 + jnp.arange(CFG.vocab_size, dtype=jnp.float32)

  model = Shifted(CFG, rngs=nnx.Rngs(params=0))
  tokens = jnp.asarray([[1, 5, 96]], jnp.int32)
  want = jax.nn.log_softmax(jnp.arange(CFG.vocab_size, dtype=jnp.float32))[jnp.array([5, 96])]
  np.testing.assert_allclose(token_logprobs(model, tokens, chunk=2)[0, 1:], want, rtol=1e-5)
