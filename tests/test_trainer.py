"""The sharded update: split invariance (accumulation, devices), 8-device placement, clipping."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from arenarl_jax.rl import batch as batch_lib
from arenarl_jax import sharding, trainer as trainer_lib
from arenarl_jax.rl import losses
from arenarl_jax.rl.settings import LossSettings
from arenarl_jax.models.config import ModelConfig
from arenarl_jax.models.transformer import make_model
from arenarl_jax.sft import loss as sft_loss
from arenarl_jax.trainer import Trainer, batch_logprobs, make_optimizer, make_schedule

CFG = ModelConfig(vocab_size=61, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=8,
                  ffn_dim=32, tie_embeddings=True)
OPTIM = dict(lr=1e-3, weight_decay=0.1, b1=0.9, b2=0.98, grad_clip=1.0, schedule="constant",
             warmup_steps=0)


def _model():
  graphdef, state = nnx.split(make_model(CFG, seed=0))
  return graphdef, nnx.to_pure_dict(state)


def _batch(n=16, t=16, seed=0):
  rng = np.random.default_rng(seed)
  mask = (rng.random((n, t)) < 0.7).astype(np.float32)
  mask[:, :3] = 0.0  # a prompt
  mask[n - 1] = 0.0  # a padding row
  return {"tokens_NT": rng.integers(0, CFG.vocab_size, (n, t)).astype(np.int32),
          "loss_mask_NT": mask,
          "advantages_N": rng.normal(size=n).astype(np.float32),
          "temperature_N": np.where(np.arange(n) % 4 == 0, 1.0, 0.8).astype(np.float32),
          "sampler_logp_NT": rng.normal(-3, 0.1, (n, t)).astype(np.float32) * mask,
          "policy_step_N": np.zeros(n, np.int32)}


def _trainer(mesh, loss_cfg, accumulation=1, optim=OPTIM):
  graphdef, params = _model()
  trainer = Trainer(graphdef, params, mesh, losses.make_rl_loss(loss_cfg),
                    make_optimizer(optim, 10), accumulation_steps=accumulation, chunk=8)
  return trainer, params


def _run(mesh, loss_cfg, accumulation, steps=1, ref_shift=True):
  trainer, params = _trainer(mesh, loss_cfg, accumulation)
  state = trainer.init_state(params)
  ref = trainer.place_params(jax.tree.map(lambda x: x * 1.01, params) if ref_shift else params)
  metrics = []
  for s in range(steps):
    b = trainer.put_batch(_batch(seed=s))
    b["old_logp_NT"] = trainer.logprobs(ref, b)  # off-policy: ratios away from 1
    state, m = trainer.step(state, ref, b)
    metrics.append(jax.device_get(m))
  return state, metrics, ref


def _close(a, b, atol):
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=atol, rtol=0)


ONE = lambda: sharding.make_mesh(1, 1, 1, devices=jax.devices()[:1])  # noqa: E731


@pytest.mark.parametrize("aggregation, ratio", [
    ("seq_mean_token_mean", "token"), ("token_mean", "sequence"), ("dr_grpo", "token")])
def test_update_is_the_same_on_eight_devices_with_accumulation_as_on_one(aggregation, ratio):
  """Devices (data 4 x fsdp 2) and 2 accumulation steps against one device, one micro-batch."""
  clip = (3e-4, 4e-4) if ratio == "sequence" else (0.2, 0.28)
  cfg = LossSettings(aggregation=aggregation, ratio=ratio, kl="k3", kl_coef=0.05,
                          dr_grpo_tokens=16, clip_low=clip[0], clip_high=clip[1])
  want, want_m, _ = _run(ONE(), cfg, accumulation=1, steps=3)
  got, got_m, _ = _run(sharding.make_mesh(4, 2, 1), cfg, accumulation=2, steps=3)
  _close(got.params, want.params, 1e-5)
  for step in range(3):
    for key in ("loss", "kl", "grad_norm", "entropy", "ratio_max", "ratio_min", "clip_frac_low",
                "clip_frac_high", "logp_mismatch"):
      np.testing.assert_allclose(got_m[step][key], want_m[step][key], rtol=2e-5, atol=1e-7,
                                 err_msg=f"step {step} {key}")
  assert int(got.step) == 3 and all(np.isfinite(m["loss"]) for m in got_m)
  for leaf in jax.tree.leaves(got):
    assert len(leaf.sharding.device_set) == 8
  # fsdp splits the big kernels; AdamW's moments follow their parameters.
  kernel = got.params["layers"][0]["mlp"]["up"]["kernel"]
  assert kernel.sharding.spec == jax.sharding.PartitionSpec("fsdp", None)
  assert len({str(s.index) for s in kernel.addressable_shards}) == 2
  mu = got.opt_state[1][0].mu["layers"][0]["mlp"]["up"]["kernel"]
  assert mu.sharding.spec == kernel.sharding.spec


def test_reference_params_are_not_donated_and_minibatches_make_clipping_act():
  cfg = LossSettings(kl_coef=0.02)
  trainer, params = _trainer(ONE(), cfg, optim=dict(OPTIM, lr=3e-2))
  state = trainer.init_state(params)
  ref = trainer.place_params(params)
  rollout = _batch(n=8)
  rollout["advantages_N"] = np.where(np.arange(8) % 2, 2.0, -2.0).astype(np.float32)
  minibatches = [trainer.put_batch(mb) for mb in batch_lib.split_rows(rollout, 2)]
  for mb in minibatches:  # old log-probs of the whole rollout before its first update
    mb["old_logp_NT"] = trainer.logprobs(state.params, mb)
  clip = []
  for _ in range(3):
    for mb in minibatches:
      state, m = trainer.step(state, ref, mb)
      clip.append(float(m["clip_frac_low"] + m["clip_frac_high"]))
  assert clip[0] == 0.0  # first update: ratio 1 exactly
  assert max(clip[1:]) > 0.0
  # The reference is intact (readable, equal to the initial parameters).
  _close(ref, params, 0.0)
  # A sampler-equal batch has no log-prob mismatch at T = 1 / 0.8.
  mb = dict(minibatches[0])
  mb["sampler_logp_NT"] = mb["old_logp_NT"] * mb["loss_mask_NT"]
  _, m = trainer.step(state, ref, mb)
  assert float(m["logp_mismatch"]) < 1e-6


def test_schedule_warmup_then_decay_and_bad_names():
  sched = make_schedule(dict(OPTIM, lr=1.0, schedule="linear", warmup_steps=2), total_steps=6)
  np.testing.assert_allclose([float(sched(i)) for i in range(7)],
                             [0, 0.5, 1.0, 0.75, 0.5, 0.25, 0.0], atol=1e-6)
  with pytest.raises(ValueError, match="optim.schedule"):
    make_schedule(dict(OPTIM, schedule="step"), 5)


def test_loss_gradient_through_the_model_matches_finite_differences():
  graphdef, params = _model()
  b = {k: jnp.asarray(v) for k, v in _batch(n=4, t=12, seed=5).items()}
  ref = jax.tree.map(lambda x: x * 1.05, params)
  b["old_logp_NT"] = batch_logprobs(graphdef, ref, b, chunk=4)
  cfg = LossSettings(kl="k2", kl_coef=0.5, clip_low=0.5, clip_high=0.5)
  norm = trainer_lib.normalisers(b["loss_mask_NT"])
  loss = losses.make_rl_loss(cfg)
  reference = trainer_lib.Forward(graphdef, ref, chunk=4)
  value_and_grad = jax.jit(jax.value_and_grad(
      lambda p: loss(trainer_lib.Forward(graphdef, p, chunk=4), reference, b, norm)[0]))
  f = lambda p: value_and_grad(p)[0]  # noqa: E731  (one compiled program for both)
  g = value_and_grad(params)[1]
  leaves = jax.tree.leaves(params)
  keys = jax.random.split(jax.random.key(0), len(leaves))
  d = jax.tree.unflatten(jax.tree.structure(params), [
      jax.random.normal(k, x.shape) * jnp.sqrt(jnp.mean(x * x)) for k, x in zip(keys, leaves)])
  eps = 3e-3
  fd = (f(jax.tree.map(lambda x, y: x + eps * y, params, d)) -
        f(jax.tree.map(lambda x, y: x - eps * y, params, d))) / (2 * eps)
  analytic = sum(jnp.vdot(a, b) for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(d)))
  assert abs(float(analytic)) > 1e-3
  np.testing.assert_allclose(float(fd), float(analytic), rtol=2e-2)


def test_an_sft_batch_cut_after_its_last_trained_token_makes_the_same_update():
  """data/pipeline.trained_width: the trailing padding of SFT rows changes neither the loss nor
  the update (causal attention: no trained position sees it)."""
  from arenarl_jax.data import pipeline  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(3)
  n, t = 4, 32
  mask = np.zeros((n, t), np.float32)
  for r, end in enumerate((9, 17, 5, 12)):  # rows of different lengths, then padding
    mask[r, 2:end] = 1.0
  batch = {"tokens_NT": np.where(mask.any(0, keepdims=True) | (np.arange(t) < 17),
                                 rng.integers(0, CFG.vocab_size, (n, t)), 0).astype(np.int32),
           "loss_mask_NT": mask, "temperature_N": np.ones((n,), np.float32)}
  width = pipeline.trained_width(mask, 8)
  assert width == 24  # the last trained token is at index 16 -> 17 -> up to a multiple of 8
  cut = {k: v[:, :width] if v.ndim == 2 else v for k, v in batch.items()}
  out = []
  for b in (batch, cut):
    graphdef, params = _model()
    trainer = Trainer(graphdef, params, ONE(), sft_loss.make_sft_loss(),
                      make_optimizer(OPTIM, 10), chunk=8)
    state, m = trainer.step(trainer.init_state(params), None, trainer.put_batch(b))
    out.append((jax.device_get(state.params), float(m["loss"])))
  assert out[0][1] == pytest.approx(out[1][1], rel=1e-6)
  _close(out[0][0], out[1][0], 1e-6)


def test_the_trainer_runs_any_loss_and_reads_a_reference_only_for_a_loss_that_asks():
  """A loss the trainer has never seen (SFT's NLL through the unfused log-probs, with a _max
  metric), over 2 micro-batches and no reference, makes SFT's update."""
  references = []

  def unfused_nll(policy, reference, batch, norm):
    references.append(reference)
    logp_NT = policy.logprobs(batch)
    tok_NT = batch["loss_mask_NT"] / norm["tokens"]
    loss = -jnp.sum(tok_NT * logp_NT)
    return loss, {"loss_sum": loss, "logp_max": jnp.max(jnp.where(tok_NT > 0, logp_NT, -9.0))}

  b = {k: v for k, v in _batch(n=8).items() if k in ("tokens_NT", "loss_mask_NT", "temperature_N")}
  out = []
  for loss, accumulation in ((trainer_lib.Loss("nll", unfused_nll), 2),
                             (sft_loss.make_sft_loss(), 1)):
    graphdef, params = _model()
    trainer = Trainer(graphdef, params, ONE(), loss, make_optimizer(OPTIM, 10), chunk=8,
                      accumulation_steps=accumulation)
    state, m = trainer.step(trainer.init_state(params), None, trainer.put_batch(b))
    out.append((jax.device_get(state.params), jax.device_get(m)))
  assert references and all(r is None for r in references)
  (got, got_m), (want, want_m) = out
  assert set(got_m) == {"loss", "logp_max", "grad_norm", "update_norm", "tokens"}
  for key in ("loss", "grad_norm", "update_norm", "tokens"):
    np.testing.assert_allclose(got_m[key], want_m[key], rtol=1e-5, err_msg=key)
  assert float(got_m["logp_max"]) < 0.0
  _close(got, want, 1e-6)
