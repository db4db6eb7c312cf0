"""The sampler on 8 fake CPU devices: rows spread over 'data', same output as one device."""
import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from arenarl_jax import sharding
from arenarl_jax.models.config import PRESETS
from arenarl_jax.models.transformer import make_model
from arenarl_jax.sampling.sampler import Sampler, SamplingSettings

PROMPTS = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14], [15]]
OBSERVATIONS = [[20 + i] * (i % 3) for i in range(16)]
SETTINGS = SamplingSettings(temperature=1.0, top_k=50, max_new_tokens=6)


def peaked_tiny():
  model = make_model(PRESETS["tiny"], seed=5)
  model.embed[...] = model.embed[...] * 50.0  # peaked logits: no float-order argmax ties
  return model


def rollout(sampler):
  out1, state = sampler.sample(PROMPTS, group_size=4, settings=SETTINGS, key=jax.random.key(0))
  state = sampler.extend(state, OBSERVATIONS)
  out2, state = sampler.decode(state, SETTINGS, jax.random.key(1))
  return out1, out2, state


@pytest.fixture(scope="module")
def single_device():
  return rollout(Sampler(peaked_tiny(), cache_len=32))


@pytest.mark.parametrize("axes", [dict(data=8), dict(data=2, fsdp=2, tensor=2)])
def test_sharded_rollout_equals_one_device_and_spreads_rows(axes, single_device):
  mesh = sharding.make_mesh(**axes)
  model = peaked_tiny()
  if axes != dict(data=8):
    sharding.shard_params(model, mesh)
  got = rollout(Sampler(model, cache_len=32, mesh=mesh))
  for want_out, got_out in zip(single_device[:2], got[:2]):
    np.testing.assert_array_equal(got_out.tokens_NT, want_out.tokens_NT)
    np.testing.assert_array_equal(got_out.lengths_N, want_out.lengths_N)
    np.testing.assert_allclose(got_out.logp_NT, want_out.logp_NT, atol=1e-4, rtol=0)
  out2, state = got[1], got[2]
  for array in (out2.tokens_NT, out2.logp_NT, state.lengths_N, state.cache.k[0], state.hidden_ND):
    assert array.sharding.device_set == set(jax.devices())
    assert array.sharding.spec[0] == "data"
  # Each device holds only its own rows (16 rows / data axis).
  assert out2.tokens_NT.addressable_shards[0].data.shape[0] == 16 // axes["data"]


def test_rows_that_do_not_split_are_padded_with_done_rows(single_device):
  # 3 prompts x 4 = 12 rows on a data axis of 8: one more prompt's 4 rows, done from the start.
  sampler = Sampler(peaked_tiny(), cache_len=32, mesh=sharding.make_mesh(data=8))
  state = sampler.prefill(PROMPTS[:3], group_size=4)
  assert state.lengths_N.shape == (16,) and sampler.row_multiple == 8
  np.testing.assert_array_equal(np.asarray(state.done_N), np.arange(16) >= 12)
  out, state = sampler.decode(state, SETTINGS, jax.random.key(0), rows=SETTINGS.rows(12, 4))
  want = single_device[0]  # the same first 12 rows, sampled with 16 real rows on one device
  np.testing.assert_array_equal(np.asarray(out.tokens_NT)[:12], np.asarray(want.tokens_NT)[:12])
  np.testing.assert_array_equal(np.asarray(out.lengths_N)[12:], 0)  # padding samples nothing
  with pytest.raises(ValueError, match="row settings for 4 rows, the state has 16"):
    sampler.decode(state, SETTINGS, jax.random.key(0), rows=SETTINGS.rows(4, 4))
