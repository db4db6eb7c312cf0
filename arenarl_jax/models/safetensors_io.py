"""HF checkpoint directories (config.json + *.safetensors, sharded or not) <-> our Transformer.

Parameters are built straight from the loaded arrays into the nnx state of ``abstract_model(cfg)``
(no random init first). Every parameter must come from the checkpoint with the expected shape;
tensors the model has no place for are an error when they belong to a module we implement (they
would change the function) and a logged warning otherwise (e.g. a vision tower).
"""
from __future__ import annotations

import dataclasses
import glob
import json
import logging
import os
import re
from typing import Callable, Iterable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save_file

from arenarl_jax import sharding
from arenarl_jax.models.config import ModelConfig, from_hf_config, to_hf_config
from arenarl_jax.models.transformer import Transformer, abstract_model

log = logging.getLogger(__name__)

INDEX_FILE = "model.safetensors.index.json"
# Our path inside block i -> the HF name after "model.layers.{i}.".
_BLOCK_NAMES = {
    ("attn_norm", "scale"): "input_layernorm.weight",
    ("attn", "q", "kernel"): "self_attn.q_proj.weight",
    ("attn", "k", "kernel"): "self_attn.k_proj.weight",
    ("attn", "v", "kernel"): "self_attn.v_proj.weight",
    ("attn", "o", "kernel"): "self_attn.o_proj.weight",
    ("attn", "q", "bias"): "self_attn.q_proj.bias",
    ("attn", "k", "bias"): "self_attn.k_proj.bias",
    ("attn", "v", "bias"): "self_attn.v_proj.bias",
    ("attn", "o", "bias"): "self_attn.o_proj.bias",
    ("attn", "q_norm", "scale"): "self_attn.q_norm.weight",
    ("attn", "k_norm", "scale"): "self_attn.k_norm.weight",
    ("mlp_norm", "scale"): "post_attention_layernorm.weight",
    ("mlp", "gate", "kernel"): "mlp.gate_proj.weight",
    ("mlp", "up", "kernel"): "mlp.up_proj.weight",
    ("mlp", "down", "kernel"): "mlp.down_proj.weight",
}
_TOP_NAMES = {
    ("embed",): "model.embed_tokens.weight",
    ("final_norm", "scale"): "model.norm.weight",
    ("lm_head", "kernel"): "lm_head.weight",
}
# Names under these prefixes belong to modules we implement: an unused one is an error.
_OWNED = re.compile(r"model\.(embed_tokens|norm|layers\.\d+\.(self_attn|mlp|input_layernorm|"
                    r"post_attention_layernorm))\.")
_IGNORED = re.compile(r".*rotary_emb\.inv_freq$")


def hf_name(path: tuple) -> str:
  """The HF tensor name of one of our parameter paths, e.g. ('layers', 3, 'mlp', 'up', 'kernel')."""
  if path[0] == "layers":
    return f"model.layers.{path[1]}.{_BLOCK_NAMES[tuple(path[2:])]}"
  return _TOP_NAMES[tuple(path)]


@dataclasses.dataclass
class TensorStore:
  """Named HF-layout (out, in) tensors, read whole or (where the format allows) by block.

  ``get`` loads one tensor whole; ``where`` names its file (for errors). ``shape_of`` and
  ``get_slice`` (both None when the format reads whole tensors only, e.g. GGUF, whose quantized
  blocks are dequantized a tensor at a time) give a tensor's shape without reading it and read
  only the block a tuple of slices selects. ``read`` is how the loader reads: it counts the bytes
  of every tensor or block it hands out in ``bytes_read``, the data this process asked of the
  checkpoint (the tensors' stored dtype; what the OS pages in around them is not counted)."""

  names: frozenset[str]
  get: Callable[[str], np.ndarray]
  where: Callable[[str], str]
  source: str  # the checkpoint as a whole (a directory or a file), for errors about it
  shape_of: Callable[[str], tuple[int, ...]] | None = None
  get_slice: Callable[[str, tuple[slice, ...]], np.ndarray] | None = None
  bytes_read: int = 0

  @property
  def sliceable(self) -> bool:
    return self.get_slice is not None and self.shape_of is not None

  def read(self, name: str, index: tuple[slice, ...] | None = None) -> np.ndarray:
    """Tensor ``name`` whole (``index`` None) or the block ``index`` selects; counted."""
    array = self.get(name) if index is None else self.get_slice(name, index)
    self.bytes_read += array.nbytes
    return array


def place(array: np.ndarray, target: jax.sharding.Sharding | None) -> jax.Array:
  """A host array on the device(s): whole on the default device (``target`` None), or straight
  into ``target``'s shards, each device receiving only its own slice (never a full copy)."""
  if target is None:
    return jnp.asarray(array)
  return jax.make_array_from_callback(array.shape, target, lambda index: array[index])


def model_from_tensors(cfg: ModelConfig, store: TensorStore, *,
                       mesh: Mesh | None = None, stored_layers: int | None = None) -> Transformer:
  """Fills ``abstract_model(cfg)`` from ``store`` (kernels transposed to [in, out]).

  ``stored_layers``: the checkpoint's own block count when ``cfg`` keeps only its first
  ``cfg.n_layers`` (``keep_config``): the later blocks' tensors are never read.

  ``mesh``: each parameter lands in its ``NamedSharding`` from ``sharding.py``'s partition rules
  (the model is never materialised on one device). A store that reads by block (safetensors)
  reads only the blocks this process's devices hold, each distinct block once (devices that
  replicate it, e.g. over 'data', share the read), so on a multi-host mesh each host reads its
  share of the checkpoint, not all of it; other stores read each tensor whole and send every
  device its slice. ``store.bytes_read`` afterwards says how much this process read."""
  graphdef, state = nnx.split(abstract_model(cfg))
  used = set()
  for path, var in nnx.to_flat_state(state):
    name = hf_name(path)
    if name not in store.names:
      raise KeyError(f"{store.where(name)}: missing tensor {name!r} (needed for {_dotted(path)})")
    kernel = path[-1] == "kernel"
    shape = tuple(var.get_value().shape)
    target = None if mesh is None else sharding.sharding_for(path, shape, mesh)
    if target is not None and store.sliceable:
      _check_shape(store, name, store.shape_of(name), shape, kernel)
      var.set_value(_read_blocks(store, name, shape, target, kernel, cfg.dtype))
    else:
      array = store.read(name)
      _check_shape(store, name, array.shape, shape, kernel)
      _check_float(store, name, array)
      host = np.ascontiguousarray((array.T if kernel else array).astype(cfg.dtype))
      var.set_value(place(host, target))
    used.add(name)
  _check_unused(cfg, store, used, stored_layers)
  log.info("%s: %d bytes of tensor data read by this process", store.source, store.bytes_read)
  return nnx.merge(graphdef, state)


def _read_blocks(store: TensorStore, name: str, shape: tuple[int, ...],
                 target: jax.sharding.Sharding, kernel: bool, dtype) -> jax.Array:
  """Parameter ``name`` (our layout, ``shape``) in ``target``, built from the blocks this
  process's devices hold. A kernel's [in, out] block is the transpose of the stored [out, in]
  block with the two index entries swapped."""
  blocks: dict[tuple, np.ndarray] = {}
  shards = []
  for device, index in target.addressable_devices_indices_map(shape).items():
    key = tuple(s.indices(n) for s, n in zip(index, shape))  # slices are unhashable before 3.12
    if key not in blocks:
      block = store.read(name, tuple(slice(*k) for k in (key[::-1] if kernel else key)))
      _check_float(store, name, block)
      blocks[key] = np.ascontiguousarray((block.T if kernel else block).astype(dtype))
    shards.append(jax.device_put(blocks[key], device))
  return jax.make_array_from_single_device_arrays(shape, target, shards)


def _check_shape(store: TensorStore, name: str, stored: Iterable[int], shape: tuple[int, ...],
                 kernel: bool) -> None:
  want = shape[::-1] if kernel else shape
  if tuple(stored) != want:
    raise ValueError(
        f"{store.where(name)}: tensor {name!r} has shape {tuple(stored)}, expected {want}")


def _check_float(store: TensorStore, name: str, array: np.ndarray) -> None:
  if not np.issubdtype(array.dtype, np.floating) and array.dtype.name != "bfloat16":
    raise ValueError(f"{store.where(name)}: tensor {name!r} has non-float dtype {array.dtype}")


def _check_unused(cfg: ModelConfig, store: TensorStore, used: set[str],
                  stored_layers: int | None = None) -> None:
  cut = lambda n: (stored_layers is not None and cfg.n_layers <= (_layer_index(n) or -1)
                   < stored_layers)
  extra = sorted(n for n in store.names - used if not _IGNORED.match(n) and not cut(n))
  if cfg.tie_embeddings and "lm_head.weight" in extra:
    # transformers ties the head to the embedding and ignores a stored copy; so do we.
    log.warning("%s: lm_head.weight ignored (tie_word_embeddings=true)", store.source)
    extra.remove("lm_head.weight")
  owned = [n for n in extra if _OWNED.match(n) or _layer_index(n) is not None]
  if owned:
    raise ValueError(f"{store.where(owned[0])}: tensor {owned[0]!r} has no place in our "
                     f"{cfg.family} model (unsupported feature or wrong config); all such: {owned}")
  if extra:
    log.warning("%s: %d unused tensors: %s", store.source, len(extra), extra[:20])


def _layer_index(name: str) -> int | None:
  m = re.match(r"model\.layers\.(\d+)\.", name)
  return int(m.group(1)) if m else None


def _dotted(path) -> str:
  return ".".join(str(p) for p in path)


def read_config(path: str) -> ModelConfig:
  """The ModelConfig of an HF directory's config.json (clear errors for a bad or missing file)."""
  config_path = os.path.join(path, "config.json")
  if not os.path.isfile(config_path):
    raise FileNotFoundError(f"{config_path}: not found (an HF checkpoint directory needs it)")
  try:
    with open(config_path) as f:
      hf = json.load(f)
  except json.JSONDecodeError as e:
    raise ValueError(f"{config_path}: not valid JSON ({e})") from e
  if not isinstance(hf, dict):
    raise ValueError(f"{config_path}: expected a JSON object")
  if hf.get("hidden_act", "silu") != "silu":
    raise ValueError(f"{config_path}: unsupported hidden_act {hf['hidden_act']!r} (silu only)")
  if hf.get("mlp_bias"):
    raise ValueError(f"{config_path}: mlp_bias=true is not supported")
  layer_types = set(hf.get("layer_types") or ["full_attention"])
  if hf.get("use_sliding_window") or layer_types != {"full_attention"}:
    raise ValueError(f"{config_path}: sliding-window attention is not supported")
  return from_hf_config(hf, source=config_path)


def _shard_files(path: str) -> dict[str, list[str] | None]:
  """{shard file: tensor names the index assigns to it, or None without an index}."""
  index_path = os.path.join(path, INDEX_FILE)
  if os.path.isfile(index_path):
    try:
      with open(index_path) as f:
        weight_map = json.load(f)["weight_map"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
      raise ValueError(f"{index_path}: not a valid safetensors index ({e!r})") from e
    files: dict[str, list[str]] = {}
    for name, file in weight_map.items():
      files.setdefault(os.path.join(path, file), []).append(name)
    for file in files:
      if not os.path.isfile(file):
        raise FileNotFoundError(f"{file}: shard listed in {index_path} is missing")
    return files
  found = sorted(glob.glob(os.path.join(path, "*.safetensors")))
  if not found:
    raise FileNotFoundError(f"{path}: no *.safetensors files (and no {INDEX_FILE})")
  return {file: None for file in found}


def open_safetensors_dir(path: str) -> TensorStore:
  """A TensorStore over every tensor of an HF directory's safetensors files (memory-mapped;
  whole tensors or blocks)."""
  handles, owner = {}, {}
  for file, listed in _shard_files(path).items():
    try:
      handle = safe_open(file, framework="np")
      keys = set(handle.keys())
    except (SafetensorError, OSError) as e:
      raise ValueError(f"{file}: corrupt or unreadable safetensors file ({e})") from e
    if listed is not None and (missing := sorted(set(listed) - keys)):
      raise KeyError(f"{file}: tensor {missing[0]!r} listed in {INDEX_FILE} is not in this shard")
    for key in (keys if listed is None else listed):
      if key in owner:
        raise ValueError(f"{file}: tensor {key!r} also stored in {owner[key]}")
      owner[key] = file
    handles[file] = handle

  def reading(name, what):
    """``what(handle)`` on the file holding ``name``; a read error names the file and tensor."""
    try:
      return what(handles[owner[name]])
    except SafetensorError as e:
      raise ValueError(f"{owner[name]}: cannot read tensor {name!r} ({e})") from e

  def get(name):
    return reading(name, lambda h: h.get_tensor(name))

  def shape_of(name):
    return reading(name, lambda h: tuple(h.get_slice(name).get_shape()))

  def get_slice(name, index):
    return reading(name, lambda h: h.get_slice(name)[index])

  return TensorStore(names=frozenset(owner), get=get, where=lambda n: owner.get(n, path),
                     source=path, shape_of=shape_of, get_slice=get_slice)


def keep_config(cfg: ModelConfig, keep_layers: int) -> ModelConfig:
  """``cfg`` cut to its first ``keep_layers`` blocks (0 keeps all): ``model.keep_layers``."""
  if not keep_layers:
    return cfg
  if not 0 < keep_layers <= cfg.n_layers:
    raise ValueError(f"model.keep_layers={keep_layers}: the model has {cfg.n_layers} layers "
                     "(0 keeps all)")
  return dataclasses.replace(cfg, n_layers=keep_layers)


def load_hf_dir(path: str, *, dtype=None, mesh: Mesh | None = None, keep_layers: int = 0
                ) -> tuple[ModelConfig, Transformer]:
  """Loads an HF llama/qwen2/qwen3 checkpoint directory; params in ``dtype`` (default float32),
  placed by the partition rules on ``mesh`` if given (each process reading only the blocks its
  devices hold: ``model_from_tensors``); ``keep_layers`` > 0 reads only the first blocks."""
  full = read_config(path)
  cfg = keep_config(full, keep_layers)
  if dtype is not None:
    cfg = dataclasses.replace(cfg, param_dtype=jnp.dtype(dtype).name)
  return cfg, model_from_tensors(cfg, open_safetensors_dir(path), mesh=mesh,
                                 stored_layers=full.n_layers)


def hf_tensors(model_or_state: Transformer | nnx.State) -> Iterable[tuple[str, np.ndarray]]:
  """(HF name, HF-layout numpy array) for every parameter."""
  state = model_or_state
  if isinstance(model_or_state, nnx.Module):
    state = nnx.state(model_or_state, nnx.Param)
  for path, var in nnx.to_flat_state(state):
    array = np.asarray(var.get_value() if hasattr(var, "get_value") else var)
    yield hf_name(path), np.ascontiguousarray(array.T if path[-1] == "kernel" else array)


def export_hf_dir(model_or_state: Transformer | nnx.State, cfg: ModelConfig, path: str) -> None:
  """Writes config.json + model.safetensors that transformers loads (tied head: no lm_head)."""
  os.makedirs(path, exist_ok=True)
  tensors: Mapping[str, np.ndarray] = dict(hf_tensors(model_or_state))
  if cfg.tie_embeddings:
    tensors.pop("lm_head.weight", None)
  save_file(tensors, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
  with open(os.path.join(path, "config.json"), "w") as f:
    json.dump(to_hf_config(cfg), f, indent=2)
