"""Induction drills (sft/induction.py): rows by hand, the ids they draw, and a tiny model that
learns to copy from them (on uniform random ids only copying lowers the loss below log |ids|)."""
import dataclasses
import math

import jax
import numpy as np
import pytest
from flax import nnx

from arenarl_jax import sharding
from arenarl_jax.models import config as model_config
from arenarl_jax.models.transformer import make_model
from arenarl_jax.sft import induction
from arenarl_jax.sft.settings import SftSettings


class _Tokenizer:
  vocab_size = 40
  special_ids = frozenset({0, 1, 2, 39})


def test_drill_rows_say_the_run_twice_and_train_the_determined_tokens():
  ids = np.asarray([5, 6, 7], np.int32)
  b = induction.drill_batch(ids, rows=2, length=4, rng=np.random.default_rng(0))
  assert b["tokens_NT"].shape == (2, 8) and b["tokens_NT"].dtype == np.int32
  np.testing.assert_array_equal(b["tokens_NT"][:, :4], b["tokens_NT"][:, 4:])
  assert set(np.unique(b["tokens_NT"])) <= {5, 6, 7}
  # Position 4 (the second run's first token) could follow anything; 5..7 are determined.
  np.testing.assert_array_equal(b["loss_mask_NT"][0], [0, 0, 0, 0, 0, 1, 1, 1])
  np.testing.assert_array_equal(b["temperature_N"], [1.0, 1.0])
  again = induction.drill_batch(ids, rows=2, length=4, rng=np.random.default_rng(0))
  np.testing.assert_array_equal(again["tokens_NT"], b["tokens_NT"])
  with pytest.raises(ValueError, match="length >= 2"):
    induction.drill_batch(ids, rows=2, length=1, rng=np.random.default_rng(0))


def test_ordinary_ids_leave_out_special_ids_and_ids_past_the_model():
  ids = induction.ordinary_ids(_Tokenizer(), vocab_size=40)
  assert ids.tolist() == list(range(3, 39))
  assert induction.ordinary_ids(_Tokenizer(), vocab_size=10).tolist() == list(range(3, 10))


def _config(steps):
  return SftSettings(induction_steps=steps, induction_rows=16, induction_len=12,
                     induction_lr=1e-2, log_every=20)


def _drill_loss(model, ids, seed):
  b = induction.drill_batch(ids, rows=64, length=12, rng=np.random.default_rng(seed))
  logits, _ = model(b["tokens_NT"])
  logp = jax.nn.log_softmax(logits[:, :-1], -1)
  nll = -np.take_along_axis(np.asarray(logp), b["tokens_NT"][:, 1:, None], -1)[..., 0]
  mask = b["loss_mask_NT"][:, 1:]
  return float((nll * mask).sum() / mask.sum())


def test_a_tiny_model_learns_to_copy_and_the_drills_are_deterministic(tmp_path):
  cfg = dataclasses.replace(model_config.get_preset("quickstart"), vocab_size=40, d_model=64,
                            n_heads=4, n_kv_heads=2, head_dim=16, ffn_dim=128)
  model = make_model(cfg, seed=0)
  graphdef, params = nnx.split(model)
  params = nnx.to_pure_dict(params)
  ids = induction.ordinary_ids(_Tokenizer(), cfg.vocab_size)
  before = _drill_loss(model, ids, seed=1)
  config = _config(100)
  # One device: the drills' steps are tiny, and 8 fake devices would spend them on collectives.
  mesh = sharding.make_mesh(1, 1, 1, devices=jax.devices()[:1])
  trained, last = induction.run(config, graphdef, params, mesh, _Tokenizer(), cfg.vocab_size,
                                out_dir=str(tmp_path))
  after_model = nnx.merge(graphdef, jax.device_get(trained))  # one device, like `model`
  after = _drill_loss(after_model, ids, seed=1)
  chance = math.log(ids.size)  # the best any model does on uniform ids without copying
  assert before > chance - 0.2
  assert after < 0.5 * chance, (before, after, last)
  again, _ = induction.run(config, graphdef, params, mesh, _Tokenizer(), cfg.vocab_size)
  for a, b in zip(jax.tree.leaves(trained), jax.tree.leaves(again)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  same, metrics = induction.run(_config(0), graphdef, params, mesh, _Tokenizer(), cfg.vocab_size)
  assert same is params and metrics == {}
