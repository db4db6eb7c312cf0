"""models/backend.py, the one seam: what it chooses on CPU and elsewhere, that programs and the
model go through it, and that importing it (and the CLI) starts no JAX. (That only ``models/``
imports ``models.cpu`` is tests/test_layout.py's.)"""
import dataclasses
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from arenarl_jax.models import attention_choice, backend, matmul, remat
from arenarl_jax.models.config import ModelConfig
from arenarl_jax.models.logprobs import token_logprobs
from arenarl_jax.models.transformer import make_model, set_attention, set_remat

CFG = ModelConfig(vocab_size=97, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8,
                  ffn_dim=64, tie_embeddings=True)


def test_cpu_chooses_the_cpu_backend():
  cpu = backend.current()
  assert cpu is backend.get("cpu") and cpu.platform == "cpu"
  assert cpu.default_attention == "cpu_kernel"
  assert cpu.dense is matmul.dense and cpu.dense_t is matmul.dense_t
  assert cpu.remat is remat.checkpointed
  assert cpu.options(backend.INFERENCE) and cpu.options(backend.TRAINING)


def test_decode_step_is_feature_major_only_for_the_transformer_with_the_cpu_kernel():
  cpu = backend.current()
  model = make_model(CFG, attention="cpu_kernel")
  assert cpu.decode_step(model).feature_major
  assert cpu.decode_step(set_attention(model, "auto")).feature_major
  assert cpu.decode_step(set_attention(model, "reference")) is backend.ROWS_DECODE
  assert cpu.decode_step(nnx.Linear(2, 2, rngs=nnx.Rngs(0))) is backend.ROWS_DECODE


def test_other_platforms_get_the_plain_backend():
  plain = backend.get("gpu")
  assert plain.platform == "gpu"
  assert not plain.options(backend.INFERENCE) and not plain.options(backend.TRAINING)
  assert plain.default_attention == "dot_product_attention"
  assert plain.dense is matmul.plain_dense and plain.dense_t is matmul.plain_dense_t
  assert plain.decode_step(make_model(CFG, attention="cpu_kernel")) is backend.ROWS_DECODE


def test_auto_attention_is_the_backends_default(monkeypatch):
  assert attention_choice.resolved_name("auto") == "cpu_kernel"
  monkeypatch.setattr(backend, "current", lambda: backend.get("gpu"))
  assert attention_choice.resolved_name("auto") == "dot_product_attention"
  assert attention_choice.resolved_name("reference") == "reference"


def test_jit_asks_the_backend_at_each_call(monkeypatch):
  asked = []
  cpu = backend.current()

  def current():
    asked.append(1)
    return cpu

  prog = backend.jit(lambda x: x + 1)
  monkeypatch.setattr(backend, "current", current)
  np.testing.assert_array_equal(prog(jnp.arange(3)), [1, 2, 3])
  assert asked


@pytest.mark.parametrize("tied", [True, False])
def test_the_plain_products_and_checkpoint_give_the_cpu_backends_values(monkeypatch, tied):
  """The plain backend's jnp products and plain jax.checkpoint: the same loss and gradients as the
  CPU backend's written-out backward and tied checkpoint (run here on CPU)."""
  cfg = CFG if tied else dataclasses.replace(CFG, tie_embeddings=False)
  graphdef, state = nnx.split(set_remat(make_model(cfg, seed=0, attention="reference"),
                                        "dots_no_batch"))
  params = nnx.to_pure_dict(state)
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, cfg.vocab_size, (3, 11)), jnp.int32)

  def loss(params):
    model = nnx.merge(graphdef, nnx.State(params))
    return jnp.mean(token_logprobs(model, tokens, chunk=4))

  cpu_value, cpu_grads = jax.jit(jax.value_and_grad(loss))(params)
  monkeypatch.setattr(backend, "current", lambda: backend.get("gpu"))
  value, grads = jax.jit(jax.value_and_grad(loss))(params)
  np.testing.assert_allclose(value, cpu_value, rtol=1e-6)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), grads,
               cpu_grads)


def test_importing_the_seam_and_the_cli_starts_no_jax():
  code = ("import sys; import arenarl_jax.models.backend, arenarl_jax.main; "
          "assert 'jax' not in sys.modules, sorted(m for m in sys.modules if 'jax' in m)")
  subprocess.run([sys.executable, "-c", code], check=True)

