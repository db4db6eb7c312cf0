"""Where the policy samples: each host's own devices as one mesh, and the jitted resharding that
moves the training parameters there at every RL step.

The layout. Each host samples and judges its own groups (a group never spans hosts), so its
sampling mesh is its own devices of the training mesh, shaped (data, 1, tensor):
- tensor parallelism over the training mesh's 'tensor' axis, on the same devices: the partition
  rules (``sharding.py``) split the attention heads (and so the KV cache's heads), the MLP's
  hidden units and the vocabulary over it;
- rows (trajectories) over 'data', the rest of the host's devices;
- no 'fsdp': the sampler reads every weight at every decode step, so each device holds its
  tensor slice whole. Per device that is (parameter bytes / tensor size) plus the replicated
  vectors (norms), never a full copy unless the training mesh's tensor axis is 1.
A global sampling mesh (one program over every host's rows) would make every decode step of every
host wait for the slowest host and cross the inter-host network for the row axis; the host-local
mesh keeps decoding on a host's own interconnect and lets hosts finish their turns independently.

The move is one jitted program (``SamplingLayout.place``): from the training layout to the
sampling layout expressed on the source arrays' own mesh (an all-gather over 'fsdp' and 'data',
collectives only, nothing through the host), then each host's shards are rewrapped, without a
copy, as arrays of its sampling mesh. Both meshes hold a device at the same 'tensor' index.

The sampler's copy may be narrower than the master parameters (``SamplingLayout(dtype=...)``):
a bfloat16-compute model casts every float32 weight to bfloat16 at use anyway, so the sampler
holds them in bfloat16 (cast in the same program as the move): half the bytes on every chip
while the update runs beside it, half the weight bytes each decode step reads, and the same
samples (the values a float32 copy gives after the cast at use).
"""
from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding

from arenarl_jax import sharding


def sampling_mesh(train_mesh: Mesh) -> Mesh:
  """This process's devices of ``train_mesh`` as a (data, 1, tensor) mesh with the same tensor
  groups: row r of the result is one (data, fsdp) position of the training mesh."""
  tensor = train_mesh.shape["tensor"]
  groups = np.asarray(train_mesh.devices).reshape(-1, tensor)
  me = jax.process_index()
  mine = []
  for group in groups:
    owners = {d.process_index for d in group}
    if len(owners) > 1:
      raise ValueError(
          f"mesh.tensor={tensor}: a tensor-parallel group spans processes {sorted(owners)}; "
          "the sampler runs on each host's own devices, so mesh.tensor must divide the devices "
          "of one host")
    if owners == {me}:
      mine.append(group)
  if not mine:
    raise ValueError(f"process {me} holds no device of the training mesh {dict(train_mesh.shape)}")
  return Mesh(np.stack(mine).reshape(-1, 1, tensor), sharding.AXES)


def sampling_specs(params, mesh: Mesh):
  """The partition spec of every parameter in the sampling layout (pytree like ``params``)."""
  return jax.tree_util.tree_map_with_path(
      lambda path, x: sharding.spec_for(sharding.path_str(path), np.shape(x), mesh), params)


def copy_dtype(dtype, narrow):
  """The dtype the sampling copy holds a ``dtype`` parameter in: ``narrow`` for floating ones
  when it is set, else ``dtype``."""
  if narrow is None or not jax.numpy.issubdtype(dtype, jax.numpy.floating):
    return jax.numpy.dtype(dtype)
  return jax.numpy.dtype(narrow)


class SamplingLayout:
  """The sampling mesh of one host and the resharding into it (one compiled program per set of
  source shardings: once per run)."""

  def __init__(self, train_mesh: Mesh, dtype=None):
    self.mesh = sampling_mesh(train_mesh)
    # The floating parameters' dtype in the sampling copy (None: as they come).
    self.dtype = None if dtype is None else jax.numpy.dtype(dtype)
    self._specs = {}  # (treedef, shapes) -> each leaf's spec: the rules run once per run
    self._moves = {}

  def place(self, params):
    """``params`` (a pytree of arrays in any layout: the train state's, one device's, host
    arrays) in the sampling layout on this host's sampling mesh."""
    leaves, treedef = jax.tree.flatten(params)
    shapes = (treedef, tuple(np.shape(x) for x in leaves))
    if shapes not in self._specs:
      self._specs[shapes] = tuple(jax.tree.leaves(
          sampling_specs(params, self.mesh),
          is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec)))
    specs = self._specs[shapes]
    # Arrays spread over several processes move on their own mesh (every process joins);
    # anything this process holds whole moves straight onto the sampling mesh.
    spread = {x.sharding.mesh for x in leaves
              if isinstance(x, jax.Array) and not x.is_fully_addressable}
    if len(spread) > 1:
      raise ValueError("SamplingLayout.place: parameters spread over processes must share one mesh")
    source = spread.pop() if spread else self.mesh
    key = (source, treedef, specs)
    if key not in self._moves:
      out = [NamedSharding(source, spec) for spec in specs]
      self._moves[key] = jax.jit(lambda xs: [self.cast(x) for x in xs], out_shardings=out)
    moved = self._moves[key](leaves)
    if source is not self.mesh:
      moved = [self._rewrap(x, spec) for x, spec in zip(moved, specs)]
    return jax.tree.unflatten(treedef, moved)

  def cast(self, x):
    """``x`` as the sampling copy holds it (``copy_dtype``)."""
    return x.astype(copy_dtype(x.dtype, self.dtype))

  def _rewrap(self, x: jax.Array, spec) -> jax.Array:
    """This host's shards of ``x`` (already laid out as ``spec`` on the source mesh) as one
    array of the sampling mesh: no data moves."""
    target = NamedSharding(self.mesh, spec)
    by_device = {s.device: s.data for s in x.addressable_shards}
    return jax.make_array_from_single_device_arrays(
        x.shape, target, [by_device[d] for d in target.addressable_devices_indices_map(x.shape)])
