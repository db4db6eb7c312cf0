"""compile_options.program: jax.jit with CPU compiler options, same results, safe fallbacks."""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from arenarl_jax.models.cpu import compile_options


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


def test_program_matches_jit_and_keeps_reductions_out_of_library_fusions(inputs, monkeypatch):
  monkeypatch.delenv("XLA_FLAGS", raising=False)
  prog = compile_options.program(attention_like)
  assert jax.default_backend() == "cpu"
  np.testing.assert_allclose(prog(*inputs), jax.jit(attention_like)(*inputs), rtol=1e-5,
                             atol=1e-6)
  tuned = prog.jitted().lower(*inputs).compile().as_text()
  plain = jax.jit(attention_like).lower(*inputs).compile().as_text()
  assert fused_library_reductions(tuned) == 0
  assert tuned != plain


def test_users_xla_flags_win(inputs, monkeypatch):
  prog = compile_options.program(attention_like)
  monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_experimental_ynn_fusion_type=dot")
  text = prog.jitted().lower(*inputs).compile().as_text()
  assert text == jax.jit(attention_like).lower(*inputs).compile().as_text()


def test_an_unknown_option_falls_back_to_defaults_once(inputs, monkeypatch, caplog):
  monkeypatch.delenv("XLA_FLAGS", raising=False)
  monkeypatch.setattr(compile_options, "CPU_OPTIONS",
                      {"xla_cpu_experimental_ynn_fusion_type": "NOT_A_FUSION_TYPE"})
  monkeypatch.setitem(compile_options._state, "cpu_options_ok", True)  # pylint: disable=protected-access
  prog = compile_options.program(lambda x: jnp.tanh(x) * 2)
  np.testing.assert_allclose(prog(inputs[0]), jnp.tanh(inputs[0]) * 2, rtol=1e-6)
  assert "rejects" in caplog.text
  assert not compile_options._state["cpu_options_ok"]  # pylint: disable=protected-access
