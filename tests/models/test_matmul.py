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


def _dot_dtypes(fn, *args) -> list[str]:
  """The ``preferred_element_type`` of every dot in ``fn``'s jaxpr (value and gradients)."""
  text = str(jax.make_jaxpr(fn)(*args))
  return [part.split("preferred_element_type=")[1].split()[0].rstrip(",]")
          for part in text.split("dot_general")[1:]]


@pytest.mark.parametrize("product", [dense, dense_t])
def test_bfloat16_products_accumulate_in_float32(product):
  """bfloat16 operands: every product, forward and backward, accumulates in float32 (what the
  CPU's bfloat16 matrix units do; a bfloat16-out product misses them) and is rounded once, so a
  long sum equals the float32 product of the same operands rounded to bfloat16; float32 operands
  keep float32 products and no extra conversion."""
  x, w, g = _arrays((4, 1024), (1024, 64), (4, 64), dtype=jnp.bfloat16)
  w = w if product is dense else w.T
  got = np.asarray(product(x, w), np.float32)
  f32 = product(x.astype(jnp.float32), w.astype(jnp.float32))
  want = np.asarray(f32.astype(jnp.bfloat16), np.float32)
  # Equal except where the float32 sums differ by summation order at a rounding boundary.
  assert np.mean(got == want) > 0.97, np.mean(got == want)
  for dtype in (jnp.bfloat16, jnp.float32):
    args = [a.astype(dtype) for a in (x, w, g)]
    loss = lambda a, b, c: jnp.sum(product(a, b).astype(jnp.float32) * c.astype(jnp.float32))
    grads = jax.value_and_grad(loss, argnums=(0, 1))
    assert _dot_dtypes(grads, *args) == ["float32"] * 3  # the value, dx and dw
    if dtype == jnp.float32:
      assert "convert_element_type" not in str(jax.make_jaxpr(grads)(*args))


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
