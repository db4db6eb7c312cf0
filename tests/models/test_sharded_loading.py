"""Sharding wired into loading: each parameter lands in its partition rule's NamedSharding (8 fake
CPU devices), the sampler's outputs with the mesh equal one device's, and the Qwen3-8B preset gets
valid shardings from its abstract shapes alone."""
from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from arenarl_jax import sharding
from arenarl_jax.models import loading, param_cache
from arenarl_jax.models.config import PRESETS
from arenarl_jax.models.safetensors_io import export_hf_dir
from arenarl_jax.models.transformer import make_model
from arenarl_jax.sampling.sampler import Sampler, SamplingSettings

# Untied head and q/k/v biases: every rule of sharding.DEFAULT_RULES has a parameter.
TINY = dataclasses.replace(PRESETS["tiny"], family="qwen2", qkv_bias=True,
                           tie_embeddings=False, vocab_size=1024)


@pytest.fixture(scope="module")
def mesh():
  return sharding.make_mesh(data=2, fsdp=2, tensor=2)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
  """(peaked tiny model on one device, its HF checkpoint directory)."""
  model = make_model(TINY, seed=7)
  model.embed[...] = model.embed[...] * 50.0  # peaked logits: no float-order argmax ties
  path = str(tmp_path_factory.mktemp("tiny_hf"))
  export_hf_dir(model, TINY, path)
  return model, path


def _assert_placed_by_rules(model, want_model, mesh):
  flat = list(nnx.to_flat_state(nnx.state(model)))
  want = dict(nnx.to_flat_state(nnx.state(want_model)))
  assert len(flat) == len(want) > 10
  specs = set()
  for path, var in flat:
    array = var.get_value()
    rule = sharding.sharding_for(path, array.shape, mesh)
    assert array.sharding.is_equivalent_to(rule, array.ndim), (path, array.sharding, rule)
    assert array.sharding.mesh == mesh
    np.testing.assert_array_equal(np.asarray(array), np.asarray(want[path].get_value()))
    specs.add(rule.spec)
  assert {P("fsdp", "tensor"), P("tensor", "fsdp")} <= specs  # not everything replicated


def test_hf_dir_loads_each_parameter_into_its_rule_sharding(reference, mesh):
  want, path = reference
  cfg, model = loading.load_model(path, mesh=mesh)
  assert cfg == TINY
  _assert_placed_by_rules(model, want, mesh)
  # Each device holds a quarter of a (fsdp, tensor)-split kernel, not the whole matrix.
  q = model.layers[0].attn.q.kernel[...]
  assert q.addressable_shards[0].data.shape == (q.shape[0] // 2, q.shape[1] // 2)


def test_param_cache_restores_into_rule_shardings(reference, mesh, tmp_path):
  want, _ = reference
  folder = str(tmp_path / "cache")
  param_cache.save(folder, TINY, want)
  _, model = param_cache.restore(folder, mesh=mesh)
  _assert_placed_by_rules(model, want, mesh)


def test_sampler_with_mesh_equals_one_device(reference, mesh):
  want_model, path = reference
  _, model = loading.load_model(path, mesh=mesh)
  prompts = [[5, 6, 7, 8], [9, 10]]
  settings = SamplingSettings(temperature=1.0, top_k=20, max_new_tokens=4)
  key = jax.random.key(3)
  want, _ = Sampler(want_model, cache_len=32).sample(prompts, group_size=4, settings=settings,
                                                     key=key)
  got, _ = Sampler(model, cache_len=32, mesh=mesh).sample(prompts, group_size=4,
                                                          settings=settings, key=key)
  np.testing.assert_array_equal(got.tokens_NT, want.tokens_NT)
  np.testing.assert_array_equal(got.lengths_N, want.lengths_N)
  np.testing.assert_allclose(got.logp_NT, want.logp_NT, atol=1e-4, rtol=0)
  assert got.tokens_NT.sharding.spec[0] == "data"


def test_qwen3_8b_abstract_init_gets_valid_shardings_without_weights(mesh):
  cfg = PRESETS["qwen3_8b"]
  model = loading.abstract_sharded_model(cfg, mesh)
  flat = list(nnx.to_flat_state(nnx.state(model)))
  assert len(flat) == 2 + cfg.n_layers * 11 + 1  # embed, final norm, head + 11 per layer
  total = 0
  for path, var in flat:
    leaf = var.get_value()
    assert isinstance(leaf, jax.ShapeDtypeStruct), path  # shapes only: nothing allocated
    spec = leaf.sharding.spec
    for dim, axes in zip(leaf.shape, tuple(spec) + (None,) * (len(leaf.shape) - len(spec))):
      names = () if axes is None else (axes if isinstance(axes, tuple) else (axes,))
      assert dim % int(np.prod([mesh.shape[n] for n in names])) == 0, (path, leaf.shape, spec)
    total += int(np.prod(leaf.shape))
  assert total == cfg.num_params()
  q = model.layers[0].attn.q.kernel.get_value()
  assert q.sharding.spec == P("fsdp", "tensor") and q.shape == (4096, 4096)
  # Shard shape on one device: 1/4 of the kernel (fsdp x tensor), replicated over data.
  assert q.sharding.shard_shape(q.shape) == (2048, 2048)
  assert model.lm_head.kernel.get_value().sharding.spec == P("fsdp", "tensor")
  assert model.embed.get_value().sharding.spec == P("tensor", "fsdp")
