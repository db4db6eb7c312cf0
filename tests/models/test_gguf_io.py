"""GGUF -> our model: tiny llama files written as llama.cpp's converter does, vs transformers."""
import re

import gguf
import jax.numpy as jnp
import numpy as np
import pytest
from hf_reference import build_hf_model, jit_forward
from test_safetensors_io import hf_logits, padded_batch

from arenarl_jax.models.gguf_io import load_gguf, unpermute_rows

Q = gguf.GGMLQuantizationType
_NAMES = {
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}


def converter_permute(w, n_head):
  """llama.cpp's convert_hf_to_gguf permutation of Q/K rows (for interleaved RoPE)."""
  return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(
      w.shape)


def gguf_tensors(hf_model):
  """GGUF name -> float32 array, as the converter writes them (Q/K permuted, HF (out, in))."""
  c = hf_model.config
  out = {}
  for name, p in hf_model.state_dict().items():
    w = p.float().numpy()
    if name == "model.embed_tokens.weight":
      out["token_embd.weight"] = w
    elif name == "model.norm.weight":
      out["output_norm.weight"] = w
    elif name == "lm_head.weight":
      if not c.tie_word_embeddings:
        out["output.weight"] = w
    else:
      i, rest = re.fullmatch(r"model\.layers\.(\d+)\.(.+)\.weight", name).groups()
      if rest == "self_attn.q_proj":
        w = converter_permute(w, c.num_attention_heads)
      elif rest == "self_attn.k_proj":
        w = converter_permute(w, c.num_key_value_heads)
      out[f"blk.{i}.{_NAMES[rest]}.weight"] = w
  return out


def write_gguf(path, hf_model, tensors, *, arch="llama", qtype=Q.F32, raw=None):
  c = hf_model.config
  writer = gguf.GGUFWriter(str(path), arch)
  writer.add_block_count(c.num_hidden_layers)
  writer.add_context_length(c.max_position_embeddings)
  writer.add_embedding_length(c.hidden_size)
  writer.add_feed_forward_length(c.intermediate_size)
  writer.add_head_count(c.num_attention_heads)
  writer.add_head_count_kv(c.num_key_value_heads)
  writer.add_rope_freq_base(c.rope_parameters["rope_theta"])
  writer.add_layer_norm_rms_eps(c.rms_norm_eps)
  writer.add_rope_dimension_count(c.hidden_size // c.num_attention_heads)
  writer.add_vocab_size(c.vocab_size)
  for name, w in tensors.items():
    if w.ndim == 2 and qtype != Q.F32:
      writer.add_tensor(name, gguf.quants.quantize(w, qtype), raw_dtype=qtype)
    else:
      writer.add_tensor(name, w)
  for name, (data, raw_type) in (raw or {}).items():
    writer.add_tensor(name, data, raw_dtype=raw_type)
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_tensors_to_file()
  writer.close()
  return str(path)


@pytest.fixture(scope="module")
def llama():
  """Tied and untied tiny llama references (plain RoPE: our GGUF reader has no llama3 scaling)."""
  return build_hf_model("llama"), build_hf_model("llama", seed=1, tie_word_embeddings=False)


def test_unpermute_inverts_the_converter():
  w = np.random.default_rng(0).normal(size=(3 * 8, 5))
  np.testing.assert_array_equal(unpermute_rows(converter_permute(w, 3), 3), w)
  assert not np.array_equal(converter_permute(w, 3), w)


@pytest.mark.parametrize("tied", [True, False])
def test_logits_match_transformers(tied, llama, tmp_path):
  hf_model = llama[0] if tied else llama[1]
  path = write_gguf(tmp_path / "m.gguf", hf_model, gguf_tensors(hf_model))
  cfg, model = load_gguf(path)
  assert cfg.tie_embeddings == tied and cfg.family == "llama" and cfg.norm_eps == 1e-5
  tokens, mask, positions = padded_batch(cfg.vocab_size)
  want = hf_logits(hf_model, tokens, mask, positions)
  forward = jit_forward(model)
  got, _ = forward(jnp.asarray(tokens), jnp.asarray(positions), mask_NT=jnp.asarray(mask))
  valid = mask.astype(bool)
  np.testing.assert_array_less(np.abs(np.asarray(got) - want)[valid], 1e-4)


@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_1, Q.F16])
def test_quantized_tensors_are_dequantized_and_unpermuted(qtype, llama, tmp_path):
  hf_model = llama[0]
  tensors = gguf_tensors(hf_model)
  path = write_gguf(tmp_path / "q.gguf", hf_model, tensors, qtype=qtype)
  _, model = load_gguf(path)
  q_stored = gguf.quants.quantize(tensors["blk.1.attn_q.weight"], qtype)
  q_want = unpermute_rows(gguf.quants.dequantize(q_stored, qtype).astype(np.float32), 4)
  np.testing.assert_array_equal(np.asarray(model.layers[1].attn.q.kernel[...]), q_want.T)
  q_exact = hf_model.state_dict()["model.layers.1.self_attn.q_proj.weight"].numpy()
  assert 0 < np.abs(q_want - q_exact).max() < 0.2  # lossy, but the same matrix


# --- bad input ------------------------------------------------------------------------------------

def test_unsupported_architecture(llama, tmp_path):
  path = write_gguf(tmp_path / "g.gguf", llama[0], gguf_tensors(llama[0]), arch="gemma3")
  want = f"{path}: unsupported GGUF architecture 'gemma3'"
  with pytest.raises(ValueError, match=re.escape(want)):
    load_gguf(path)


def test_unsupported_quantization(llama, tmp_path):
  tensors = gguf_tensors(llama[0])
  del tensors["blk.0.attn_v.weight"]
  q8k = np.zeros((32, 292), np.uint8)  # Q8_K: 256 values per 292-byte block; no dequantizer
  raw = {"blk.0.attn_v.weight": (q8k, Q.Q8_K)}
  path = write_gguf(tmp_path / "k.gguf", llama[0], tensors, raw=raw)
  with pytest.raises(ValueError, match=re.escape(path) + ": tensor 'blk.0.attn_v.weight' has "
                     "unsupported quantization Q8_K"):
    load_gguf(path)


def test_missing_tensor(llama, tmp_path):
  tensors = gguf_tensors(llama[0])
  del tensors["blk.1.ffn_up.weight"]
  path = write_gguf(tmp_path / "m.gguf", llama[0], tensors)
  with pytest.raises(KeyError, match=re.escape(f"{path} (blk.1.ffn_up.weight): missing tensor")):
    load_gguf(path)


def test_wrong_shape(llama, tmp_path):
  tensors = gguf_tensors(llama[0])
  tensors["blk.0.attn_k.weight"] = tensors["blk.0.attn_k.weight"][:-2]
  path = write_gguf(tmp_path / "s.gguf", llama[0], tensors)
  with pytest.raises(ValueError, match=re.escape(
      f"{path} (blk.0.attn_k.weight): tensor 'model.layers.0.self_attn.k_proj.weight' has shape "
      "(30, 64), expected (32, 64)")):
    load_gguf(path)


def test_unknown_tensor(llama, tmp_path):
  tensors = gguf_tensors(llama[0])
  tensors["blk.0.attn_q.bias"] = np.zeros(64, np.float32)
  path = write_gguf(tmp_path / "u.gguf", llama[0], tensors)
  with pytest.raises(ValueError, match="tensor 'blk.0.attn_q.bias' has no place"):
    load_gguf(path)


def test_not_a_gguf_file(tmp_path):
  path = tmp_path / "junk.gguf"
  path.write_bytes(b"this is not a gguf file at all" * 10)
  with pytest.raises(ValueError, match=re.escape(str(path)) + ": not a readable GGUF file"):
    load_gguf(str(path))


def test_missing_file(tmp_path):
  with pytest.raises(FileNotFoundError):
    load_gguf(str(tmp_path / "absent.gguf"))
