"""Mesh construction and parameter partition rules (8 fake CPU devices from conftest)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from arenarl_jax import sharding
from arenarl_jax.models.config import PRESETS
from arenarl_jax.models.transformer import make_model


def test_make_mesh_fills_one_axis_and_rejects_bad_sizes():
  assert len(jax.devices()) == 8
  assert dict(sharding.make_mesh().shape) == {"data": 8, "fsdp": 1, "tensor": 1}
  assert dict(sharding.make_mesh(data=2, fsdp=-1, tensor=2).shape) == {
      "data": 2, "fsdp": 2, "tensor": 2}
  assert dict(sharding.make_mesh(4, devices=jax.devices()[:4]).shape)["data"] == 4
  with pytest.raises(ValueError, match="do not fit 8 devices"):
    sharding.make_mesh(data=3)
  with pytest.raises(ValueError, match="use 4 devices, but 8 are given"):
    sharding.make_mesh(data=2, fsdp=2)
  with pytest.raises(ValueError, match="at most one axis size may be -1"):
    sharding.make_mesh(data=-1, fsdp=-1)


def test_partition_rules_by_parameter_path():
  mesh = sharding.make_mesh(data=2, fsdp=2, tensor=2)
  specs = {sharding.path_str(p): s.spec for p, s in jax.tree_util.tree_leaves_with_path(
      sharding.param_shardings(nnx.state(make_model(PRESETS["tiny"])), mesh))}
  assert specs["embed"] == P("tensor", "fsdp")
  assert specs["layers/1/attn/q/kernel"] == P("fsdp", "tensor")
  assert specs["layers/1/attn/o/kernel"] == P("tensor", "fsdp")
  assert specs["layers/0/mlp/up/kernel"] == P("fsdp", "tensor")
  assert specs["layers/0/mlp/down/kernel"] == P("tensor", "fsdp")
  assert specs["layers/0/attn_norm/scale"] == P(None)
  assert specs["final_norm/scale"] == P(None)


def test_axes_that_do_not_divide_a_dim_are_dropped_and_unknown_axes_fail():
  mesh = sharding.make_mesh(data=2, fsdp=2, tensor=2)
  assert sharding.spec_for("layers/0/attn/q/kernel", (6, 3), mesh) == P("fsdp", None)
  assert sharding.spec_for("embed", (7, 5), mesh) == P(None, None)
  with pytest.raises(ValueError, match="names axis 'model'"):
    sharding.spec_for("w", (4,), mesh, rules=((r".*", P("model")),))
  with pytest.raises(ValueError, match="no partition rule matches parameter 'w'"):
    sharding.spec_for("w", (4,), mesh, rules=((r"^x$", P()),))


def test_sharded_model_computes_the_same_logits():
  model = make_model(PRESETS["tiny"], seed=1)
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, 1000, (8, 12)), jnp.int32)
  graphdef, state = nnx.split(model)
  forward = jax.jit(lambda state, tokens: nnx.merge(graphdef, state)(tokens)[0])
  want = np.asarray(forward(state, tokens))
  mesh = sharding.make_mesh(data=2, fsdp=2, tensor=2)
  sharding.shard_params(model, mesh)
  kernel = model.layers[0].mlp.gate.kernel[...]
  assert kernel.sharding.spec == P("fsdp", "tensor")
  assert len(kernel.addressable_shards) == 8 and kernel.addressable_shards[0].data.shape == (32, 64)
  rows = jax.device_put(tokens, sharding.rows_sharding(mesh))
  got = forward(nnx.state(model), rows)
  np.testing.assert_allclose(np.asarray(got), want, atol=1e-4, rtol=0)
