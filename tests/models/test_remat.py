"""model.remat: every policy gives the no-remat values and gradients, leaves cached passes alone,
is static, and lowers the compiled backward's memory in the order its saved values predict."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from arenarl_jax import sharding
from arenarl_jax.rl import losses
from arenarl_jax.rl.settings import LossSettings
from arenarl_jax.models import remat
from arenarl_jax.models.config import ModelConfig
from arenarl_jax.models.logprobs import token_logprobs
from arenarl_jax.models.transformer import Transformer, make_model, set_remat
from arenarl_jax.trainer import Trainer, make_optimizer

CFG = ModelConfig(vocab_size=97, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8,
                  ffn_dim=64, tie_embeddings=True)
POLICIES = [p for p in remat.CHOICES if p != "none"]


def _setup(cfg=CFG, n=3, t=13, attention="auto"):
  graphdef, state = nnx.split(make_model(cfg, seed=0, attention=attention))
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, cfg.vocab_size, (n, t)), jnp.int32)
  return graphdef, nnx.to_pure_dict(state), tokens


def _mean_logp(graphdef, policy, tokens, chunk=4):
  def loss(params):
    model = set_remat(nnx.merge(graphdef, nnx.State(params)), policy)
    mask_NT = jnp.ones(tokens.shape, bool).at[0, :2].set(False)  # a left-padded row
    return jnp.mean(token_logprobs(model, tokens, mask_NT=mask_NT, chunk=chunk))
  return loss


def test_forward_is_the_same_program_value_under_every_policy():
  graphdef, params, tokens = _setup()

  @jax.jit
  def every_policy(params):  # one program holding every policy's forward: one compile
    return {p: set_remat(nnx.merge(graphdef, nnx.State(params)), p)(tokens)[0]
            for p in remat.CHOICES}

  out = every_policy(params)
  for policy in POLICIES:
    np.testing.assert_array_equal(out[policy], out["none"], err_msg=policy)


def test_bad_value_names_the_key():
  with pytest.raises(ValueError, match="model.remat"):
    make_model(CFG, remat="dots_saveable")
  with pytest.raises(ValueError, match="model.remat"):
    set_remat(make_model(CFG), "Full")
  mesh = sharding.make_mesh(1, 1, 1, devices=jax.devices()[:1])
  graphdef, params, _ = _setup()
  with pytest.raises(ValueError, match="model.remat"):
    Trainer(graphdef, params, mesh, losses.make_rl_loss(LossSettings()), make_optimizer(
        dict(lr=1e-3, weight_decay=0.0, b1=0.9, b2=0.98, grad_clip=1.0), 1), remat="some")


def test_choice_is_static_and_cached_passes_ignore_it():
  """The choice is in the graph definition (one program per choice, one compile per program);
  a decode step, a cache fill and a branch read trace to the same program whatever it says."""
  g_none = nnx.graphdef(make_model(CFG, remat="none"))
  assert nnx.graphdef(make_model(CFG, remat="full")) == nnx.graphdef(make_model(CFG, remat="full"))
  assert nnx.graphdef(make_model(CFG, remat="full")) != g_none
  graphdef, params, tokens = _setup()
  step = jax.jit(jax.value_and_grad(_mean_logp(graphdef, "dots_no_batch", tokens)))
  step(params)
  step(jax.tree.map(lambda x: x * 1.01, params))
  assert step._cache_size() == 1  # pylint: disable=protected-access

  def cached_programs(policy):
    model = set_remat(nnx.merge(graphdef, nnx.State(params)), policy)
    n = tokens.shape[0]
    pos_N1 = jnp.full((n, 1), 4, jnp.int32)

    def run(tokens_N1, pos_N1):
      cache = model.fill(tokens[:, :4], jnp.broadcast_to(jnp.arange(4), (n, 4)),
                         cache=model.empty_cache(n, 8))
      logits, cache = model(tokens_N1, pos_N1, cache=cache)
      branch = model.branch_hidden([1, 2], [0, 1], np.tril(np.ones((2, 2), bool)), cache=cache,
                                   lengths_N=jnp.full((n,), 5, jnp.int32))
      return logits, branch
    return str(jax.make_jaxpr(run)(tokens[:, 4:5], pos_N1))

  base = cached_programs("none")
  assert "remat" not in base and "checkpoint" not in base
  for policy in POLICIES:
    assert cached_programs(policy) == base, policy


def test_every_policy_gives_the_same_loss_and_gradients_in_the_memory_it_should():
  """Value-and-grad of the mean log-prob (3 layers x 128 tokens, a left-padded row, 4 chunks)
  equals the no-remat one under every policy; and XLA's memory analysis of the compiled programs
  orders them as what they save predicts: ``full`` keeps one input per block (least),
  ``dots_no_batch`` adds the weight matmuls' outputs, ``dots`` also the attention's batched
  products, ``none`` every intermediate (most: at least two more layers' [N, H, T, T] scores than
  ``full``, which recomputes one layer's at a time)."""
  cfg = ModelConfig(vocab_size=97, d_model=64, n_layers=3, n_heads=4, n_kv_heads=2, head_dim=16,
                    ffn_dim=128, tie_embeddings=True)
  graphdef, params, tokens = _setup(cfg, n=2, t=128, attention="reference")
  temp, out = {}, {}
  for policy in remat.CHOICES:
    loss = _mean_logp(graphdef, policy, tokens, chunk=32)
    compiled = jax.jit(jax.value_and_grad(loss)).lower(params).compile()
    temp[policy] = compiled.memory_analysis().temp_size_in_bytes
    out[policy] = compiled(params)
  want_v, want_g = out["none"]
  assert float(jnp.max(jnp.abs(want_g["layers"][0]["mlp"]["up"]["kernel"]))) > 0
  for policy in POLICIES:
    v, g = out[policy]
    np.testing.assert_allclose(v, want_v, rtol=1e-6, err_msg=policy)
    for (path, got), want in zip(jax.tree_util.tree_leaves_with_path(g), jax.tree.leaves(want_g)):
      np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"{policy} {path}")
  assert temp["full"] < temp["dots_no_batch"] < temp["dots"] < temp["none"], temp
  scores = 2 * 4 * 128 * 128 * 4  # one layer's [N, H, T, T] float32 scores
  assert temp["none"] - temp["full"] >= 2 * scores, (temp, scores)
