"""Low-rank adapter SFT (sft/adapter.py): it starts at the base, its gradient is the chain rule
of the full model's, and the SFT stage trains only a rank-r update, which it restores."""
import dataclasses
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from arenarl_jax import pipeline, sharding, trainer
from arenarl_jax.envs import base as envs
from arenarl_jax.models import config as model_config
from arenarl_jax.models.transformer import make_model
from arenarl_jax.sft import adapter, delta, loss as sft_loss, stage

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "configs"))
import quickstart  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position


def _tiny():
  cfg = dataclasses.replace(model_config.get_preset("tiny"), vocab_size=64, n_layers=1)
  graphdef, state = nnx.split(make_model(cfg, seed=0))
  return graphdef, nnx.to_pure_dict(state)


def test_init_starts_at_the_base_and_adapts_the_blocks_only():
  _, params = _tiny()
  flat = delta.flat_params(params)
  tensors = adapter.init(flat, rank=3, seed=0)
  assert not any(k.startswith("embed") for k in tensors)  # the tied embedding stays frozen
  q = "layers.0.attn.q.kernel"
  assert tensors[q + delta.A].shape == (flat[q].shape[0], 3)
  assert tensors[q + delta.B].shape == (3, flat[q].shape[1]) and not tensors[q + delta.B].any()
  assert "final_norm.scale" + delta.FULL in tensors
  # Rows of ``a`` have norm about 1 (N(0, 1/r)).
  assert 0.5 < float(np.mean(np.linalg.norm(tensors[q + delta.A], axis=1))) < 1.5
  lifted = delta.lift(flat, tensors)
  for k in flat:
    np.testing.assert_array_equal(np.asarray(lifted[k]), np.asarray(flat[k]), err_msg=k)
  with pytest.raises(ValueError, match="adapter_rank must be >= 1"):
    adapter.init(flat, rank=0, seed=0)
  with pytest.raises(ValueError, match="reads a reference"):
    adapter.make_loss(trainer.Loss("rl", lambda *a: None, uses_reference=True))


def test_the_adapter_gradient_is_the_chain_rule_of_the_full_one():
  graphdef, params = _tiny()
  flat = delta.flat_params(params)
  tensors = {k: jnp.asarray(v) for k, v in adapter.init(flat, rank=3, seed=1).items()}
  rng = np.random.default_rng(0)
  batch = {"tokens_NT": jnp.asarray(rng.integers(0, 64, (2, 12)), jnp.int32),
           "loss_mask_NT": jnp.asarray(np.r_[[0] * 4, [1] * 8][None].repeat(2, 0), jnp.int32),
           "temperature_N": jnp.ones((2,), jnp.float32)}
  norm = trainer.normalisers(batch["loss_mask_NT"].astype(jnp.float32))
  inner = sft_loss.make_sft_loss()
  wrapped = adapter.make_loss(inner)

  def full_loss(p):
    return inner(trainer.Forward(graphdef, p, 4), None, batch, norm)[0]

  def adapter_loss(t):
    return wrapped(trainer.Forward(graphdef, t, 4), trainer.Forward(graphdef, params, 4), batch,
                   norm)[0]

  np.testing.assert_allclose(float(adapter_loss(tensors)), float(full_loss(params)), rtol=1e-6)
  g_full = delta.flat_params(jax.grad(full_loss)(params))
  g = jax.grad(adapter_loss)(tensors)
  for name in ("layers.0.attn.q.kernel", "layers.0.mlp.down.kernel"):
    # W' = W + a @ b at b = 0: dL/da = dL/dW @ b^T = 0 and dL/db = a^T @ dL/dW.
    np.testing.assert_allclose(np.asarray(g[name + delta.A]), 0.0, atol=1e-7)
    np.testing.assert_allclose(np.asarray(g[name + delta.B]),
                               np.asarray(tensors[name + delta.A]).T @ np.asarray(g_full[name]),
                               rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(np.asarray(g["final_norm.scale" + delta.FULL]),
                             np.asarray(g_full["final_norm.scale"]), rtol=1e-5, atol=1e-7)


def test_adapter_sft_trains_a_low_rank_update_and_restores_it(dataset_dir, tmp_path):
  config = quickstart.get_config("smoke")
  with config.unlocked():
    config.data.dir = dataset_dir
    config.sft.steps = 2
    config.sft.adapter_rank = 2
    config.data.sft_seq_len = config.data.sft_bucket = config.sft.first_turn_seq_len = 256
    config.data.sft_batch_size = config.sft.first_turn_rows = 2
  mesh = sharding.make_mesh(1, 1, 1, devices=jax.devices()[:1])
  env = envs.make_environment_from_config(config.env)
  policy = pipeline.make_policy(config, str(tmp_path), env, mesh)
  base = delta.flat_params(jax.device_get(nnx.to_pure_dict(nnx.state(policy.model))))
  settings = pipeline.sft_settings(config)
  params, last = stage.run(settings, str(tmp_path), policy, env, mesh=mesh,
                           data_path=pipeline.dataset_path(config), schemas=config.env.schemas)
  assert np.isfinite(last["loss"])
  tuned = delta.flat_params(jax.device_get(params))
  np.testing.assert_array_equal(tuned["embed"], base["embed"])
  moved = 0
  for name, w in tuned.items():
    d = np.asarray(w, np.float64) - np.asarray(base[name], np.float64)
    if d.ndim == 2 and name.startswith("layers."):
      s = np.linalg.svd(d, compute_uv=False)
      assert s[2:].max(initial=0.0) <= 1e-5 * max(s[0], 1e-12), name  # rank <= 2
      moved += s[0] > 0
  assert moved > 0
  again = delta.flat_params(jax.device_get(stage.restore_params(settings, str(tmp_path), policy,
                                                                mesh)))
  for name, w in tuned.items():
    np.testing.assert_array_equal(np.asarray(again[name]), np.asarray(w), err_msg=name)
