"""Copy heads at initialisation: the first layer writes back the token it attends to."""
import dataclasses

import numpy as np
import pytest

from arenarl_jax.models import config as model_config
from arenarl_jax.models.transformer import make_model
from arenarl_jax.sft import copy_heads

CFG = dataclasses.replace(model_config.get_preset("quickstart"), vocab_size=1024)


def _focused_logits(model):
  """Logits of every id v when each first-layer head attends only to a token v (softmax weight
  1): the value path o(v(norm(e_v))) scored by the tied head, [V, V]."""
  cfg = model.cfg
  attn = model.layers[0].attn
  e = np.asarray(model.embed[...], np.float64)
  normed = e / np.sqrt(np.mean(e * e, axis=1, keepdims=True) + cfg.norm_eps)
  values = normed @ np.asarray(attn.v.kernel[...], np.float64)  # [V, K*F]
  f, reps = cfg.head_dim, cfg.n_heads // cfg.n_kv_heads
  heads = [values[:, (h // reps) * f:(h // reps + 1) * f] for h in range(cfg.n_heads)]
  return np.concatenate(heads, axis=1) @ np.asarray(attn.o.kernel[...], np.float64) @ e.T


def test_copy_heads_write_back_the_attended_token_and_touch_nothing_else():
  random = make_model(CFG, seed=0)
  model = make_model(CFG, seed=0)
  copy_heads.init_copy_heads(model, CFG.n_kv_heads, seed=0)
  # Every id scores highest when attended to (a random start: about 1 in V).
  assert np.mean(np.argmax(_focused_logits(model), axis=1) == np.arange(CFG.vocab_size)) == 1.0
  assert np.mean(np.argmax(_focused_logits(random), axis=1) == np.arange(CFG.vocab_size)) < 0.05
  # The value-then-output map is the projection onto the groups' subspace: P P = P, rank K*F.
  attn = model.layers[0].attn
  f, reps = CFG.head_dim, CFG.n_heads // CFG.n_kv_heads
  v = np.asarray(attn.v.kernel[...], np.float64)
  o = np.asarray(attn.o.kernel[...], np.float64)
  p = sum(v[:, k * f:(k + 1) * f] @ o[h * f:(h + 1) * f]
          for h in range(CFG.n_heads) for k in [h // reps])
  np.testing.assert_allclose(p @ p, p, atol=1e-5)
  assert np.linalg.matrix_rank(p, tol=1e-4) == CFG.n_kv_heads * f
  # Only the first layer's v and o move; the same seed gives the same start.
  for path, leaf in _leaves(model).items():
    if path not in (("layers", 0, "attn", "v", "kernel"), ("layers", 0, "attn", "o", "kernel")):
      np.testing.assert_array_equal(leaf, _leaves(random)[path], err_msg=str(path))
  again = make_model(CFG, seed=0)
  copy_heads.init_copy_heads(again, CFG.n_kv_heads, seed=0)
  np.testing.assert_array_equal(np.asarray(again.layers[0].attn.v.kernel[...]), v)


def test_one_group_copies_in_its_own_subspace_and_zero_groups_change_nothing():
  model = make_model(CFG, seed=1)
  before = np.asarray(model.layers[0].attn.o.kernel[...]).copy()
  copy_heads.init_copy_heads(model, 0, seed=1)
  np.testing.assert_array_equal(np.asarray(model.layers[0].attn.o.kernel[...]), before)
  copy_heads.init_copy_heads(model, 1, seed=1)
  f, reps = CFG.head_dim, CFG.n_heads // CFG.n_kv_heads
  o = np.asarray(model.layers[0].attn.o.kernel[...])
  np.testing.assert_array_equal(o[reps * f:], before[reps * f:])  # the second group keeps its own
  v = np.asarray(model.layers[0].attn.v.kernel[...], np.float64)[:, :f]
  np.testing.assert_allclose(v.T @ v, np.eye(f), atol=1e-5)  # an orthonormal basis
  with pytest.raises(ValueError, match="model.init.copy_heads"):
    copy_heads.init_copy_heads(model, CFG.n_kv_heads + 1, seed=1)


def _leaves(model):
  from flax import nnx  # pylint: disable=g-import-not-at-top
  state = nnx.state(model, nnx.Param)
  return {tuple(path): np.asarray(leaf.get_value()) for path, leaf in nnx.to_flat_state(state)}

