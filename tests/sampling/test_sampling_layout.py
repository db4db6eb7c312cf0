"""The policy's sampler in its sampling layout (8 fake CPU devices): the training parameters move
there by one jitted resharding, each device holds its tensor slice only, and sampling on the mesh
gives the single-device run's greedy tokens and log-probs."""
import dataclasses

import jax
import numpy as np
import pytest
from flax import nnx

from arenarl_jax import sharding
from arenarl_jax.models.config import PRESETS
from arenarl_jax.models.transformer import make_model
from arenarl_jax.rollout.agent_loop import CompileCounter
from arenarl_jax.rollout.settings import PolicySamplingSettings
from arenarl_jax.sampling import layout as layout_lib
from arenarl_jax.sampling import policy_sampler
from arenarl_jax.sampling.sampler import Sampler, SamplingSettings

# Heads and KV heads divide the tensor axis (2), the vocabulary and the MLP too.
CFG = dataclasses.replace(PRESETS["tiny"], vocab_size=512)
PROMPTS = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]]  # 3 prompts x 2 = 6 rows: padded to 8
GREEDY = SamplingSettings(temperature=0.0, max_new_tokens=6)
TRAIN_MESH = dict(data=2, fsdp=2, tensor=2)


def make_sampler(model, **mesh):
  return policy_sampler.make_sampler(PolicySamplingSettings(cache_len=32), model,
                                     sharding.make_mesh(**mesh))


@pytest.fixture(scope="module")
def model():
  m = make_model(CFG, seed=3)
  m.embed[...] = m.embed[...] * 50.0  # peaked logits: no float-order argmax ties
  return m


@pytest.fixture(scope="module")
def train_params(model):
  """The parameters as the train state holds them: on the training mesh, by the rules."""
  params = nnx.to_pure_dict(nnx.state(model))
  return sharding.shard_params(params, sharding.make_mesh(**TRAIN_MESH))


@pytest.fixture(scope="module")
def single_device(model):
  state = nnx.to_pure_dict(nnx.state(model))
  sampler = Sampler(model, cache_len=32)
  sampler.set_params(nnx.State(jax.device_put(state, jax.devices()[0])))
  out, state = sampler.sample(PROMPTS, group_size=2, settings=GREEDY, key=jax.random.key(0))
  state = sampler.extend(state, [[20 + i] * (i % 3) for i in range(6)])
  out2, _ = sampler.decode(state, GREEDY, jax.random.key(1))
  return jax.device_get((out, out2))


def test_the_sampling_mesh_is_each_hosts_devices_with_the_same_tensor_groups():
  train = sharding.make_mesh(**TRAIN_MESH)
  mesh = layout_lib.sampling_mesh(train)
  assert dict(mesh.shape) == {"data": 4, "fsdp": 1, "tensor": 2}
  # A device keeps its tensor index: the move needs no data across the tensor axis.
  tensor_of = lambda m: {d: i for i, col in enumerate(np.moveaxis(m.devices, -1, 0))
                         for d in col.flat}
  assert tensor_of(mesh) == tensor_of(train)


def test_parameters_move_by_one_program_and_each_device_holds_its_tensor_slice(train_params):
  sampler = make_sampler(make_model(CFG, seed=3), **TRAIN_MESH)
  with CompileCounter() as compiles:
    sampler.set_policy(train_params)
    sampler.set_policy(train_params)  # every later RL step: nothing new to compile
  assert compiles.count <= 1
  leaves = jax.tree_util.tree_leaves_with_path(nnx.to_pure_dict(sampler.params))
  is_split = lambda x: any(axis is not None for axis in x.sharding.spec)
  split = sum(x.nbytes for _, x in leaves if is_split(x))
  replicated = sum(x.nbytes for _, x in leaves if not is_split(x))
  assert replicated < 0.05 * split  # norms only
  for device in jax.devices():
    held = sum(s.data.nbytes for _, x in leaves for s in x.addressable_shards
               if s.device == device)
    assert held == split // 2 + replicated  # the tensor axis is 2: half of every matrix
  for path, x in leaves:
    assert x.sharding.mesh == sampler.mesh and "fsdp" not in str(x.sharding.spec), path
    np.testing.assert_array_equal(np.asarray(x), np.asarray(
        _at(train_params, [k.key for k in path])))


def _at(tree, keys):
  for k in keys:
    tree = tree[k]
  return tree


@pytest.mark.parametrize("mesh", [TRAIN_MESH, dict(data=8, fsdp=1, tensor=1),
                                  dict(data=1, fsdp=1, tensor=8)])
def test_sampling_in_the_mesh_equals_one_device(mesh, model, train_params, single_device):
  sampler = make_sampler(model, **mesh)
  params = train_params if mesh == TRAIN_MESH else nnx.to_pure_dict(nnx.state(model))
  sampler.set_policy(params)
  out, state = sampler.sample(PROMPTS, group_size=2, settings=GREEDY, key=jax.random.key(0))
  n = state.lengths_N.shape[0]
  assert n % sampler.row_multiple == 0 and n >= 6
  state = sampler.extend(state, [[20 + i] * (i % 3) for i in range(6)] + [[]] * (n - 6))
  out2, state = sampler.decode(state, GREEDY, jax.random.key(1))
  for want, got in zip(single_device, (out, out2)):
    np.testing.assert_array_equal(np.asarray(got.tokens_NT)[:6], want.tokens_NT)
    np.testing.assert_allclose(np.asarray(got.logp_NT)[:6], want.logp_NT, atol=1e-5, rtol=0)
  if mesh == TRAIN_MESH:  # a second rollout, other prompt lengths: nothing new to compile
    with CompileCounter() as compiles:
      sampler.sample([p[:2] for p in PROMPTS], group_size=2, settings=GREEDY,
                     key=jax.random.key(2))
    assert compiles.count == 0
  k = state.cache.k[0]  # [N, K, F, S]: rows over 'data', KV heads over 'tensor'
  heads_split = mesh["tensor"] > 1 and CFG.n_kv_heads % mesh["tensor"] == 0
  want = ("data" if mesh["data"] > 1 else None, "tensor" if heads_split else None)
  assert (tuple(k.sharding.spec) + (None, None))[:2] == want


def test_prompt_buckets_are_checked_and_default_to_powers_of_two():
  s = PolicySamplingSettings(cache_len=256)
  assert policy_sampler.prompt_buckets(s) == (16, 32, 64, 128, 256)
  s = PolicySamplingSettings(cache_len=256, prompt_buckets=[64, 192])  # a list as a config gives
  assert policy_sampler.prompt_buckets(s) == (64, 192) and hash(s)
  for bad, match in (((192, 64), "ascending"), ((0, 64), "positive"), ((64, 512), "longer than")):
    with pytest.raises(ValueError, match=match):
      policy_sampler.prompt_buckets(PolicySamplingSettings(cache_len=256, prompt_buckets=bad))


def test_a_bfloat16_model_samples_from_a_bfloat16_copy_with_the_same_tokens(model):
  """Under bfloat16 compute the sampler's copy is bfloat16 (half the bytes) and samples exactly
  what the float32 masters give, since every weight is cast to bfloat16 at use either way."""
  half_cfg = dataclasses.replace(CFG, compute_dtype="bfloat16")
  half = make_model(half_cfg, seed=3)
  nnx.update(half, nnx.state(model))  # the same float32 masters
  assert policy_sampler.sampling_dtype(half_cfg) == np.dtype("bfloat16")
  assert policy_sampler.sampling_dtype(CFG) is None
  sampler = make_sampler(half, **TRAIN_MESH)
  leaves = jax.tree.leaves(nnx.to_pure_dict(sampler.params))
  assert {str(x.dtype) for x in leaves} == {"bfloat16"}
  sampler.set_policy(nnx.to_pure_dict(nnx.state(half)))
  assert {str(x.dtype) for x in jax.tree.leaves(nnx.to_pure_dict(sampler.params))} == {"bfloat16"}
  out, _ = sampler.sample(PROMPTS, group_size=2, settings=GREEDY, key=jax.random.key(0))
  masters = Sampler(half, cache_len=32)
  want, _ = masters.sample(PROMPTS, group_size=2, settings=GREEDY, key=jax.random.key(0))
  np.testing.assert_array_equal(np.asarray(out.tokens_NT)[:6], np.asarray(want.tokens_NT)[:6])
  np.testing.assert_allclose(np.asarray(out.logp_NT)[:6], np.asarray(want.logp_NT)[:6],
                             atol=2e-2, rtol=0)
