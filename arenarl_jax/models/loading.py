"""One entry point for weights: the embedded SmolLM2, a GGUF file, or an HF checkpoint directory."""
from __future__ import annotations

import dataclasses
import logging
import os
import time

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh

from arenarl_jax import cache_dirs
from arenarl_jax import sharding
from arenarl_jax.models import param_cache
from arenarl_jax.models.config import ModelConfig, resolve_compute_dtype
from arenarl_jax.models.embedded import find_smollm2_gguf
from arenarl_jax.models.gguf_io import load_gguf
from arenarl_jax.models.safetensors_io import load_hf_dir
from arenarl_jax.models.transformer import Transformer, abstract_model, set_attention

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


def with_compute_dtype(cfg: ModelConfig, model: Transformer,
                       compute_dtype: str) -> tuple[ModelConfig, Transformer]:
  """The same parameters (not copied) under a config whose compute dtype is ``compute_dtype``
  ("auto" resolved for this process's backend)."""
  name = resolve_compute_dtype(compute_dtype)
  if name == cfg.compute_dtype:
    return cfg, model
  cfg = dataclasses.replace(cfg, compute_dtype=name)
  return cfg, nnx.merge(nnx.graphdef(abstract_model(cfg)), nnx.state(model))


def load_model(source: str, *, cache_dir: str | None = None, dtype=None,
               use_cache: bool = True, compute_dtype: str | None = None,
               mesh: Mesh | None = None, attention: str = "auto", keep_layers: int = 0
               ) -> tuple[ModelConfig, Transformer]:
  """Loads ``source`` ("smollm2", a .gguf path or an HF dir); params in ``dtype`` (float32);
  ``attention``: the model's attention implementation (``models/attention_choice.py``).

  ``compute_dtype`` (``model.compute_dtype``: "auto", "float32", "bfloat16"; None keeps the
  default float32): the dtype activations and matmuls run in; the parameters stay in ``dtype``
  (float32 masters) and are cast at use. ``mesh``: every parameter is placed directly in its
  ``NamedSharding`` from ``sharding.py``'s partition rules (the skeleton comes from
  ``nnx.eval_shape``). From an HF directory each process reads only the blocks its own devices
  hold (``safetensors_io.model_from_tensors``); a GGUF tensor is dequantized whole on each host
  and sent to its shards only.

  GGUF conversions (dequantize + un-permute, seconds) are cached with orbax under ``cache_dir``
  (default ``cache_dirs.cache_dir("params")``); HF safetensors directories are read directly
  (memory-mapped, already as fast as a cache would be).

  ``keep_layers`` > 0 (``model.keep_layers``): only the first blocks, and only their tensors are
  read (the later blocks' bytes never leave the file).
  """
  cfg, model = _load(source, cache_dir=cache_dir, dtype=dtype, use_cache=use_cache, mesh=mesh,
                     keep_layers=int(keep_layers))
  if compute_dtype is not None:
    cfg, model = with_compute_dtype(cfg, model, compute_dtype)
  return cfg, set_attention(model, attention)


def _load(source: str, *, cache_dir: str | None, dtype, use_cache: bool,
          mesh: Mesh | None, keep_layers: int) -> tuple[ModelConfig, Transformer]:
  kind, path = resolve_source(source)
  if kind == "hf_dir":
    return load_hf_dir(path, dtype=dtype, mesh=mesh, keep_layers=keep_layers)
  dtype_name = jnp.dtype(dtype or "float32").name
  folder = os.path.join(cache_dir or cache_dirs.cache_dir("params"),
                        param_cache.cache_key(path, dtype=dtype_name, keep_layers=keep_layers))
  start = time.perf_counter()
  if use_cache and (hit := param_cache.restore(folder, mesh=mesh)) is not None:
    log.info("%s: parameters restored from %s in %.1f s", path, folder,
             time.perf_counter() - start)
    return hit
  cfg, model = load_gguf(path, dtype=dtype_name, mesh=mesh, keep_layers=keep_layers)
  log.info("%s: converted in %.1f s", path, time.perf_counter() - start)
  if use_cache:
    param_cache.save(folder, cfg, model)
  return cfg, model


def abstract_sharded_model(cfg: ModelConfig, mesh: Mesh) -> Transformer:
  """Shapes only, no memory: every parameter a ``jax.ShapeDtypeStruct`` carrying the
  ``NamedSharding`` its partition rule gives it on ``mesh`` (e.g. to plan a pod's layout)."""
  graphdef, state = nnx.split(abstract_model(cfg))
  for path, var in nnx.to_flat_state(state):
    shape, dtype = var.get_value().shape, var.get_value().dtype
    var.set_value(jax.ShapeDtypeStruct(shape, dtype,
                                       sharding=sharding.sharding_for(path, shape, mesh)))
  return nnx.merge(graphdef, state)


def init_sharded_model(cfg: ModelConfig, mesh: Mesh, seed: int = 0) -> Transformer:
  """A randomly initialised model whose parameters are created in their rule's sharding by one
  jitted init (each device computes only its own shards; no full copy anywhere)."""
  graphdef, abstract = nnx.split(abstract_sharded_model(cfg, mesh))
  out_shardings = jax.tree.map(lambda x: x.sharding, abstract)
  init = jax.jit(lambda: nnx.state(Transformer(cfg, rngs=nnx.Rngs(params=seed))),
                 out_shardings=out_shardings)
  return nnx.merge(graphdef, init())


def load_tokenizer(source: str):
  """The tokenizer that goes with ``source`` (same sources as load_model)."""
  from arenarl_jax.text.tokenizer import Tokenizer  # pylint: disable=g-import-not-at-top
  kind, path = resolve_source(source)
  return Tokenizer.from_gguf(path) if kind == "gguf" else Tokenizer.from_hf_dir(path)
