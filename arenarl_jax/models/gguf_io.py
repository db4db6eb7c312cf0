"""llama-architecture GGUF files (e.g. the embedded SmolLM2) -> our Transformer.

Each tensor is dequantized to float32 in HF ``(out, in)`` layout and renamed to its HF name, then
the HF loader's mapping fills the model. llama.cpp's converter permutes the rows of Q and K for its
interleaved RoPE; we undo that so our (HF, rotate-half) RoPE applies. No ``output.weight``: tied.
"""
from __future__ import annotations

import dataclasses
import functools
import re

import gguf
import jax.numpy as jnp
import numpy as np

from arenarl_jax.models.config import ModelConfig
from arenarl_jax.models.safetensors_io import TensorStore, keep_config, model_from_tensors
from arenarl_jax.models.transformer import Transformer

ARCHITECTURES = ("llama",)
_FLOAT = (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16,
          gguf.GGMLQuantizationType.BF16)
_TOP = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_BLOCK = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}


@functools.lru_cache(maxsize=None)
def supported_types() -> frozenset:
  """GGML tensor types gguf.quants can dequantize (F32/F16/BF16 and the block formats): each type
  is asked to dequantize one zero block, so the answer follows the installed gguf."""
  out = set(_FLOAT)
  for kind, (_, block_bytes) in gguf.GGML_QUANT_SIZES.items():
    try:
      gguf.quants.dequantize(np.zeros((1, block_bytes), np.uint8), kind)
    except (NotImplementedError, ValueError, TypeError, KeyError):
      continue
    out.add(kind)
  return frozenset(out)


def unpermute_rows(w_OI: np.ndarray, n_head: int) -> np.ndarray:
  """Inverse of llama.cpp's Q/K row permutation (per head, rows (2i, 2i+1) -> (i, i + F/2))."""
  out, rest = w_OI.shape[0], w_OI.shape[1:]
  f_half = out // n_head // 2
  return w_OI.reshape(n_head, f_half, 2, *rest).swapaxes(1, 2).reshape(w_OI.shape)


def _field(reader: gguf.GGUFReader, key: str, path: str, default=None):
  field = reader.fields.get(key)
  if field is None:
    if default is None:
      raise KeyError(f"{path}: missing GGUF metadata key {key!r}")
    return default
  value = field.contents()
  if isinstance(value, list):
    raise ValueError(f"{path}: metadata {key!r} is per-layer ({value[:4]}...); not supported")
  return value


def _float(value) -> float:
  """GGUF stores floats as float32: 1e-5 comes back as 9.99999974e-06; keep 7 digits."""
  return float(f"{float(value):.7g}")


def read_gguf_config(reader: gguf.GGUFReader, path: str) -> ModelConfig:
  """A ModelConfig from a GGUF file's ``llama.*`` metadata."""
  arch = _field(reader, "general.architecture", path)
  if arch not in ARCHITECTURES:
    raise ValueError(f"{path}: unsupported GGUF architecture {arch!r}; supported: {ARCHITECTURES}")
  get = lambda key, default=None: _field(reader, f"{arch}.{key}", path, default)
  names = {t.name for t in reader.tensors}
  if "token_embd.weight" not in names:
    raise KeyError(f"{path}: missing tensor 'token_embd.weight'")
  if "rope_freqs.weight" in names:
    raise ValueError(f"{path}: tensor 'rope_freqs.weight' (per-frequency RoPE factors) is not "
                     "supported")
  scaling = get("rope.scaling.type", "none")
  rope_scaling = ()
  if scaling == "linear":
    rope_scaling = (("factor", _float(get("rope.scaling.factor"))), ("rope_type", "linear"))
  elif scaling != "none":
    raise ValueError(f"{path}: unsupported {arch}.rope.scaling.type {scaling!r}")
  d_model, n_heads = int(get("embedding_length")), int(get("attention.head_count"))
  embd = next(t for t in reader.tensors if t.name == "token_embd.weight")
  return ModelConfig(
      family="llama",
      vocab_size=int(get("vocab_size", int(embd.shape[-1]))),
      d_model=d_model,
      n_layers=int(get("block_count")),
      n_heads=n_heads,
      n_kv_heads=int(get("attention.head_count_kv", n_heads)),
      head_dim=int(get("attention.key_length", get("rope.dimension_count", d_model // n_heads))),
      ffn_dim=int(get("feed_forward_length")),
      rope_theta=_float(get("rope.freq_base", 10_000.0)),
      rope_scaling=rope_scaling,
      norm_eps=_float(get("attention.layer_norm_rms_epsilon")),
      tie_embeddings="output.weight" not in names,
      max_seq_len=int(get("context_length", 8192)),
  )


def _hf_name(name: str, path: str) -> str:
  if name in _TOP:
    return _TOP[name]
  m = re.fullmatch(r"blk\.(\d+)\.(.+)", name)
  if m and m.group(2) in _BLOCK:
    return f"model.layers.{m.group(1)}.{_BLOCK[m.group(2)]}"
  raise ValueError(f"{path}: tensor {name!r} has no place in our llama model")


def _gguf_name(hf: str) -> str:
  for name, known in _TOP.items():
    if hf == known:
      return name
  m = re.fullmatch(r"model\.layers\.(\d+)\.(.+)", hf)
  inverse = {v: k for k, v in _BLOCK.items()}
  return f"blk.{m.group(1)}.{inverse[m.group(2)]}" if m and m.group(2) in inverse else hf


def open_gguf(path: str, reader: gguf.GGUFReader, cfg: ModelConfig) -> TensorStore:
  """A TensorStore that dequantizes GGUF tensors on demand, under their HF names."""
  tensors = {}
  supported = supported_types()
  for t in reader.tensors:
    hf = _hf_name(t.name, path)
    if t.tensor_type not in supported:
      raise ValueError(f"{path}: tensor {t.name!r} has unsupported quantization "
                       f"{t.tensor_type.name}; supported: {sorted(q.name for q in supported)}")
    tensors[hf] = t

  def get(hf):
    t = tensors[hf]
    try:
      w = gguf.quants.dequantize(t.data, t.tensor_type)
    except (NotImplementedError, ValueError) as e:
      raise ValueError(f"{path}: cannot dequantize tensor {t.name!r} ({e})") from e
    # GGUF shapes list the fastest axis first; numpy/HF order is the reverse.
    w = np.asarray(w, np.float32).reshape([int(d) for d in reversed(t.shape)])
    heads = cfg.n_heads if hf.endswith("q_proj.weight") else cfg.n_kv_heads
    # A wrongly shaped Q/K is left as is, for the loader's shape check to report.
    if hf.endswith(("q_proj.weight", "k_proj.weight")) and w.shape[0] == heads * cfg.head_dim:
      w = unpermute_rows(w, heads)
    return w

  where = lambda hf: f"{path} ({_gguf_name(hf)})"
  return TensorStore(names=frozenset(tensors), get=get, where=where, source=path)


def load_gguf(path: str, *, dtype=None, mesh=None, keep_layers: int = 0
              ) -> tuple[ModelConfig, Transformer]:
  """Loads a llama-architecture GGUF (dequantized); params in ``dtype`` (default float32), placed
  by the partition rules on ``mesh`` (a jax Mesh) if given; ``keep_layers`` > 0 reads (and
  dequantizes) only the first blocks' tensors (the reader maps the file: the rest is never read)."""
  try:
    reader = gguf.GGUFReader(path, "r")
  except FileNotFoundError:
    raise
  except Exception as e:  # the reader raises ValueError/struct errors/IndexError on bad bytes
    raise ValueError(f"{path}: not a readable GGUF file ({type(e).__name__}: {e})") from e
  full = read_gguf_config(reader, path)
  cfg = keep_config(full, keep_layers)
  if dtype is not None:
    cfg = dataclasses.replace(cfg, param_dtype=jnp.dtype(dtype).name)
  return cfg, model_from_tensors(cfg, open_gguf(path, reader, cfg), mesh=mesh,
                                 stored_layers=full.n_layers)
