"""Tiny random transformers reference models (torch, 1 thread) and a jitted forward for tests.

A plain module, not conftest.py: ``from conftest import`` would be ambiguous across test folders.
"""
import torch

torch.set_num_threads(1)

_BASE = dict(vocab_size=96, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, intermediate_size=96, max_position_embeddings=128,
             rms_norm_eps=1e-5)

# name -> (family, config overrides). GQA everywhere (4 query heads, 2 KV heads).
VARIANTS = {
    "llama": ("llama", dict(tie_word_embeddings=True, rope_parameters={
        "rope_type": "default", "rope_theta": 10_000.0})),
    "llama_attention_bias": ("llama", dict(tie_word_embeddings=True, attention_bias=True,
                                           rope_parameters={"rope_type": "default",
                                                            "rope_theta": 10_000.0})),
    "llama3_untied": ("llama", dict(tie_word_embeddings=False, head_dim=16, rope_parameters={
        "rope_type": "llama3", "rope_theta": 10_000.0, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 64})),
    "qwen2": ("qwen2", dict(tie_word_embeddings=True, rope_parameters={
        "rope_type": "default", "rope_theta": 1_000_000.0})),
    "qwen2_yarn_untied": ("qwen2", dict(tie_word_embeddings=False, rope_parameters={
        "rope_type": "yarn", "rope_theta": 10_000.0, "factor": 4.0,
        "original_max_position_embeddings": 32})),
    "qwen3": ("qwen3", dict(tie_word_embeddings=False, head_dim=24, rope_parameters={
        "rope_type": "default", "rope_theta": 1_000_000.0})),
    "qwen3_tied_linear": ("qwen3", dict(tie_word_embeddings=True, head_dim=16, rope_parameters={
        "rope_type": "linear", "rope_theta": 10_000.0, "factor": 2.0})),
}


def build_hf_model(variant: str, seed: int = 0, **changes):
  """A randomly initialised transformers model whose weights are large enough to matter."""
  from transformers import AutoConfig, AutoModelForCausalLM

  family, overrides = VARIANTS[variant]
  config = AutoConfig.for_model(family, **_BASE, **{**overrides, **changes})
  torch.manual_seed(seed)
  model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
  with torch.no_grad():
    # HF's init (std 0.02) makes logits ~0; O(1) activations make a wrong layout visible.
    for name, p in model.named_parameters():
      if "norm" in name:
        p.copy_(1.0 + 0.2 * torch.randn_like(p))
      elif p.ndim == 1:
        p.copy_(0.5 * torch.randn_like(p))
      elif "embed" in name:
        p.copy_(torch.randn_like(p))
      else:
        p.copy_(torch.randn_like(p) / p.shape[1] ** 0.5)
  return model


def jit_forward(model):
  """model(tokens, positions, cache=, mask_NT=) as one jitted program (eager dispatch is slow)."""
  import jax
  from flax import nnx

  graphdef, state = nnx.split(model)

  @jax.jit
  def forward(state, tokens_NT, positions_NT, cache, mask_NT):
    return nnx.merge(graphdef, state)(tokens_NT, positions_NT, cache=cache, mask_NT=mask_NT)

  return lambda tokens, positions=None, *, cache=None, mask_NT=None: forward(
      state, tokens, positions, cache, mask_NT)
