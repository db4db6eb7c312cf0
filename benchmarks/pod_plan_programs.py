"""The compiling half of ``benchmarks/pod_plan.py``: one process, one target, three programs.

``plan(spec)`` compiles, ahead of time and from abstract shapes (nothing is allocated), the
programs a pod run spends its memory in, each on the mesh it runs on:
- ``train_step``: ``rl/loop.make_trainer``'s jitted update (``trainer.py``) on the
  training mesh (data x fsdp x tensor), one minibatch of the rollout batch as ``rl/loop.run``
  forms it (each host's rows padded to its row multiple, split into
  ``rl.minibatches_per_rollout``), at ``train_tokens`` per row rounded up to ``rl.bucket``;
- ``prefill`` and ``decode`` (``sampling/programs.py``) on ONE host's sampling mesh
  (``sampling/layout.py``: the host's devices as (data, 1, tensor), parameters tensor-parallel,
  rows over 'data'), at that host's rows: prompts_per_step / hosts prompts x group_size.
  Prefill runs at a ``prompt_len``-token prompt bucket (0: the config's largest,
  ``sampling.prompt_buckets``, the longest prompt the sampler takes) into row buffers of the sampler's first
  cache size (``Sampler.prefill`` with no reserve); decode runs over the largest cache a row can
  reach (``sampling.cache_len`` slots after the shared prompt), donating its state as the
  sampler does.
Compiled as for the accelerator: the model's attention is ``dot_product_attention`` and the
backend is the plain one TPUs get (``jax.jit`` with XLA's defaults, ``jax.checkpoint`` remat);
the programs are traced on this process's CPU client, whose own backend (the CPU kernels and
compile options) is replaced for that. Parameters are the preset's, float32 masters with the
config's compute dtype (bfloat16 where it says ``auto``).

Targets: ``tpu`` compiles for a TPU topology through libtpu's compile-only devices
(``jax.experimental.topologies``; the hosts are the devices' ``process_index``); ``cpu``
compiles for this process's (fake) CPU devices, where every device belongs to process 0, so the
first ``chips_per_host`` devices stand for one host. Its numbers are an estimate of the TPU's.
"""
from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from arenarl_jax import config_tree, pipeline, sharding
from arenarl_jax.models import backend, loading
from arenarl_jax.models.config import get_preset
from arenarl_jax.models.transformer import set_attention
from arenarl_jax.rollout.settings import PolicySamplingSettings
from arenarl_jax.rl import batch as batch_lib
from arenarl_jax.rl import loop
from arenarl_jax.sampling import layout, policy_sampler, programs
from arenarl_jax.sampling.buckets import bucket_length, cache_size_ladder
from arenarl_jax.sampling.settings import SamplingSettings
from arenarl_jax.trainer import TrainState

ATTENTION = "dot_product_attention"
# v4 and v5p pods: two TensorCores per chip driven as one device (megacore), 2 x 2 x 1 chips per
# host (4 chips, one tensor-parallel group of the config's mesh).
TOPOLOGY_OPTIONS = dict(chip_config_name="megacore", chips_per_host_bounds=(2, 2, 1),
                        num_slices=1, wrap=(False, False, False))
PROGRAMS = ("train", "sample")  # the train step | prefill and decode


def use_accelerator_backend() -> None:
  """Makes the plain backend (what a TPU gets: XLA's defaults, dot_product attention) the one of
  this process's platform, so programs traced here compile as they would on the accelerator."""
  platform = jax.default_backend()
  backend.register(dataclasses.replace(backend.get("tpu"), platform=platform))


def target_devices(target: str, topology: str, devices: int) -> list:
  """The devices to compile for: a TPU topology's compile-only devices, or this process's."""
  if target == "tpu":
    from jax.experimental import topologies  # pylint: disable=g-import-not-at-top
    topo = topologies.get_topology_desc(platform="tpu", topology_name=topology,
                                        **TOPOLOGY_OPTIONS)
    return list(topo.devices)
  found = jax.devices()
  if len(found) < devices:
    raise ValueError(f"{devices} devices needed, this process has {len(found)} (XLA_FLAGS="
                     "--xla_force_host_platform_device_count must be set before JAX starts)")
  return found[:devices]


def host_mesh(target: str, train_mesh: Mesh, chips_per_host: int) -> tuple[Mesh, int]:
  """(one host's sampling mesh, the number of hosts)."""
  if target == "tpu":
    return layout.sampling_mesh(train_mesh), len({d.process_index for d in train_mesh.devices.flat})
  tensor = train_mesh.shape["tensor"]
  groups = np.asarray(train_mesh.devices).reshape(-1, tensor)[:chips_per_host // tensor]
  return Mesh(groups.reshape(-1, 1, tensor), sharding.AXES), train_mesh.devices.size // chips_per_host


def device_bytes(tree) -> int:
  """Bytes one device holds of a pytree of sharded ShapeDtypeStructs (the largest shard)."""
  return sum(math.prod(x.sharding.shard_shape(x.shape)) * np.dtype(x.dtype).itemsize
             for x in jax.tree.leaves(tree))


def _placed(shapes, shardings):
  return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                      shapes, shardings)


def _memory(compiled, over_hbm: str = "") -> dict[str, Any]:
  """XLA's per-device memory analysis; peak = arguments + outputs - aliased + temporaries."""
  m = compiled.memory_analysis()
  out = {"args": int(m.argument_size_in_bytes), "out": int(m.output_size_in_bytes),
         "alias": int(m.alias_size_in_bytes), "temp": int(m.temp_size_in_bytes)}
  out["peak"] = out["args"] + out["out"] - out["alias"] + out["temp"]
  out["over_hbm"] = over_hbm
  return out


def _gib(message: str, what: str) -> int | None:
  found = re.search(what + r" \(([\d.]+)G\)", message)
  return None if found is None else int(float(found.group(1)) * 2**30)


def compile_memory(lowered, args_bytes: int = 0) -> tuple[Any, dict[str, Any]]:
  """(``lowered`` compiled for its devices or None, its memory analysis). A TPU compile that
  needs more than the chip's HBM fails (``CompileTimeHbmOom``, giving the temporaries it needs in
  GiB): the analysis is then those temporaries plus ``args_bytes`` (the arguments per device),
  and ``over_hbm`` keeps the message."""
  try:
    compiled = lowered.compile()
    return compiled, _memory(compiled)
  except jax.errors.JaxRuntimeError as err:
    message = str(err)
    temp = _gib(message, "HLO temporaries")
    if "CompileTimeHbmOom" not in message or temp is None:
      raise
  over = re.search(r"Ran out of memory.*?HBM \([\d.]+G\)", message)
  return None, {"args": args_bytes, "out": 0, "alias": 0, "temp": temp,
                "peak": args_bytes + temp, "over_hbm": over.group(0) if over else message}


def available_hbm(devices) -> int | None:
  """The HBM per chip the TPU compiler plans with (read from the error of a program too large
  for any chip); None on other targets."""
  if devices[0].platform != "tpu":
    return None
  mesh = Mesh(np.asarray(devices), ("x",))
  big = jax.ShapeDtypeStruct((len(devices), 2**38), jnp.int8, sharding=NamedSharding(mesh, P("x")))
  try:
    jax.jit(lambda a: (a + 1)[:, ::-1]).lower(big).compile()
  except jax.errors.JaxRuntimeError as err:
    return _gib(str(err), "available HBM")
  return None


def model_config(config, preset: str):
  cfg = get_preset(preset)
  compute = config.model.compute_dtype
  return dataclasses.replace(cfg, compute_dtype="bfloat16" if compute == "auto" else compute)


def train_rows(config, hosts: int, mesh: Mesh) -> int:
  """Rows of one minibatch of the update, as ``rl/loop.run`` forms them."""
  rl = config.rl
  shards = mesh.shape["data"] * mesh.shape["fsdp"]
  multiple = rl.minibatches_per_rollout * rl.accumulation_steps * max(1, shards // hosts)
  local = rl.prompts_per_step // hosts * config.sampling.group_size
  return hosts * (-(-local // multiple) * multiple) // rl.minibatches_per_rollout


def compile_train(config, graphdef, params, mesh: Mesh, rows: int, tokens: int) -> dict[str, Any]:
  trainer = loop.make_trainer(pipeline.rl_settings(config), graphdef, params, mesh)
  p = _placed(params, trainer.param_shardings)
  opt = _placed(jax.eval_shape(trainer.optimizer.init, params), trainer.state_shardings.opt_state)
  state = TrainState(step=jax.ShapeDtypeStruct((), jnp.int32, sharding=trainer.state_shardings.step),
                     params=p, opt_state=opt)
  kinds = {"tokens_NT": jnp.int32, "loss_mask_NT": jnp.float32, "sampler_logp_NT": jnp.float32,
           "old_logp_NT": jnp.float32, "advantages_N": jnp.float32,
           "temperature_N": jnp.float32, "policy_step_N": jnp.int32}
  batch = {k: jax.ShapeDtypeStruct((rows, tokens) if k.endswith("_NT") else (rows,), dtype,
                                   sharding=trainer.rows) for k, dtype in kinds.items()}
  _, memory = compile_memory(trainer.step.lower(state, p, batch),
                             device_bytes((state, p, batch)))
  return {"memory": memory, "state_bytes": device_bytes(state), "ref_bytes": device_bytes(p)}


def compile_sampling(config, graphdef, params, mesh: Mesh, prompts: int,
                     prompt_len: int) -> dict[str, Any]:
  """Prefill and decode on ``mesh`` (one host's sampling mesh) for ``prompts`` x G rows."""
  s = config.sampling
  g, cache_len = s.group_size, s.cache_len
  specs = layout.sampling_specs(params, mesh)
  # The sampler's copy as make_sampler keeps it (bfloat16 under bfloat16 compute).
  narrow = policy_sampler.sampling_dtype(nnx.merge(graphdef, nnx.State(params)).cfg)
  sp = jax.tree.map(lambda x, spec: jax.ShapeDtypeStruct(
      x.shape, layout.copy_dtype(x.dtype, narrow), sharding=NamedSharding(mesh, spec)),
                    params, specs, is_leaf=lambda x: isinstance(x, jax.ShapeDtypeStruct))
  sgraph, sparams = nnx.split(nnx.merge(graphdef, nnx.State(sp)))
  whole = NamedSharding(mesh, P())
  n = prompts * g
  tokens = jax.ShapeDtypeStruct((prompts, prompt_len), jnp.int32, sharding=whole)
  counts = jax.ShapeDtypeStruct((prompts,), jnp.int32, sharding=whole)
  first = bucket_length(1, sorted(set(cache_size_ladder(cache_len)) | {cache_len}))
  prefill, prefill_memory = compile_memory(programs.prefill.lower(
      sgraph, sparams, tokens, counts, group_size=g, n_slots=first, mesh=mesh),
      device_bytes((sparams, tokens, counts)))
  if prefill is None:
    raise ValueError(f"prefill does not fit the chip: {prefill_memory['over_hbm']}")
  state = _placed(programs.prefill.jitted().eval_shape(
      sgraph, sparams, tokens, counts, group_size=g, n_slots=cache_len, mesh=mesh),
      prefill.output_shardings)
  lengths = jax.ShapeDtypeStruct((n,), jnp.int32, sharding=NamedSharding(mesh, P("data")))
  done = jax.ShapeDtypeStruct((n,), jnp.bool_, sharding=NamedSharding(mesh, P("data")))
  turn_args = dict(max_new_tokens=s.max_new_tokens, tail_len=1, cache_len=cache_len, mesh=mesh)
  begin = programs.begin_turn.lower(lengths, done, **turn_args).compile()
  turn = _placed(programs.begin_turn.eval_shape(lengths, done, **turn_args), begin.output_shardings)
  rows = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=whole),
                      SamplingSettings(temperature=s.temperature).rows(n, g))
  key = jax.ShapeDtypeStruct((), jax.eval_shape(lambda: jax.random.key(0)).dtype, sharding=whole)
  model = nnx.merge(sgraph, sparams)
  decode = programs.decode.lower(
      sgraph, sparams, state, turn, rows, key, None,
      decode_step=backend.current().decode_step(model), eos_ids=(0,), stop_sequences=(),
      max_new_tokens=s.max_new_tokens, cache_len=cache_len, mesh=mesh)
  _, decode_memory = compile_memory(decode, device_bytes((sparams, state, turn, rows)))
  return {"prefill": prefill_memory, "decode": decode_memory,
          "params_bytes": device_bytes(sparams), "cache_bytes": device_bytes(state.cache),
          "decode_slots": cache_len, "prefill_slots": first}


def plan(spec: dict[str, Any]) -> dict[str, Any]:
  """Compiles the three programs for ``spec`` (see ``pod_plan.worker_spec``); their memory."""
  use_accelerator_backend()
  config = config_tree.load_config_file(spec["config"])
  with config.unlocked():
    config.update_from_flattened_dict(spec.get("overrides", {}))
  devices = target_devices(spec["target"], spec["topology"], spec["devices"])
  train_mesh = sharding.make_mesh(**config.mesh, devices=devices)
  smesh, hosts = host_mesh(spec["target"], train_mesh, spec["chips_per_host"])
  cfg = model_config(config, spec["preset"])
  model = set_attention(loading.abstract_sharded_model(cfg, train_mesh), ATTENTION)
  graphdef, state = nnx.split(model)
  params = nnx.to_pure_dict(state)

  rl, s = config.rl, config.sampling
  if rl.prompts_per_step % hosts:
    raise ValueError(f"rl.prompts_per_step={rl.prompts_per_step} does not split over {hosts} hosts")
  rows = train_rows(config, hosts, train_mesh)
  # Prefill at the longest prompt the sampler takes: the config's largest prompt bucket.
  spec = dict(spec, prompt_len=spec.get("prompt_len") or policy_sampler.prompt_buckets(
      PolicySamplingSettings.from_config(config.sampling))[-1])
  tokens = batch_lib.bucket_length(spec.get("train_tokens") or s.cache_len, rl.bucket)
  prompts = rl.prompts_per_step // hosts
  specs = layout.sampling_specs(params, smesh)
  whole = lambda x: math.prod(x.shape) * np.dtype(x.dtype).itemsize  # noqa: E731
  replicated = sum(whole(x) for x, spec_ in zip(
      jax.tree.leaves(params), jax.tree.leaves(specs, is_leaf=lambda v: isinstance(v, P)))
                   if all(a is None for a in spec_))
  out = {"target": spec["target"], "hosts": hosts, "mesh": dict(train_mesh.shape),
         "sampling_mesh": dict(smesh.shape), "train_rows": rows, "train_tokens": tokens,
         "prompts_per_host": prompts, "rows_per_host": prompts * s.group_size,
         "prompt_len": spec["prompt_len"],
         "params_total_bytes": sum(whole(x) for x in jax.tree.leaves(params)),
         "params_replicated_bytes": replicated, "train_params_bytes": device_bytes(params),
         "hbm_available": available_hbm(devices)}
  if "train" in spec.get("programs", PROGRAMS):
    out["train"] = compile_train(config, graphdef, params, train_mesh, rows, tokens)
  if "sample" in spec.get("programs", PROGRAMS):
    out.update(compile_sampling(config, graphdef, params, smesh, prompts, spec["prompt_len"]))
  return out
