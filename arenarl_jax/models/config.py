"""Model hyper-parameters for the decoder family (Llama, Qwen2/2.5, Qwen3) and named presets."""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import jax
import jax.numpy as jnp

FAMILIES = ("llama", "qwen2", "qwen3")
COMPUTE_DTYPES = ("auto", "float32", "bfloat16")


def resolve_compute_dtype(name: str, backend: str | None = None) -> str:
  """"auto" -> bfloat16 on accelerators (gpu, tpu), float32 on cpu (CPUs without native bfloat16
  arithmetic run bfloat16 products slower than float32 ones); a concrete name is checked and
  returned."""
  if name not in COMPUTE_DTYPES:
    raise ValueError(f"model.compute_dtype must be one of {COMPUTE_DTYPES}, got {name!r}")
  if name != "auto":
    return name
  return "float32" if (backend or jax.default_backend()) == "cpu" else "bfloat16"


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Everything that shapes the network. Frozen and hashable, so it can be a jit static argument."""

  vocab_size: int
  d_model: int
  n_layers: int
  n_heads: int
  n_kv_heads: int
  head_dim: int
  ffn_dim: int
  family: str = "llama"
  rope_theta: float = 10_000.0
  # Sorted (key, value) pairs of HF's rope_parameters minus rope_theta; () = plain RoPE.
  rope_scaling: tuple[tuple[str, Any], ...] = ()
  norm_eps: float = 1e-6
  tie_embeddings: bool = False
  qkv_bias: bool = False  # Qwen2/2.5 (and Llama with attention_bias)
  o_bias: bool = False  # Llama with attention_bias (Qwen2 has q/k/v biases only)
  qk_norm: bool = False  # Qwen3: RMSNorm over head_dim on q and k before RoPE
  max_seq_len: int = 8192
  param_dtype: str = "float32"  # master parameters (and so gradients and optimizer state)
  # Activations and matmul inputs: parameters are cast to it at use ("auto": resolve_compute_dtype).
  compute_dtype: str = "float32"

  def __post_init__(self):
    if self.family not in FAMILIES:
      raise ValueError(f"unknown model family {self.family!r}; expected one of {FAMILIES}")
    if self.n_heads % self.n_kv_heads:
      raise ValueError(f"n_heads={self.n_heads} is not a multiple of n_kv_heads={self.n_kv_heads}")
    if self.compute_dtype not in COMPUTE_DTYPES:
      raise ValueError(f"compute_dtype must be one of {COMPUTE_DTYPES}, got {self.compute_dtype!r}")

  @property
  def dtype(self):
    """The parameters' dtype."""
    return jnp.dtype(self.param_dtype)

  @property
  def act_dtype(self):
    """The compute dtype (activations, KV cache, matmul inputs); "auto" resolved here."""
    return jnp.dtype(resolve_compute_dtype(self.compute_dtype))

  @property
  def rope(self) -> dict[str, Any]:
    return dict(self.rope_scaling)

  def num_params(self) -> int:
    """Parameter count (the head counted once when tied)."""
    d, f, hd = self.d_model, self.ffn_dim, self.head_dim
    attn = d * hd * (self.n_heads * 2 + self.n_kv_heads * 2)
    if self.qkv_bias:
      attn += hd * (self.n_heads + 2 * self.n_kv_heads)
    if self.o_bias:
      attn += d
    if self.qk_norm:
      attn += 2 * hd
    block = attn + 3 * d * f + 2 * d
    head = 0 if self.tie_embeddings else self.vocab_size * d
    return self.n_layers * block + self.vocab_size * d + d + head


def from_hf_config(hf: Mapping[str, Any], *, source: str = "config.json") -> ModelConfig:
  """Builds a ModelConfig from a transformers ``config.json`` dict (llama, qwen2, qwen3)."""
  family = hf.get("model_type")
  if family not in FAMILIES:
    raise ValueError(f"{source}: unsupported model_type {family!r}; supported: {FAMILIES}")

  def need(key):
    if key not in hf:
      raise KeyError(f"{source}: missing required key {key!r}")
    return hf[key]

  d_model, n_heads = int(need("hidden_size")), int(need("num_attention_heads"))
  # transformers 5 writes rope_parameters (with rope_theta inside); 4.x wrote rope_theta/rope_scaling.
  rope = dict(hf.get("rope_parameters") or hf.get("rope_scaling") or {})
  theta = float(rope.pop("rope_theta", hf.get("rope_theta", 10_000.0)))
  rope_type = rope.get("rope_type", rope.get("type", "default"))
  rope.pop("type", None)
  rope["rope_type"] = rope_type
  if rope_type == "default":
    rope = {}
  elif rope_type not in ("linear", "llama3", "yarn"):
    raise ValueError(f"{source}: unsupported rope_type {rope_type!r} (default, linear, llama3, yarn)")
  if rope_type == "yarn" and rope.get("factor") is None:
    # HF's rule when the factor is left out: the context extension ratio.
    if not rope.get("original_max_position_embeddings") or not hf.get("max_position_embeddings"):
      raise ValueError(f"{source}: yarn rope needs factor or both max_position_embeddings and "
                       "original_max_position_embeddings")
    rope["factor"] = hf["max_position_embeddings"] / rope["original_max_position_embeddings"]
  if hf.get("partial_rotary_factor", 1.0) != 1.0:
    raise ValueError(f"{source}: partial_rotary_factor != 1 is not supported")
  return ModelConfig(
      family=family,
      vocab_size=int(need("vocab_size")),
      d_model=d_model,
      n_layers=int(need("num_hidden_layers")),
      n_heads=n_heads,
      n_kv_heads=int(hf.get("num_key_value_heads") or n_heads),
      head_dim=int(hf.get("head_dim") or d_model // n_heads),
      ffn_dim=int(need("intermediate_size")),
      rope_theta=theta,
      rope_scaling=tuple(sorted(rope.items())),
      norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
      tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
      qkv_bias=family == "qwen2" or bool(hf.get("attention_bias", False)),
      o_bias=family == "llama" and bool(hf.get("attention_bias", False)),
      qk_norm=family == "qwen3",
      max_seq_len=int(hf.get("max_position_embeddings", 8192)),
  )


def to_hf_config(cfg: ModelConfig) -> dict[str, Any]:
  """The transformers ``config.json`` dict for ``cfg`` (inverse of from_hf_config)."""
  rope = {"rope_type": "default", "rope_theta": cfg.rope_theta}
  if cfg.rope_scaling:
    rope = dict(cfg.rope_scaling, rope_theta=cfg.rope_theta)
  arch = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}
  out = {
      "architectures": [arch[cfg.family]],
      "model_type": cfg.family,
      "vocab_size": cfg.vocab_size,
      "hidden_size": cfg.d_model,
      "intermediate_size": cfg.ffn_dim,
      "num_hidden_layers": cfg.n_layers,
      "num_attention_heads": cfg.n_heads,
      "num_key_value_heads": cfg.n_kv_heads,
      "head_dim": cfg.head_dim,
      "hidden_act": "silu",
      "max_position_embeddings": cfg.max_seq_len,
      "rms_norm_eps": cfg.norm_eps,
      "tie_word_embeddings": cfg.tie_embeddings,
      "rope_parameters": rope,
      "torch_dtype": cfg.param_dtype,
  }
  if cfg.family == "llama":
    if cfg.qkv_bias != cfg.o_bias:
      raise ValueError("llama's attention_bias sets q/k/v and o biases together; got "
                       f"qkv_bias={cfg.qkv_bias}, o_bias={cfg.o_bias}")
    out["attention_bias"] = cfg.qkv_bias
    out["mlp_bias"] = False
  return out


# Named architectures. Weights come from a checkpoint; these only fix the shapes.
PRESETS: dict[str, ModelConfig] = {
    "smollm2_135m": ModelConfig(
        vocab_size=49_152, d_model=576, n_layers=30, n_heads=9, n_kv_heads=3, head_dim=64,
        ffn_dim=1536, rope_theta=100_000.0, norm_eps=1e-5, tie_embeddings=True, max_seq_len=8192),
    # Qwen3: float32 master parameters, bf16 compute on accelerators (float32 on CPU).
    "qwen3_8b": ModelConfig(
        family="qwen3", vocab_size=151_936, d_model=4096, n_layers=36, n_heads=32, n_kv_heads=8,
        head_dim=128, ffn_dim=12_288, rope_theta=1_000_000.0, norm_eps=1e-6, qk_norm=True,
        max_seq_len=40_960, compute_dtype="auto"),
    "qwen3_0_6b": ModelConfig(
        family="qwen3", vocab_size=151_936, d_model=1024, n_layers=28, n_heads=16, n_kv_heads=8,
        head_dim=128, ffn_dim=3072, rope_theta=1_000_000.0, norm_eps=1e-6, qk_norm=True,
        tie_embeddings=True, max_seq_len=40_960, compute_dtype="auto"),
    # Tiny random models for tests and CPU smoke runs (vocab matches SmolLM2's tokenizer).
    "tiny": ModelConfig(
        vocab_size=49_152, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16,
        ffn_dim=128, rope_theta=10_000.0, norm_eps=1e-5, tie_embeddings=True, max_seq_len=2048),
    # From-scratch models (model.init.preset); vocab_size is replaced by the tokenizer's.
    # quickstart: 2 layers x 128 wide (~0.9M parameters with a 4,096-token BPE). A travel
    # conversation is ~1,850 tokens, so attention and the update dominate a CPU step: this size
    # keeps a 4 x 1,856-token SFT step short on 2 CPU cores; 2 layers is the least that
    # can copy names and numbers from the query and tool results into calls (induction heads).
    "quickstart": ModelConfig(
        vocab_size=4096, d_model=128, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=32,
        ffn_dim=384, rope_theta=10_000.0, norm_eps=1e-5, tie_embeddings=True, max_seq_len=4096),
    # quickstart_4x256: the largest from-scratch size the pinned start's 20 MB allows in float32
    # (4.2M parameters, ~17 MB), for the competent-start search (benchmarks/README.md).
    "quickstart_4x256": ModelConfig(
        vocab_size=4096, d_model=256, n_layers=4, n_heads=4, n_kv_heads=2, head_dim=64,
        ffn_dim=768, rope_theta=10_000.0, norm_eps=1e-5, tie_embeddings=True, max_seq_len=4096),
}


def get_preset(name: str) -> ModelConfig:
  if name not in PRESETS:
    raise KeyError(f"unknown model preset {name!r}; known: {sorted(PRESETS)}")
  return PRESETS[name]
