"""Device mesh (data / fsdp / tensor axes) and parameter partition rules by path regex."""
from __future__ import annotations

import math
import re
from typing import Any, Sequence

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

AXES = ("data", "fsdp", "tensor")

# (regex on the "/"-joined parameter path, spec per array axis). First match wins. Kernels are
# stored [in, out]: the input dim goes over fsdp, the output dim over tensor (Megatron-style
# column/row split, so the attention and MLP blocks need one reduction each).
DEFAULT_RULES: tuple[tuple[str, P], ...] = (
    (r"(^|/)embed$", P("tensor", "fsdp")),  # [V, D]
    (r"/attn/(q|k|v)/kernel$", P("fsdp", "tensor")),  # [D, H*F]
    (r"/attn/(q|k|v)/bias$", P("tensor")),
    (r"/attn/o/kernel$", P("tensor", "fsdp")),  # [H*F, D]
    (r"/mlp/(gate|up)/kernel$", P("fsdp", "tensor")),  # [D, ffn]
    (r"/mlp/down/kernel$", P("tensor", "fsdp")),  # [ffn, D]
    (r"(^|/)lm_head/kernel$", P("fsdp", "tensor")),  # [D, V]
    (r".*", P()),  # norms, scalars: replicated
)


def make_mesh(data: int = -1, fsdp: int = 1, tensor: int = 1, *,
              devices: Sequence[jax.Device] | None = None) -> Mesh:
  """A (data, fsdp, tensor) mesh; one size may be -1 to take all remaining devices."""
  devices = list(jax.devices() if devices is None else devices)
  sizes = [data, fsdp, tensor]
  if sizes.count(-1) > 1:
    raise ValueError(f"make_mesh: at most one axis size may be -1, got {dict(zip(AXES, sizes))}")
  known = math.prod(s for s in sizes if s != -1)
  if any(s == 0 or s < -1 for s in sizes) or len(devices) % known:
    raise ValueError(f"make_mesh: axis sizes {dict(zip(AXES, sizes))} do not fit "
                     f"{len(devices)} devices")
  sizes = [len(devices) // known if s == -1 else s for s in sizes]
  if math.prod(sizes) != len(devices):
    raise ValueError(f"make_mesh: axis sizes {dict(zip(AXES, sizes))} use {math.prod(sizes)} "
                     f"devices, but {len(devices)} are given")
  return Mesh(np.asarray(devices).reshape(sizes), AXES)


def rows_sharding(mesh: Mesh) -> NamedSharding:
  """Axis 0 (rows: prompts, trajectories, batch) over 'data'; everything else replicated."""
  return NamedSharding(mesh, P("data"))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def path_str(path: Sequence[Any]) -> str:
  """'layers/0/attn/q/kernel' from a jax key path or an nnx state path."""
  parts = []
  for key in path:
    for attr in ("key", "name", "idx"):
      if hasattr(key, attr):
        key = getattr(key, attr)
        break
    parts.append(str(key))
  if parts and parts[-1] == "value":  # an nnx.Variable's leaf: name the variable itself
    parts.pop()
  return "/".join(parts)


def spec_for(path: str, shape: Sequence[int], mesh: Mesh,
             rules: Sequence[tuple[str, P]] = DEFAULT_RULES) -> P:
  """The first matching rule's spec, fitted to the array: mesh axes that do not divide a dim (or
  that a rule names past the array's rank) are dropped, so small/odd arrays stay replicated."""
  for pattern, spec in rules:
    if re.search(pattern, path):
      break
  else:
    raise ValueError(f"no partition rule matches parameter {path!r}; add a catch-all rule")
  fitted = []
  for dim, axes in zip(shape, tuple(spec) + (None,) * (len(shape) - len(spec))):
    names = () if axes is None else (axes if isinstance(axes, tuple) else (axes,))
    for name in names:
      if name not in mesh.shape:
        raise ValueError(f"rule {pattern!r} for {path!r} names axis {name!r}, "
                         f"not in mesh axes {tuple(mesh.shape)}")
    size = math.prod(mesh.shape[name] for name in names)
    fitted.append(axes if names and dim % size == 0 and size > 1 else None)
  return P(*fitted)


def sharding_for(path: Sequence[Any] | str, shape: Sequence[int], mesh: Mesh,
                 rules: Sequence[tuple[str, P]] = DEFAULT_RULES) -> NamedSharding:
  """The NamedSharding of one parameter (``path``: a key path, an nnx state path or a string)."""
  name = path if isinstance(path, str) else path_str(path)
  return NamedSharding(mesh, spec_for(name, shape, mesh, rules))


def param_shardings(tree: Any, mesh: Mesh, rules: Sequence[tuple[str, P]] = DEFAULT_RULES):
  """A pytree of NamedSharding matching ``tree`` (an nnx.State, dict of arrays, ...)."""
  def one(path, x):
    return NamedSharding(mesh, spec_for(path_str(path), np.shape(x), mesh, rules))
  return jax.tree_util.tree_map_with_path(one, tree)


def shard_params(tree: Any, mesh: Mesh, rules: Sequence[tuple[str, P]] = DEFAULT_RULES):
  """Places a parameter pytree (or an nnx.Module, in place) on the mesh by the partition rules."""
  if isinstance(tree, nnx.Module):
    state = nnx.state(tree)
    nnx.update(tree, jax.device_put(state, param_shardings(state, mesh, rules)))
    return tree
  return jax.device_put(tree, param_shardings(tree, mesh, rules))
