"""SFT input pipeline (render + tokenise at read time) vs the SFT step that consumes it, SmolLM2.

  .venv/bin/python benchmarks/data.py                       # 8 x 512, the comparison that counts
  .venv/bin/python benchmarks/data.py --quick               # smoke run: step at 2 x 128
  .venv/bin/python benchmarks/data.py --env travel          # an environment's sft split

Data: by default synthetic tool-using conversations (a think block, a tool call, its result and an
answer) written in the reference jsonl layout and imported, each rendering to at least ``seq_len``
tokens with the tool prompt; ``--env NAME`` builds that environment's dataset instead. Both go
through ``data.pipeline.sft_batches`` with SmolLM2's tokenizer: examples/s is what the pipeline
delivers (warm, first batch excluded). The step is a plain full-parameter SFT step on SmolLM2
(masked next-token NLL through ``token_logprobs``, AdamW, f32, jit with donated state) at
``batch x seq_len``, timed in the same process (median of ``--repeats`` after compilation);
step_examples_s = batch / step seconds. Target: examples_s >= 2 x step_examples_s.
Ends with ``RESULT examples_s=... step_examples_s=... ratio=...``.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import tempfile
import time

import numpy as np

from arenarl_jax.data import builder, pipeline, records

import timing  # benchmarks/timing.py (the script folder is on sys.path)

_WORDS = ("route", "museum", "station", "harbour", "bridge", "market", "garden", "tower",
          "ticket", "morning", "evening", "walk", "train", "flight", "hotel", "coffee")
TOOLS = [{"name": "lookup", "description": "Looks a place up and returns its details.",
          "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                         "required": ["query"]}}]


def _text(rng: np.random.Generator, words: int) -> str:
  return " ".join(rng.choice(_WORDS, size=words))


def write_synthetic(root: str, n: int, seed: int = 0) -> None:
  """``n`` SFT conversations (and the train/test files the layout requires) under ``root``."""
  rng = np.random.default_rng(seed)
  for kind in ("train", "test", "sft"):
    os.makedirs(os.path.join(root, kind), exist_ok=True)
  rows = []
  for _ in range(n):
    rows.append({"query": f"Plan this: {_text(rng, 30)}?", "reference": [
        {"role": "assistant", "content": "", "reasoning_content": _text(rng, 120),
         "tool_calls": [{"id": "c0", "type": "function", "function": {
             "name": "lookup", "arguments": json.dumps({"query": _text(rng, 6)})}}]},
        {"role": "tool", "tool_call_id": "c0", "content": _text(rng, 200)},
        {"role": "assistant", "content": _text(rng, 150)}]})
  for kind in ("test", "sft"):
    with open(os.path.join(root, kind, "synthetic.jsonl"), "w") as f:
      f.writelines(json.dumps(r) + "\n" for r in (rows if kind == "sft" else rows[:2]))
  with open(os.path.join(root, "train", "synthetic.jsonl"), "w") as f:
    f.write(json.dumps({"query": rows[0]["query"]}) + "\n")


def sft_source(args, workdir: str):
  """(sft data source, tool schemas) for the benchmark."""
  if args.env:
    from arenarl_jax.envs import base  # pylint: disable=g-import-not-at-top
    path = builder.build(builder.SourceConfig(env=args.env, env_seed=0), workdir)
    return builder.data_source(path, records.SFT), base.make_environment(
        args.env, 0).tool_source().tools()
  root = os.path.join(workdir, "jsonl")
  write_synthetic(root, args.records)
  path = builder.build(builder.SourceConfig(source="import", env="synthetic", import_dir=root),
                       workdir)
  return builder.data_source(path, records.SFT), TOOLS


def time_pipeline(source, tools, tokenizer, args) -> tuple[float, float, np.ndarray]:
  """(examples/s, mean real tokens per example, one batch) over ``args.examples`` examples."""
  it = iter(pipeline.sft_batches(source, tokenizer=tokenizer, seq_len=args.seq_len,
                                 batch_size=args.batch, seed=0, tools=tools, process_index=0,
                                 process_count=1, read_threads=args.read_threads,
                                 prefetch=4 * args.batch if args.read_threads else 0))
  first = next(it)  # warm: threads started, first records read
  batches = max(1, args.examples // args.batch)
  real = 0
  start = time.perf_counter()
  for _ in range(batches):
    batch = next(it)
    real += int((batch["tokens_NT"] != tokenizer.pad_id).sum())
  seconds = time.perf_counter() - start
  n = batches * args.batch
  return n / seconds, real / n, first


def time_step(batch, n: int, t: int, repeats: int) -> tuple[float, float]:
  """(step seconds, loss) of a full-parameter SFT step on SmolLM2 at n x t."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top
  from flax import nnx  # pylint: disable=g-import-not-at-top

  from arenarl_jax.models.loading import load_model  # pylint: disable=g-import-not-at-top
  from arenarl_jax.models.logprobs import token_logprobs  # pylint: disable=g-import-not-at-top

  _, model = load_model("smollm2")
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)
  opt = optax.adamw(1e-5, b1=0.9, b2=0.98, weight_decay=0.1)
  opt_state = opt.init(params)
  # The last t tokens of each row (a short window still holds assistant tokens to train on).
  tokens_NT = jnp.asarray(np.resize(batch["tokens_NT"][:, -t:], (n, t)))
  mask_NT = jnp.asarray(np.resize(batch["loss_mask_NT"][:, -t:], (n, t))).at[:, 0].set(0)

  def loss_fn(params, tokens_NT, mask_NT):
    lp_NT = token_logprobs(nnx.merge(graphdef, params, rest), tokens_NT, chunk=64)
    mask = mask_NT.astype(jnp.float32)
    return -(lp_NT * mask).sum() / jnp.maximum(mask.sum(), 1.0)

  @functools.partial(jax.jit, donate_argnums=(0, 1))
  def step(params, opt_state, tokens_NT, mask_NT):
    loss, grads = jax.value_and_grad(loss_fn)(params, tokens_NT, mask_NT)
    updates, opt_state = opt.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  state = {"params": params, "opt": opt_state, "loss": None}

  def run():
    state["params"], state["opt"], loss = step(state["params"], state["opt"], tokens_NT, mask_NT)
    state["loss"] = float(loss)

  run()  # compile
  return timing.median_time(run, repeats), state["loss"]


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--batch", type=int, default=8)
  p.add_argument("--seq-len", type=int, default=512)
  p.add_argument("--examples", type=int, default=512, help="examples timed through the pipeline")
  p.add_argument("--records", type=int, default=256, help="synthetic SFT conversations")
  p.add_argument("--read-threads", type=int, default=0)
  p.add_argument("--repeats", type=int, default=2, help="timed SFT steps (after compiling)")
  p.add_argument("--env", default="", help="an environment's sft split instead of synthetic data")
  p.add_argument("--quick", action="store_true", help="smoke run: step at 2 x 128, 64 examples")
  args = p.parse_args()
  step_n, step_t = (2, 128) if args.quick else (args.batch, args.seq_len)
  if args.quick:
    args.examples, args.records, args.repeats = 64, 64, 1

  from arenarl_jax.models.loading import load_tokenizer  # pylint: disable=g-import-not-at-top
  tokenizer = load_tokenizer("smollm2")
  with tempfile.TemporaryDirectory() as workdir:
    source, tools = sft_source(args, workdir)
    examples_s, real_tokens, batch = time_pipeline(source, tools, tokenizer, args)
  print(f"pipeline: {examples_s:.1f} examples/s at {args.batch} x {args.seq_len} "
        f"({real_tokens:.0f} non-pad tokens per example, {args.read_threads} read threads)")
  step_s, loss = time_step(batch, step_n, step_t, args.repeats)
  step_examples_s = step_n / step_s
  print(f"SFT step on SmolLM2 at {step_n} x {step_t}: {step_s:.2f} s ({step_examples_s:.3f} "
        f"examples/s, loss {loss:.3f}); peak RSS {timing.peak_rss_gb():.1f} GB")
  ratio = examples_s / step_examples_s
  print(f"pipeline / step = {ratio:.0f}x (target >= 2x)")
  print(f"RESULT examples_s={examples_s:.2f} step_examples_s={step_examples_s:.4f} "
        f"ratio={ratio:.1f} step_shape={step_n}x{step_t}")


if __name__ == "__main__":
  main()
