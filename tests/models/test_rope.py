"""RoPE tables gathered from a bounded table equal the directly computed ones."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hf_reference import VARIANTS, build_hf_model

from arenarl_jax.models.config import from_hf_config
from arenarl_jax.models.rope import rope_tables


@pytest.mark.parametrize("variant", ["llama", "llama3_untied", "qwen2_yarn_untied",
                                     "qwen3_tied_linear"])
def test_table_lookup_equals_direct_tables(variant):
  cfg = from_hf_config(build_hf_model(variant).config.to_dict())
  positions_NT = jnp.asarray([[0, 1, 5, 63], [17, 30, 31, 2]], jnp.int32)
  direct = jax.jit(lambda p: rope_tables(cfg, p))(positions_NT)
  looked_up = jax.jit(lambda p: rope_tables(cfg, p, 64))(positions_NT)
  for a, b in zip(direct, looked_up):
    assert a.shape == b.shape == (2, 4, cfg.head_dim)
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=0, atol=1e-6)
  # Spot-check one entry by hand: position 5, pair 0 rotates by 5 * inv_freq[0] = 5 radians
  # (YaRN also scales cos/sin by its attention factor, so only the plain variants are checked).
  if VARIANTS[variant][1]["rope_parameters"]["rope_type"] == "default":
    assert float(looked_up[0][0, 2, 0]) == pytest.approx(np.cos(5.0), abs=1e-6)
    assert float(looked_up[1][0, 2, 0]) == pytest.approx(np.sin(5.0), abs=1e-6)


def test_positions_past_the_bound_are_clipped_to_the_last_row():
  cfg = from_hf_config(build_hf_model("llama").config.to_dict())
  cos, sin = rope_tables(cfg, jnp.asarray([[7, 8, 100]], jnp.int32), 8)
  np.testing.assert_array_equal(np.asarray(cos[0, 1]), np.asarray(cos[0, 0]))
  np.testing.assert_array_equal(np.asarray(sin[0, 2]), np.asarray(sin[0, 0]))
  direct_cos, _ = rope_tables(cfg, jnp.asarray([[7]], jnp.int32))
  np.testing.assert_allclose(np.asarray(cos[0, 0]), np.asarray(direct_cos[0, 0]), atol=1e-6)
