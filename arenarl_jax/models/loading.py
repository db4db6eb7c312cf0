"""One entry point for weights: the embedded SmolLM2, a GGUF file, or an HF checkpoint directory."""
from __future__ import annotations

import logging
import os
import time

import jax.numpy as jnp

from arenarl_jax.models import param_cache
from arenarl_jax.models.config import ModelConfig
from arenarl_jax.models.embedded import find_smollm2_gguf
from arenarl_jax.models.gguf_io import load_gguf
from arenarl_jax.models.safetensors_io import load_hf_dir
from arenarl_jax.models.transformer import Transformer, set_attention

log = logging.getLogger(__name__)

SMOLLM2 = "smollm2"


def resolve_source(source: str) -> tuple[str, str]:
  """(kind, path) with kind "gguf" or "hf_dir"; a clear error for anything else."""
  if source == SMOLLM2:
    return "gguf", find_smollm2_gguf()
  if os.path.isdir(source):
    return "hf_dir", source
  if os.path.isfile(source):
    if source.endswith(".gguf"):
      return "gguf", source
    raise ValueError(f"model source {source!r}: a file must be a .gguf (HF checkpoints are "
                     "directories with config.json)")
  raise FileNotFoundError(f"model source {source!r}: not {SMOLLM2!r}, an existing .gguf file, "
                          "or an HF checkpoint directory")


def load_model(source: str, *, cache_dir: str | None = None, dtype=None, use_cache: bool = True,
               attention: str = "auto") -> tuple[ModelConfig, Transformer]:
  """Loads ``source`` ("smollm2", a .gguf path or an HF dir); params in ``dtype`` (float32);
  ``attention``: the model's attention implementation (``models/attention_choice.py``).

  GGUF conversions (dequantize + un-permute, seconds) are cached with orbax under ``cache_dir``
  (default ``param_cache.default_cache_dir()``); HF safetensors directories are read directly
  (memory-mapped, already as fast as a cache would be).
  """
  cfg, model = _load(source, cache_dir, dtype, use_cache)
  return cfg, set_attention(model, attention)


def _load(source: str, cache_dir: str | None, dtype, use_cache: bool):
  kind, path = resolve_source(source)
  if kind == "hf_dir":
    return load_hf_dir(path, dtype=dtype)
  dtype_name = jnp.dtype(dtype or "float32").name
  folder = os.path.join(cache_dir or param_cache.default_cache_dir(),
                        param_cache.cache_key(path, dtype=dtype_name))
  start = time.perf_counter()
  if use_cache and (hit := param_cache.restore(folder)) is not None:
    log.info("%s: parameters restored from %s in %.1f s", path, folder,
             time.perf_counter() - start)
    return hit
  cfg, model = load_gguf(path, dtype=dtype_name)
  log.info("%s: converted in %.1f s", path, time.perf_counter() - start)
  if use_cache:
    param_cache.save(folder, cfg, model)
  return cfg, model


def load_tokenizer(source: str):
  """The tokenizer that goes with ``source`` (same sources as load_model)."""
  from arenarl_jax.tokenizer import Tokenizer  # pylint: disable=g-import-not-at-top
  kind, path = resolve_source(source)
  return Tokenizer.from_gguf(path) if kind == "gguf" else Tokenizer.from_hf_dir(path)
