"""The policy's sampler as the RL loop and the evaluation use it: built from ``sampling.*`` and
pointed at the train state's current parameters (device to device, never through the host)."""
from __future__ import annotations

import functools

import jax
import ml_collections
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from arenarl_jax.sampling.sampler import Sampler, SamplingSettings


def make_sampler(config: ml_collections.ConfigDict, model) -> Sampler:
  """The policy's sampler (unsharded: it reads parameters placed on one local device)."""
  return Sampler(model, cache_len=config.sampling.cache_len)


def sampling_settings(config: ml_collections.ConfigDict, tokenizer) -> SamplingSettings:
  s = config.sampling
  return SamplingSettings(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k,
                          eos_ids=(tokenizer.eos_id,), max_new_tokens=s.max_new_tokens)


def on_one_device(params):
  """``params`` (any placement) on this process's first device: a device-to-device copy.

  Arrays spread over several processes (a multi-host train state) are first replicated over
  their mesh (one jitted all-gather that every process joins), then this process's copy is
  taken; nothing goes through the host."""
  device = jax.local_devices()[0]
  leaves, treedef = jax.tree.flatten(params)
  spread = [i for i, x in enumerate(leaves) if isinstance(x, jax.Array)
            and not x.is_fully_addressable]
  if spread:
    meshes = {leaves[i].sharding.mesh for i in spread}
    if len(meshes) != 1 or not isinstance(leaves[spread[0]].sharding, NamedSharding):
      raise ValueError("on_one_device: multi-process parameters must share one NamedSharding "
                       "mesh")
    whole = NamedSharding(meshes.pop(), PartitionSpec())
    gathered = _replicate_over(whole)([leaves[i] for i in spread])
    for i, x in zip(spread, gathered):
      leaves[i] = next(s.data for s in x.addressable_shards if s.device == device)
  return jax.tree.unflatten(treedef, [jax.device_put(x, device) for x in leaves])


@functools.lru_cache(maxsize=None)
def _replicate_over(whole: NamedSharding):
  """One jitted all-gather per mesh, compiled once for the run (not once per RL step)."""
  return jax.jit(lambda xs: xs, out_shardings=whole)


def set_policy(sampler: Sampler, params) -> None:
  """Points the sampler at ``params`` (a pure dict from the train state)."""
  sampler.set_params(nnx.State(on_one_device(params)))
