"""SFT updates on whole padded rows against rows cut after their last trained token.

  .venv/bin/python benchmarks/sft_rows.py [--config configs/quickstart.py] [--steps 30]

The quickstart's model and data (its task tokenizer, built in a scratch workdir, and its
whole-conversation SFT batches of ``data.sft_batch_size`` x ``data.sft_seq_len``), one update at a
time through ``sft/stage.py``'s trainer: ``whole`` feeds every row at ``data.sft_seq_len`` tokens,
``cut`` feeds the same batches cut by ``data/pipeline.trained_width`` (``data.sft_bucket``), the
training default. The two see the same batches from the same start and must report the same loss
(causal attention: no trained position sees the padding), so the first step's losses are printed
side by side. Times are the median over ``--steps`` updates after one warm-up update per shape
(each cut width compiles once). Ends with one ``RESULT`` line.
"""
from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import time

import jax
import numpy as np
from flax import nnx

from arenarl_jax import config_tree, pipeline as door, sharding
from arenarl_jax.data import pipeline
from arenarl_jax.envs import base, compact_schemas
from arenarl_jax.sft import stage


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--config", default="configs/quickstart.py")
  parser.add_argument("--steps", type=int, default=30)
  args = parser.parse_args()
  config = config_tree.load_config_file(args.config)
  env = base.make_environment(config.env.name, seed=config.env.seed)
  mesh = sharding.make_mesh(**config.mesh)
  policy = door.make_policy(config, tempfile.mkdtemp(prefix="sft_rows_"), env, mesh)
  source = stage.builder.data_source(door.dataset_path(config), "sft")
  tools = compact_schemas.tool_source(env, config.env.schemas).tools()
  settings = door.sft_settings(config)
  batches = list(itertools.islice(iter(pipeline.sft_batches_for(
      settings.data, settings, source, tokenizer=policy.tokenizer, tools=tools)),
      args.steps + 1))
  graphdef, params = nnx.split(policy.model)
  params = nnx.to_pure_dict(params)
  bucket = int(config.data.sft_bucket)
  results, first_loss, seen = {}, {}, {}
  for name in ("whole", "cut"):
    trainer = stage.make_trainer(settings, graphdef, params, mesh)
    state = trainer.init_state(jax.tree.map(np.array, params))
    times = []
    for k, local in enumerate(batches):
      t = pipeline.trained_width(local["loss_mask_NT"], bucket if name == "cut" else 0)
      batch = trainer.put_batch(pipeline.cut(local, t))
      start = time.perf_counter()
      state, m = trainer.step(state, None, batch)
      loss = float(jax.device_get(m["loss"]))
      elapsed = time.perf_counter() - start
      if k == 0:
        first_loss[name] = loss
      if (name, t) in seen:  # the shape's first update compiles
        times.append(elapsed)
      seen[(name, t)] = True
    results[name] = statistics.median(times)
    print(f"{name:6s} median {results[name]:.3f} s/update over {len(times)} updates, "
          f"first loss {first_loss[name]:.6f}")
  widths = [pipeline.trained_width(b["loss_mask_NT"], bucket) for b in batches]
  seq_len = int(config.data.sft_seq_len)
  print(f"cut widths: mean {np.mean(widths):.0f} of {seq_len} (bucket {bucket})")
  print(f"RESULT whole_s={results['whole']:.4f} cut_s={results['cut']:.4f} "
        f"speedup={results['whole'] / results['cut']:.2f} mean_width={np.mean(widths):.0f} "
        f"seq_len={seq_len} loss_whole={first_loss['whole']:.6f} "
        f"loss_cut={first_loss['cut']:.6f}")


if __name__ == "__main__":
  main()
