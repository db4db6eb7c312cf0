"""Loading an HF checkpoint onto a mesh reads only the blocks this process's devices hold: on 8
fake CPU devices (one process holds every block) the loaded model equals the one loaded whole,
each parameter has its rule's sharding and exactly the parameter bytes are read, each distinct
block once however many devices replicate it; the errors are those of a whole load; two
processes joined by jax.distributed each read about half (tests/models/host_slices_run.py); the
policy loaded into a run's mesh goes straight into the trainer."""
import dataclasses
import json
import os
import re
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest
from flax import nnx
from safetensors.numpy import load_file, save_file

from arenarl_jax import config_tree
from arenarl_jax import sharding
from arenarl_jax.models import loading
from arenarl_jax.models import safetensors_io as st
from arenarl_jax.models.config import ModelConfig
from arenarl_jax.models.transformer import make_model
from arenarl_jax.rl import loop
from arenarl_jax import pipeline
from arenarl_jax.testing import xla_flags

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# Untied head and q/k/v biases (every partition rule has a parameter); q/o kernels not square
# (n_heads * head_dim != d_model), so a swapped kernel index cannot go unnoticed.
CFG = ModelConfig(family="qwen2", vocab_size=384, d_model=32, n_layers=2, n_heads=4,
                  n_kv_heads=2, head_dim=16, ffn_dim=64, qkv_bias=True, tie_embeddings=False)
MESHES = {"2x2x2": dict(data=2, fsdp=2, tensor=2), "1x4x2": dict(data=1, fsdp=4, tensor=2),
          "8x1x1": dict(data=8, fsdp=1, tensor=1)}


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
  """(the model loaded whole on one device, its HF checkpoint directory)."""
  path = str(tmp_path_factory.mktemp("host_slices_hf"))
  st.export_hf_dir(make_model(CFG, seed=5), CFG, path)
  return st.load_hf_dir(path)[1], path


def param_bytes(path: str) -> int:
  return sum(x.nbytes for x in load_file(os.path.join(path, "model.safetensors")).values())


@pytest.mark.parametrize("axes", sorted(MESHES))
def test_mesh_load_equals_whole_load_and_reads_each_block_once(ckpt, axes):
  want, path = ckpt
  mesh = sharding.make_mesh(**MESHES[axes])
  store = st.open_safetensors_dir(path)
  model = st.model_from_tensors(CFG, store, mesh=mesh)
  flat = list(nnx.to_flat_state(nnx.state(model)))
  ref = dict(nnx.to_flat_state(nnx.state(want)))
  assert len(flat) == len(ref) == 3 + CFG.n_layers * 12
  for name, var in flat:
    array = var.get_value()
    assert array.sharding == sharding.sharding_for(name, array.shape, mesh), name
    np.testing.assert_array_equal(np.asarray(array), np.asarray(ref[name].get_value()))
  # One process holds every block: the parameter bytes, once (8x1x1 replicates all 8 times).
  assert store.bytes_read == param_bytes(path) == 4 * CFG.num_params()


def test_without_a_mesh_every_tensor_is_read_whole_once(ckpt):
  _, path = ckpt
  store = st.open_safetensors_dir(path)
  st.model_from_tensors(CFG, store)
  assert store.bytes_read == param_bytes(path)


def test_keep_layers_reads_only_the_kept_blocks(ckpt):
  """``model.keep_layers``: the cut blocks' tensors are never read; the kept ones equal the
  whole load's."""
  want, path = ckpt
  kept = st.keep_config(CFG, 1)
  cut_bytes = sum(x.nbytes for n, x in load_file(os.path.join(path, "model.safetensors")).items()
                  if n.startswith("model.layers.1."))
  for mesh in (None, sharding.make_mesh(data=2, fsdp=2, tensor=2)):
    store = st.open_safetensors_dir(path)
    model = st.model_from_tensors(kept, store, mesh=mesh, stored_layers=CFG.n_layers)
    assert 0 < cut_bytes and store.bytes_read == param_bytes(path) - cut_bytes
    got, ref = nnx.to_pure_dict(nnx.state(model)), nnx.to_pure_dict(nnx.state(want))
    assert sorted(got["layers"]) == [0]
    for a, b in zip(jax.tree.leaves(got["layers"][0]), jax.tree.leaves(ref["layers"][0])):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  cfg, model = loading.load_model(path, keep_layers=1)
  assert cfg.n_layers == 1 and sorted(nnx.to_pure_dict(nnx.state(model))["layers"]) == [0]
  with pytest.raises(ValueError, match="model.keep_layers=3: the model has 2 layers"):
    loading.load_model(path, keep_layers=3)
  # Without the stored count a checkpoint's extra block is an error, as before.
  with pytest.raises(ValueError, match="model.layers.1"):
    st.model_from_tensors(kept, st.open_safetensors_dir(path))


def test_bfloat16_blocks_are_converted_to_the_param_dtype(ckpt, tmp_path):
  _, path = ckpt
  _, half = st.load_hf_dir(path, dtype="bfloat16")
  st.export_hf_dir(half, dataclasses.replace(CFG, param_dtype="bfloat16"), str(tmp_path))
  store = st.open_safetensors_dir(str(tmp_path))
  got = st.model_from_tensors(CFG, store, mesh=sharding.make_mesh(data=2, fsdp=2, tensor=2))
  assert store.bytes_read == 2 * CFG.num_params()  # read as stored: 2 bytes a parameter
  _, want = st.load_hf_dir(str(tmp_path))
  for (name, a), (_, b) in zip(nnx.to_flat_state(nnx.state(got)),
                               nnx.to_flat_state(nnx.state(want))):
    assert a.get_value().dtype == np.float32, name
    np.testing.assert_array_equal(np.asarray(a.get_value()), np.asarray(b.get_value()))


def test_a_kernel_block_is_the_transposed_stored_block(ckpt):
  _, path = ckpt
  mesh = sharding.make_mesh(data=1, fsdp=4, tensor=2)
  _, model = loading.load_model(path, mesh=mesh)
  q = model.layers[1].attn.q.kernel[...]  # [D, H*F] over (fsdp, tensor)
  stored = load_file(os.path.join(path, "model.safetensors"))
  stored = stored["model.layers.1.self_attn.q_proj.weight"]  # [H*F, D]
  shard = q.addressable_shards[5]
  assert shard.data.shape == (CFG.d_model // 4, CFG.n_heads * CFG.head_dim // 2)
  rows, cols = shard.index
  np.testing.assert_array_equal(np.asarray(shard.data), stored[cols, rows].T)


@pytest.fixture
def edited(ckpt, tmp_path):
  """A copy of the checkpoint with ``fn`` applied to its tensors."""
  _, path = ckpt

  def edit(fn):
    tensors = load_file(os.path.join(path, "model.safetensors"))
    fn(tensors)
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(path, "config.json")) as src, open(tmp_path / "config.json", "w") as dst:
      dst.write(src.read())
    return str(tmp_path)

  return edit


def _shrink(t):
  t["model.layers.0.self_attn.k_proj.weight"] = t["model.layers.0.self_attn.k_proj.weight"][:-1]


def _to_int(t):
  t["model.layers.1.mlp.up_proj.weight"] = t["model.layers.1.mlp.up_proj.weight"].astype(np.int32)


@pytest.mark.parametrize("fn, error, message", [
    (lambda t: t.pop("model.layers.1.mlp.up_proj.weight"), KeyError,
     "missing tensor 'model.layers.1.mlp.up_proj.weight'"),
    (_shrink, ValueError,
     "tensor 'model.layers.0.self_attn.k_proj.weight' has shape (31, 32), expected (32, 32)"),
    (_to_int, ValueError, "tensor 'model.layers.1.mlp.up_proj.weight' has non-float dtype int32"),
    (lambda t: t.update({"model.layers.0.mlp.extra.weight": np.ones(4, np.float32)}), ValueError,
     "'model.layers.0.mlp.extra.weight' has no place"),
], ids=["missing", "shape", "dtype", "unused"])
def test_errors_on_a_mesh_are_those_of_the_whole_load(edited, fn, error, message):
  path = edited(fn)
  for mesh in (None, sharding.make_mesh(data=2, fsdp=2, tensor=2)):
    with pytest.raises(error, match=re.escape(message)):
      st.load_hf_dir(path, mesh=mesh)


def test_two_processes_each_read_their_half(ckpt, tmp_path):
  _, path = ckpt
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  env = dict(os.environ, PYTHONPATH=ROOT, XLA_FLAGS=xla_flags.with_devices(2))
  procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "host_slices_run.py"),
                             path, str(tmp_path / f"proc{i}.json"), "--proc", str(i),
                             "--port", str(port)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
           for i in range(2)]
  try:
    outs = [p.communicate(timeout=180)[0] for p in procs]
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
  for p, out in zip(procs, outs):
    assert p.returncode == 0, out[-3000:]
  reports = [json.load(open(tmp_path / f"proc{i}.json")) for i in range(2)]
  total = param_bytes(path)
  for report in reports:
    assert report["param_bytes"] == total
    assert report["wrong"] == []
    assert "embed" in report["split"] and "lm_head/kernel" in report["split"]
    # Half of every fsdp-split parameter, plus the small replicated norms and biases.
    assert total / 2 <= report["bytes_read"] <= 0.6 * total, (report["bytes_read"], total)
  # Together they read the checkpoint once, plus the replicated parameters a second time.
  replicated = sum(4 * int(np.prod(v.get_value().shape))
                   for p, v in nnx.to_flat_state(nnx.state(ckpt[0]))
                   if p[-1] == "scale" or p[-1] == "bias")
  assert sum(r["bytes_read"] for r in reports) == total + replicated


def test_policy_loads_into_the_run_mesh_and_the_trainer_takes_it(tmp_path):
  big = dataclasses.replace(CFG, vocab_size=49_152)  # SmolLM2's tokenizer's ids must fit
  src = str(tmp_path / "ckpt")
  st.export_hf_dir(make_model(big, seed=5), big, src)
  loading.load_tokenizer("smollm2").save(src)
  config = config_tree.make_base_config()
  config.model.update(dict(source=src, keep_layers=1, compute_dtype="float32"))
  config.mesh.update(dict(data=-1, fsdp=2, tensor=2))
  policy = pipeline.make_policy(config, str(tmp_path / "run"))
  assert policy.cfg.n_layers == 1
  mesh = sharding.make_mesh(**config.mesh)
  graphdef, params = nnx.split(policy.model)
  params = nnx.to_pure_dict(params)
  rules = jax.tree.leaves(sharding.param_shardings(params, mesh))
  assert [x.sharding for x in jax.tree.leaves(params)] == rules
  state = loop.make_trainer(pipeline.rl_settings(config), graphdef, params,
                            mesh).init_state(params)
  for got, want in zip(jax.tree.leaves(state.params), jax.tree.leaves(params)):
    assert got.sharding == want.sharding
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
