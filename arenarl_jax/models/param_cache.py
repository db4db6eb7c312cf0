"""Converted parameters cached on disk (orbax), keyed by the source file's path, size and mtime.

Dequantizing a GGUF takes seconds; restoring the float arrays takes a fraction of that. A cache
folder holds ``params/`` (an orbax checkpoint of the flat parameter dict) and ``model_config.json``,
and is renamed into place only when complete, so a crashed writer never leaves a half cache.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import uuid

import jax
import orbax.checkpoint as ocp
from flax import nnx

from arenarl_jax import sharding
from arenarl_jax.models.config import ModelConfig
from arenarl_jax.models.transformer import Transformer, abstract_model

log = logging.getLogger(__name__)

# Bump when the conversion changes, so stale caches are not reused.
_VERSION = 1
_CONFIG_FILE = "model_config.json"


def cache_key(path: str, *, dtype: str, keep_layers: int = 0) -> str:
  """``<file stem>-<hash of absolute path, size, mtime_ns, dtype, kept layers, format version>``
  (the kept layers only when some are cut, so a whole model's key is unchanged)."""
  st = os.stat(path)
  ident = f"{os.path.abspath(path)}|{st.st_size}|{st.st_mtime_ns}|{dtype}|v{_VERSION}"
  if keep_layers:
    ident += f"|keep{keep_layers}"
  stem = os.path.splitext(os.path.basename(path))[0]
  return f"{stem}-{hashlib.sha256(ident.encode()).hexdigest()[:16]}"


def config_to_json(cfg: ModelConfig) -> dict:
  out = dataclasses.asdict(cfg)
  out["rope_scaling"] = [list(kv) for kv in cfg.rope_scaling]
  return out


def config_from_json(data: dict) -> ModelConfig:
  data = dict(data, rope_scaling=tuple(tuple(kv) for kv in data.get("rope_scaling", ())))
  return ModelConfig(**data)


def _flat(state) -> dict[str, object]:
  return {"/".join(map(str, path)): var.get_value() for path, var in nnx.to_flat_state(state)}


def save(folder: str, cfg: ModelConfig, model: Transformer) -> None:
  """Writes ``model``'s parameters and config to ``folder`` (atomically: temp folder + rename)."""
  parent = os.path.dirname(os.path.abspath(folder))
  os.makedirs(parent, exist_ok=True)
  tmp = os.path.join(parent, f".tmp-{uuid.uuid4().hex}")
  try:
    with ocp.StandardCheckpointer() as ckpt:
      ckpt.save(os.path.join(tmp, "params"), _flat(nnx.state(model, nnx.Param)))
      ckpt.wait_until_finished()
    with open(os.path.join(tmp, _CONFIG_FILE), "w") as f:
      json.dump(config_to_json(cfg), f, indent=2)
    if os.path.isdir(folder):  # another process finished first; its copy is as good
      return
    os.rename(tmp, folder)
  finally:
    shutil.rmtree(tmp, ignore_errors=True)


def restore(folder: str, mesh: jax.sharding.Mesh | None = None
            ) -> tuple[ModelConfig, Transformer] | None:
  """The cached (cfg, model), or None if ``folder`` holds no complete, readable cache.

  ``mesh``: orbax reads each parameter straight into its partition rule's sharding."""
  config_path = os.path.join(folder, _CONFIG_FILE)
  if not os.path.isfile(config_path):
    return None
  try:
    with open(config_path) as f:
      cfg = config_from_json(json.load(f))
    graphdef, state = nnx.split(abstract_model(cfg))
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    target = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=device if mesh is None else
                                      sharding.sharding_for(k, v.shape, mesh))
              for k, v in _flat(state).items()}
    with ocp.StandardCheckpointer() as ckpt:
      arrays = ckpt.restore(os.path.join(folder, "params"), target)
  except Exception as e:  # pylint: disable=broad-except
    # A damaged cache is only a cache: say so, drop it and let the caller convert again.
    log.warning("%s: unreadable parameter cache (%s: %s); rebuilding it", folder,
                type(e).__name__, e)
    shutil.rmtree(folder, ignore_errors=True)
    return None
  for path, var in nnx.to_flat_state(state):
    var.set_value(arrays["/".join(map(str, path))])
  return cfg, nnx.merge(graphdef, state)
