"""backend.jit: jax.jit with the backend's compiler options per program kind, same results, safe
fallbacks (on CPU: the XLA:CPU options of models/cpu/compile_options.py)."""
import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from arenarl_jax.models import backend


def attention_like(s, v):
  return jax.nn.softmax(s, axis=-1) @ v


def fused_library_reductions(compiled_text: str) -> int:
  """How many library (kCustom) fusions contain a reduce: what the CPU option keeps out."""
  bodies = dict(re.findall(r"\n%(\S+) \([^\n]*\{\n(.*?)\n\}", compiled_text, re.S))
  called = re.findall(r"kind=kCustom, calls=%(\S+?),", compiled_text)
  return sum("reduce(" in bodies.get(name, "") for name in called)


@pytest.fixture
def inputs():
  k1, k2 = jax.random.split(jax.random.key(0))
  return jax.random.normal(k1, (4, 64, 96)), jax.random.normal(k2, (96, 32))


def compiled_text(fn, *args, **jit_kwargs):
  return jax.jit(fn, **jit_kwargs).lower(*args).compile().as_text()


def test_jit_matches_jax_jit_and_keeps_reductions_out_of_library_fusions(inputs, monkeypatch):
  monkeypatch.delenv("XLA_FLAGS", raising=False)
  prog = backend.jit(attention_like)
  assert jax.default_backend() == "cpu"
  np.testing.assert_allclose(prog(*inputs), jax.jit(attention_like)(*inputs), rtol=1e-5,
                             atol=1e-6)
  tuned = prog.lower(*inputs).compile().as_text()
  assert fused_library_reductions(tuned) == 0
  assert tuned != compiled_text(attention_like, *inputs)


def test_each_kind_compiles_with_its_own_options(inputs, monkeypatch):
  monkeypatch.delenv("XLA_FLAGS", raising=False)
  cpu = backend.current()
  assert cpu.options(backend.INFERENCE) != cpu.options(backend.TRAINING)
  for kind in backend.KINDS:
    text = backend.jit(attention_like, kind=kind).lower(*inputs).compile().as_text()
    assert text == compiled_text(attention_like, *inputs, compiler_options=cpu.options(kind))
  with pytest.raises(ValueError, match="kind"):
    backend.jit(attention_like, kind="serving")


def test_users_xla_flags_win(inputs, monkeypatch):
  prog = backend.jit(attention_like)
  monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_experimental_ynn_fusion_type=dot")
  assert prog.lower(*inputs).compile().as_text() == compiled_text(attention_like, *inputs)


@pytest.fixture
def rejected_options(monkeypatch):
  """The CPU backend with an option value this XLA rejects, for the test's duration."""
  monkeypatch.delenv("XLA_FLAGS", raising=False)
  bad = {"xla_cpu_experimental_ynn_fusion_type": "NOT_A_FUSION_TYPE"}
  cpu = backend.current()
  backend.register(dataclasses.replace(cpu, compiler_options={backend.INFERENCE: bad}))
  yield bad
  backend.register(cpu)


def test_an_unknown_option_falls_back_to_defaults_once(inputs, rejected_options, caplog):
  del rejected_options
  prog = backend.jit(lambda x: jnp.tanh(x) * 2)
  np.testing.assert_allclose(prog(inputs[0]), jnp.tanh(inputs[0]) * 2, rtol=1e-6)
  assert caplog.text.count("rejects") == 1
  np.testing.assert_allclose(prog(inputs[0] + 1), jnp.tanh(inputs[0] + 1) * 2, rtol=1e-6)
  other = backend.jit(lambda x: jnp.tanh(x) * 3)  # the rejection holds for every program
  np.testing.assert_allclose(other(inputs[0]), jnp.tanh(inputs[0]) * 3, rtol=1e-6)
  assert caplog.text.count("rejects") == 1
