"""One process of the two-process host-slices test (tests/models/test_host_slices.py).

  python tests/models/host_slices_run.py CKPT OUT_JSON --proc I --port P

Joins a 2-process jax.distributed run on CPU (gloo), loads the HF checkpoint ``CKPT`` onto a
fsdp=2 x tensor=2 mesh of the 4 global devices (this process holds the fsdp half on its own two
devices) and writes to ``OUT_JSON`` the bytes it read, the checkpoint's parameter bytes and every
parameter whose local shards differ from the checkpoint's values.
"""
import argparse
import json
import os
import sys


def main(argv):
  parser = argparse.ArgumentParser()
  parser.add_argument("ckpt")
  parser.add_argument("out")
  parser.add_argument("--proc", type=int, required=True)
  parser.add_argument("--port", type=int, required=True)
  args = parser.parse_args(argv)
  import jax  # pylint: disable=import-outside-toplevel
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(coordinator_address=f"127.0.0.1:{args.port}", num_processes=2,
                             process_id=args.proc)
  import numpy as np  # pylint: disable=import-outside-toplevel
  from flax import nnx  # pylint: disable=import-outside-toplevel
  from safetensors.numpy import load_file  # pylint: disable=import-outside-toplevel
  from arenarl_jax import sharding  # pylint: disable=import-outside-toplevel
  from arenarl_jax.models import safetensors_io as st  # pylint: disable=import-outside-toplevel

  mesh = sharding.make_mesh(data=1, fsdp=2, tensor=2)
  store = st.open_safetensors_dir(args.ckpt)
  model = st.model_from_tensors(st.read_config(args.ckpt), store, mesh=mesh)
  stored = load_file(os.path.join(args.ckpt, "model.safetensors"))  # the reference, read whole
  wrong, split = [], []
  for path, var in nnx.to_flat_state(nnx.state(model)):
    array = var.get_value()
    want = stored[st.hf_name(path)]
    want = want.T if path[-1] == "kernel" else want
    if array.sharding != sharding.sharding_for(path, array.shape, mesh):
      wrong.append(f"{'/'.join(map(str, path))}: sharding {array.sharding.spec}")
    if not array.is_fully_addressable:
      split.append("/".join(map(str, path)))
    for shard in array.addressable_shards:
      if not np.array_equal(np.asarray(shard.data), want[shard.index]):
        wrong.append(f"{'/'.join(map(str, path))}: values at {shard.index}")
  with open(args.out, "w", encoding="utf-8") as f:
    json.dump({"bytes_read": store.bytes_read, "split": split, "wrong": wrong,
               "param_bytes": int(sum(x.nbytes for x in stored.values()))}, f)
  jax.distributed.shutdown()


if __name__ == "__main__":
  sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
  main(sys.argv[1:])
