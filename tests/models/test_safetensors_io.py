"""HF safetensors directories -> our model (logits vs transformers); our export -> transformers."""
import json
import logging
import os
import re
import shutil

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from hf_reference import VARIANTS
from safetensors.numpy import load_file, save_file

from arenarl_jax.models import safetensors_io
from arenarl_jax.models.safetensors_io import export_hf_dir, load_hf_dir


def padded_batch(vocab: int, seed: int = 0):
  """Rows: full, right-padded, left-padded, short left-padded; positions count real tokens."""
  rng = np.random.default_rng(seed)
  t = 12
  tokens = rng.integers(0, vocab, (4, t)).astype(np.int32)
  mask = np.ones((4, t), np.int32)
  mask[1, 7:] = 0
  mask[2, :3] = 0
  mask[3, :8] = 0
  positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0).astype(np.int32)
  return tokens, mask, positions


def hf_logits(model, tokens, mask, positions):
  with torch.no_grad():
    out = model(input_ids=torch.tensor(tokens, dtype=torch.long),
                attention_mask=torch.tensor(mask, dtype=torch.long),
                position_ids=torch.tensor(positions, dtype=torch.long))
  return out.logits.float().numpy()


def our_logits(model, tokens, mask, positions):
  logits, _ = model(jnp.asarray(tokens), jnp.asarray(positions), mask_NT=jnp.asarray(mask))
  return np.asarray(logits)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_logits_match_transformers_and_export_round_trips(variant, hf_dirs, tmp_path):
  hf_model, path = hf_dirs(variant)
  cfg, model = load_hf_dir(path)
  family, overrides = VARIANTS[variant]
  assert (cfg.family, cfg.tie_embeddings) == (family, overrides["tie_word_embeddings"])
  assert cfg.n_kv_heads < cfg.n_heads

  tokens, mask, positions = padded_batch(cfg.vocab_size)
  want = hf_logits(hf_model, tokens, mask, positions)
  got = our_logits(model, tokens, mask, positions)
  valid = mask.astype(bool)
  assert np.abs(want).max() > 1.0  # the weights are big enough for a layout bug to show
  np.testing.assert_array_less(np.abs(got - want)[valid], 1e-4)

  from transformers import AutoModelForCausalLM
  export_hf_dir(model, cfg, str(tmp_path))
  stored = load_file(os.path.join(tmp_path, "model.safetensors"))
  assert ("lm_head.weight" in stored) == (not cfg.tie_embeddings)
  back = AutoModelForCausalLM.from_pretrained(str(tmp_path), attn_implementation="eager").eval()
  np.testing.assert_allclose(hf_logits(back, tokens, mask, positions)[valid], want[valid],
                             atol=1e-5, rtol=0)
  cfg_again, _ = load_hf_dir(str(tmp_path))
  assert cfg_again == cfg


def test_sharded_checkpoint_equals_single_file(hf_dirs, tmp_path):
  hf_model, path = hf_dirs("qwen3")
  hf_model.save_pretrained(tmp_path, max_shard_size="40KB")
  assert os.path.isfile(tmp_path / safetensors_io.INDEX_FILE)
  assert len([f for f in os.listdir(tmp_path) if f.endswith(".safetensors")]) > 2
  _, sharded = load_hf_dir(str(tmp_path))
  _, single = load_hf_dir(path)
  tokens, mask, positions = padded_batch(96)
  np.testing.assert_array_equal(our_logits(sharded, tokens, mask, positions),
                                our_logits(single, tokens, mask, positions))


def test_bfloat16_params_export_from_state_bit_exact(hf_dirs, tmp_path):
  _, path = hf_dirs("qwen2")
  cfg, model = load_hf_dir(path, dtype="bfloat16")
  assert cfg.param_dtype == "bfloat16"
  assert model.layers[0].attn.q.kernel[...].dtype == jnp.bfloat16
  export_hf_dir(nnx.state(model, nnx.Param), cfg, str(tmp_path))
  stored = load_file(os.path.join(tmp_path, "model.safetensors"))
  assert stored["model.layers.0.self_attn.q_proj.bias"].dtype.name == "bfloat16"
  _, again = load_hf_dir(str(tmp_path))
  np.testing.assert_array_equal(np.asarray(again.layers[1].mlp.down.kernel[...]),
                                np.asarray(model.layers[1].mlp.down.kernel[...]))


# --- bad input ------------------------------------------------------------------------------------

@pytest.fixture
def ckpt(hf_dirs, tmp_path):
  """A writable copy of the tiny llama checkpoint and a helper that rewrites its tensors."""
  _, path = hf_dirs("llama3_untied")
  dst = tmp_path / "ckpt"
  shutil.copytree(path, dst)
  file = str(dst / "model.safetensors")

  def edit(fn):
    tensors = load_file(file)
    fn(tensors)
    save_file(tensors, file, metadata={"format": "pt"})

  return dst, edit


def test_missing_config(ckpt):
  path, _ = ckpt
  os.remove(path / "config.json")
  with pytest.raises(FileNotFoundError, match=re.escape(str(path / "config.json"))):
    load_hf_dir(str(path))


def test_corrupt_config(ckpt):
  path, _ = ckpt
  (path / "config.json").write_text("{not json")
  with pytest.raises(ValueError, match="config.json: not valid JSON"):
    load_hf_dir(str(path))


def test_unknown_architecture(ckpt):
  path, _ = ckpt
  hf = json.loads((path / "config.json").read_text())
  hf["model_type"] = "gpt2"
  (path / "config.json").write_text(json.dumps(hf))
  with pytest.raises(ValueError, match="config.json: unsupported model_type 'gpt2'"):
    load_hf_dir(str(path))


def test_sliding_window_refused(ckpt):
  path, _ = ckpt
  hf = json.loads((path / "config.json").read_text())
  hf.update(model_type="qwen2", use_sliding_window=True, sliding_window=4)
  (path / "config.json").write_text(json.dumps(hf))
  with pytest.raises(ValueError, match="sliding"):
    load_hf_dir(str(path))


def test_no_safetensors(ckpt):
  path, _ = ckpt
  os.remove(path / "model.safetensors")
  with pytest.raises(FileNotFoundError, match="no \\*.safetensors"):
    load_hf_dir(str(path))


def test_corrupt_shard(ckpt):
  path, _ = ckpt
  file = path / "model.safetensors"
  data = file.read_bytes()
  file.write_bytes(data[:8] + b"garbage" * 4)
  with pytest.raises(ValueError, match=re.escape(str(file)) + ": corrupt"):
    load_hf_dir(str(path))


def test_truncated_shard(ckpt):
  path, _ = ckpt
  file = path / "model.safetensors"
  data = file.read_bytes()
  file.write_bytes(data[: len(data) // 2])
  with pytest.raises(ValueError, match=re.escape(str(file))):
    load_hf_dir(str(path))


def test_missing_shard(hf_dirs, tmp_path):
  hf_model, _ = hf_dirs("qwen3")
  hf_model.save_pretrained(tmp_path, max_shard_size="40KB")
  shard = sorted(f for f in os.listdir(tmp_path) if f.endswith(".safetensors"))[1]
  os.remove(tmp_path / shard)
  with pytest.raises(FileNotFoundError, match=re.escape(shard) + ": shard listed in"):
    load_hf_dir(str(tmp_path))


def test_index_lists_tensor_not_in_shard(hf_dirs, tmp_path):
  hf_model, _ = hf_dirs("qwen3")
  hf_model.save_pretrained(tmp_path, max_shard_size="40KB")
  index_file = tmp_path / safetensors_io.INDEX_FILE
  index = json.loads(index_file.read_text())
  first = sorted(index["weight_map"].values())[0]
  index["weight_map"]["model.layers.0.mlp.extra.weight"] = first
  index_file.write_text(json.dumps(index))
  with pytest.raises(KeyError, match="'model.layers.0.mlp.extra.weight' listed in"):
    load_hf_dir(str(tmp_path))


def test_missing_tensor(ckpt):
  path, edit = ckpt
  edit(lambda t: t.pop("model.layers.1.mlp.up_proj.weight"))
  with pytest.raises(KeyError, match="missing tensor 'model.layers.1.mlp.up_proj.weight'"):
    load_hf_dir(str(path))


def test_missing_untied_head(ckpt):
  path, edit = ckpt
  edit(lambda t: t.pop("lm_head.weight"))
  with pytest.raises(KeyError, match="missing tensor 'lm_head.weight'"):
    load_hf_dir(str(path))


def test_wrong_shape(ckpt):
  path, edit = ckpt

  def shrink(t):
    t["model.layers.0.self_attn.k_proj.weight"] = t["model.layers.0.self_attn.k_proj.weight"][:-1]

  edit(shrink)
  want = (f"{path / 'model.safetensors'}: tensor 'model.layers.0.self_attn.k_proj.weight' has "
          "shape (31, 64), expected (32, 64)")
  with pytest.raises(ValueError, match=re.escape(want)):
    load_hf_dir(str(path))


def test_tensor_of_unsupported_feature_is_an_error(ckpt):
  path, edit = ckpt
  edit(lambda t: t.update({"model.layers.0.self_attn.o_proj.bias": np.ones(64, np.float32)}))
  with pytest.raises(ValueError, match="'model.layers.0.self_attn.o_proj.bias' has no place"):
    load_hf_dir(str(path))


def test_extra_layer_is_an_error(ckpt):
  path, edit = ckpt
  edit(lambda t: t.update({"model.layers.2.input_layernorm.weight": np.ones(64, np.float32)}))
  with pytest.raises(ValueError, match="model.layers.2.input_layernorm.weight"):
    load_hf_dir(str(path))


def test_unrelated_extras_are_reported_and_inv_freq_ignored(ckpt, caplog):
  path, edit = ckpt
  edit(lambda t: t.update({"model.layers.0.self_attn.rotary_emb.inv_freq": np.ones(8, np.float32),
                           "vision_tower.patch.weight": np.ones((2, 2), np.float32)}))
  with caplog.at_level(logging.WARNING, logger=safetensors_io.__name__):
    load_hf_dir(str(path))
  assert "vision_tower.patch.weight" in caplog.text
  assert "inv_freq" not in caplog.text
