"""models/causal_blocks.py and the cpu_kernel's training attention: the blocked causal attention
and its written-out backward equal the reference attention's values and gradients."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from arenarl_jax.models import causal_blocks
from arenarl_jax.models.attention import ReferenceAttention
from arenarl_jax.models.config import PRESETS
from arenarl_jax.models.cpu import build, kernel
from arenarl_jax.models.cpu.attention import CpuAttention
from arenarl_jax.models.logprobs import token_logprobs
from arenarl_jax.models.transformer import make_model

N, T, KV, R, F = 2, 32, 2, 3, 16
def _need_kernel():
  """Skips without the kernel, except where it is required (CI with a compiler): there it fails."""
  if not kernel.available():
    assert not build.required(), "the CPU kernel is required but unavailable"
    pytest.skip("no C++ compiler / not a CPU backend")


needs_kernel = pytest.mark.usefixtures("kernel_required")


@pytest.fixture(name="kernel_required")
def _kernel_required():
  _need_kernel()


def _qkv(seed=0):
  ks = jax.random.split(jax.random.key(seed), 4)
  return (jax.random.normal(ks[0], (N, T, KV, R, F)), jax.random.normal(ks[1], (N, T, KV, F)),
          jax.random.normal(ks[2], (N, T, KV, F)), jax.random.normal(ks[3], (N, T, KV, R, F)))


def _value_and_grads(attn, q, k, v, g):
  return jax.value_and_grad(lambda q, k, v: jnp.sum(attn(q, k, v) * g), argnums=(0, 1, 2))(q, k, v)


def _close(got, want, tol=2e-5):
  (v1, g1), (v2, g2) = got, want
  np.testing.assert_allclose(v1, v2, rtol=tol)
  for a, b in zip(g1, g2):
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


@pytest.mark.parametrize("blocks", [1, 2, 4, 8])
@pytest.mark.parametrize("masked", [False, True])
def test_blocked_equals_reference(blocks, masked):
  q, k, v, g = _qkv()
  mask = jnp.ones((N, T)).at[1, 20:].set(0).at[0, 3].set(0) if masked else None
  want = _value_and_grads(lambda q, k, v: ReferenceAttention().sequence(q, k, v, mask), q, k, v, g)
  got = _value_and_grads(lambda q, k, v: causal_blocks.causal_attention(q, k, v, mask, blocks),
                         q, k, v, g)
  _close(got, want)


def test_block_count():
  assert causal_blocks.block_count(512) == 8
  assert causal_blocks.block_count(1024) == 16
  assert causal_blocks.block_count(64) == 1
  assert causal_blocks.block_count(1) == 1
  assert causal_blocks.block_count(97) == 1  # prime: one block
  assert causal_blocks.block_count(96) == 2  # blocks of 48 are the closest to 64


def _sequence(seed, t, f):
  ks = jax.random.split(jax.random.key(seed), 4)
  return (jax.random.normal(ks[0], (N, t, KV, R, f)), jax.random.normal(ks[1], (N, t, KV, f)),
          jax.random.normal(ks[2], (N, t, KV, f)), jax.random.normal(ks[3], (N, t, KV, R, f)))


@needs_kernel
@pytest.mark.parametrize("t, f", [(37, 64), (32, 16)])
def test_kernel_forward_equals_blocked_forward(t, f):
  """The C++ forward (full register tiles at F = 64; at F = 16 half-width tiles on AVX2, plain
  loops on AVX-512; T = 37 leaves a last query tile of 5 tokens) against the jnp one, on the model's layouts with no transpose around it."""
  q, k, v, _ = _sequence(1, t, f)
  out1, lse1 = jax.jit(kernel.causal, static_argnums=4)(q, k, v, None, 4)
  out2, lse2 = causal_blocks.blocked_forward(q, k, v, None, 1)
  np.testing.assert_allclose(out1, out2, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(lse1, lse2, rtol=1e-5, atol=1e-5)
  prims = {e.primitive.name for e in jax.make_jaxpr(kernel.causal, static_argnums=4)(
      q, k, v, None, 4).eqns}
  assert "transpose" not in prims
  with pytest.raises(ValueError, match="key mask"):
    kernel.causal(q, k, v, jnp.ones((N, t)), 4)


@needs_kernel
@pytest.mark.parametrize("t, f", [(37, 64), (32, 16)])
def test_kernel_backward_equals_blocked_backward(t, f):
  """The C++ backward (full register tiles at F = 64; at F = 16 half-width tiles on AVX2, plain
  loops on AVX-512; T = 37 leaves a last query tile of 5 tokens) against the jnp one, from the same forward residuals."""
  q, k, v, dout = _sequence(3, t, f)
  out, lse = causal_blocks.blocked_forward(q, k, v, None, 1)
  got = jax.jit(kernel.causal_backward, static_argnums=7)(q, k, v, None, out, lse, dout, 1)
  want = causal_blocks.blocked_backward(q, k, v, None, out, lse, dout, 1)
  for a, b in zip(got, want):
    assert a.shape == b.shape
    np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5)
  prims = {e.primitive.name for e in jax.make_jaxpr(kernel.causal_backward, static_argnums=7)(
      q, k, v, None, out, lse, dout, 1).eqns}
  assert "transpose" not in prims
  with pytest.raises(ValueError, match="key mask"):
    kernel.causal_backward(q, k, v, jnp.ones((N, t)), out, lse, dout, 1)


@needs_kernel
@pytest.mark.parametrize("masked", [False, True])
def test_cpu_sequence_attention_equals_reference(masked):
  q, k, v, g = _qkv(2)
  mask = jnp.ones((N, T), jnp.int32).at[0, 25:].set(0) if masked else None
  want = _value_and_grads(lambda q, k, v: ReferenceAttention().sequence(q, k, v, mask), q, k, v, g)
  got = _value_and_grads(lambda q, k, v: CpuAttention().sequence(q, k, v, mask), q, k, v, g)
  _close(got, want)


def _kernel_calls(remat: str) -> int:
  cfg = PRESETS["tiny"]
  graphdef, state = nnx.split(make_model(cfg, seed=0, attention="cpu_kernel", remat=remat))
  tokens = jax.random.randint(jax.random.key(1), (2, 24), 0, cfg.vocab_size)
  loss = lambda s: jnp.sum(token_logprobs(nnx.merge(graphdef, s), tokens, chunk=8))
  text = jax.jit(jax.grad(loss)).lower(state).compile().as_text()
  targets = [line.split('custom_call_target="')[1].split('"')[0]
             for line in text.splitlines() if "custom-call(" in line]
  assert set(targets) <= {build.CAUSAL_TARGET, build.BACKWARD_TARGET}, targets
  assert targets.count(build.BACKWARD_TARGET) == PRESETS["tiny"].n_layers
  return targets.count(build.CAUSAL_TARGET)


@needs_kernel
def test_remat_keeps_the_attention_output():
  """Under the dot policies the backward reads the kept output and log-normaliser: the forward
  kernel runs once per layer; ``full`` keeps nothing and runs it again in the backward."""
  layers = PRESETS["tiny"].n_layers
  assert _kernel_calls("none") == layers
  assert _kernel_calls("dots_no_batch") == layers
  assert _kernel_calls("full") == 2 * layers
