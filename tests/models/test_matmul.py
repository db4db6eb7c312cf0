"""models/matmul.py: the dense products with a written-out backward equal autodiff's, and the
dot-based remat policies still keep them (no recompute of a weight product)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from arenarl_jax.models.config import PRESETS
from arenarl_jax.models.logprobs import token_logprobs
from arenarl_jax.models.matmul import dense, dense_t
from arenarl_jax.models.transformer import make_model


def _arrays(*shapes, dtype=jnp.float32):
  keys = jax.random.split(jax.random.key(0), len(shapes))
  return [jax.random.normal(k, s).astype(dtype) for k, s in zip(keys, shapes)]


@pytest.mark.parametrize("dtype,tol", [(jnp.float32, 1e-5), (jnp.bfloat16, 2e-2)])
def test_dense_value_and_gradients_equal_autodiff(dtype, tol):
  x, w, w_t, g = _arrays((3, 5, 16), (16, 24), (24, 16), (3, 5, 24), dtype=dtype)
  for ours, plain, weight in ((dense, lambda a, b: a @ b, w),
                              (dense_t, lambda a, b: jnp.einsum("...d,od->...o", a, b), w_t)):
    f_ours = lambda a, b, ours=ours: jnp.sum(ours(a, b).astype(jnp.float32) * g)
    f_plain = lambda a, b, plain=plain: jnp.sum(plain(a, b).astype(jnp.float32) * g)
    (v1, (dx1, dw1)) = jax.value_and_grad(f_ours, argnums=(0, 1))(x, weight)
    (v2, (dx2, dw2)) = jax.value_and_grad(f_plain, argnums=(0, 1))(x, weight)
    assert dx1.dtype == x.dtype and dw1.dtype == weight.dtype
    np.testing.assert_allclose(v1, v2, rtol=tol)
    for a, b in ((dx1, dx2), (dw1, dw2)):
      np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32),
                                 rtol=tol, atol=tol * 10)


def test_out_dtype_is_the_accumulation_dtype():
  x, w = _arrays((2, 8), (8, 4), dtype=jnp.bfloat16)
  assert dense(x, w, jnp.float32).dtype == jnp.float32
  assert dense_t(x, w.T, jnp.float32).dtype == jnp.float32
  assert dense(x, w).dtype == jnp.bfloat16


def _grad_dot_count(remat: str) -> int:
  cfg = PRESETS["tiny"]
  graphdef, state = nnx.split(make_model(cfg, seed=0, attention="reference", remat=remat))
  tokens = jax.random.randint(jax.random.key(1), (2, 24), 0, cfg.vocab_size)
  loss = lambda s: jnp.sum(token_logprobs(nnx.merge(graphdef, s), tokens, chunk=8))
  return str(jax.make_jaxpr(jax.grad(loss))(state)).count("dot_general")


def test_dot_policies_keep_the_dense_products():
  """dots_no_batch recomputes only the reference attention's two batched products per layer;
  without the products' names it would recompute all seven weight products of every layer."""
  layers = PRESETS["tiny"].n_layers
  base = _grad_dot_count("none")
  assert _grad_dot_count("dots_no_batch") == base + 2 * layers
  assert _grad_dot_count("full") >= base + 7 * layers
