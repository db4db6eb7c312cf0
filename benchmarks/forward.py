"""Teacher-forced log-prob pass on SmolLM2-135M: ours (jit) vs transformers (torch, 1/2 threads).

  .venv/bin/python benchmarks/forward.py [--batch 8] [--tokens 256] [--repeats 3] [--bf16]

Same random token ids for both; each side computes log p(token t | tokens < t) for every row.
The ceiling is this pass's matmuls alone (q/k/v/o, gate/up/down in all layers, plus the head), at
the same number of rows, timed in this process. Contenders run in interleaved rounds (medians).
Peak RSS is read before torch is imported, so it is ours. Ends with one ``RESULT`` line.
"""
from __future__ import annotations

import argparse
import functools
import os
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from arenarl_jax.models.loading import load_model
from arenarl_jax.models.logprobs import token_logprobs
from arenarl_jax.models.safetensors_io import export_hf_dir

import timing  # benchmarks/timing.py (the script folder is on sys.path)


def ours_fn(model, tokens_NT, chunk: int):
  graphdef, state = nnx.split(model)
  run = jax.jit(lambda state, tokens: token_logprobs(nnx.merge(graphdef, state), tokens,
                                                     chunk=chunk))
  return lambda: run(state, tokens_NT).block_until_ready()


def _logprobs(model, tokens_NT, chunk: int):
  graphdef, state = nnx.split(model)
  return jax.jit(lambda state, tokens: token_logprobs(nnx.merge(graphdef, state), tokens,
                                                      chunk=chunk))(state, jnp.asarray(tokens_NT))


def matmul_ceiling_fn(model, rows: int):
  """Every weight matmul of the pass at ``rows`` rows (outputs reduced so none is dropped)."""
  cfg = model.cfg
  kernels = []
  for layer in model.layers:
    a, m = layer.attn, layer.mlp
    kernels += [k.kernel[...] for k in (a.q, a.k, a.v, a.o, m.gate, m.up, m.down)]
  head = model.embed[...] if model.lm_head is None else model.lm_head.kernel[...].T
  x_d = jax.random.normal(jax.random.key(0), (rows, cfg.d_model), jnp.float32)
  x_h = jax.random.normal(jax.random.key(1), (rows, cfg.n_heads * cfg.head_dim), jnp.float32)
  x_f = jax.random.normal(jax.random.key(2), (rows, cfg.ffn_dim), jnp.float32)

  @jax.jit
  def run(kernels, head):
    total = jnp.zeros((), jnp.float32)
    for w in kernels:
      x = {cfg.d_model: x_d, cfg.n_heads * cfg.head_dim: x_h, cfg.ffn_dim: x_f}[w.shape[0]]
      total += jnp.sum(x @ w)
    return total + jnp.sum(jnp.einsum("nd,vd->nv", x_d, head))

  flops = 2 * rows * (sum(w.shape[0] * w.shape[1] for w in kernels) + head.size)
  return (lambda: run(kernels, head).block_until_ready()), flops


def torch_fn(hf_dir: str, tokens_NT: np.ndarray):
  """transformers' forward + log_softmax + gather, as its users write it; ``run(threads)``."""
  import torch  # pylint: disable=import-outside-toplevel
  from transformers import AutoModelForCausalLM  # pylint: disable=import-outside-toplevel

  model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
  ids = torch.tensor(tokens_NT, dtype=torch.long)

  def run(threads):
    torch.set_num_threads(threads)
    with torch.inference_mode():
      logits = model(input_ids=ids).logits[:, :-1].float()
      logp = torch.log_softmax(logits, dim=-1)
      return logp.gather(-1, ids[:, 1:, None])[..., 0]

  return run


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--batch", type=int, default=8)
  parser.add_argument("--tokens", type=int, default=256)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--chunk", type=int, default=64, help="token_logprobs chunk over T")
  parser.add_argument("--attention", default="auto", help="model.attention")
  parser.add_argument("--bf16", action="store_true",
                      help="also time the pass with model.compute_dtype=bfloat16 (AMX where the "
                           "CPU has it) and measure its log-probs against float32's")
  args = parser.parse_args()
  n_tok = args.batch * args.tokens
  print(f"load average at start: {os.getloadavg()}; devices: {jax.devices()[:1]}")

  start = time.perf_counter()
  cfg, model = load_model("smollm2", attention=args.attention)
  print(f"load_model('smollm2'): {time.perf_counter() - start:.1f} s")
  tokens = np.random.default_rng(0).integers(0, cfg.vocab_size, (args.batch, args.tokens))
  tokens = tokens.astype(np.int32)

  ours = ours_fn(model, jnp.asarray(tokens), args.chunk)
  start = time.perf_counter()
  ours()
  print(f"ours: compile + first run {time.perf_counter() - start:.1f} s")
  ceiling, flops = matmul_ceiling_fn(model, n_tok)
  ceiling()
  peak_rss_gb = timing.peak_rss_gb()
  print(f"peak RSS before torch is imported: {peak_rss_gb:.2f} GB")

  with tempfile.TemporaryDirectory() as hf_dir:
    export_hf_dir(model, cfg, hf_dir)
    torch_run = torch_fn(hf_dir, tokens)
  runs = {"ours": ours, "matmuls": ceiling}
  bf16_keys = ""
  if args.bf16:  # the same parameters, cast to bfloat16 at use; float32 log-probs out
    _, model16 = load_model("smollm2", attention=args.attention, compute_dtype="bfloat16")
    runs["ours_bf16"] = ours_fn(model16, jnp.asarray(tokens), args.chunk)
    runs["ours_bf16"]()
    want = np.asarray(_logprobs(model, tokens, args.chunk), np.float64)
    got = np.asarray(_logprobs(model16, tokens, args.chunk), np.float64)
    diff = np.abs(got - want)
    print(f"bfloat16 log-probs vs float32: max |diff| {diff.max():.4f}, mean {diff.mean():.5f} "
          f"(nats per token); mean log-prob {want.mean():.4f} vs {got.mean():.4f}")
    bf16_keys = f" bf16_logp_max_abs_diff={diff.max():.4f} bf16_logp_mean_abs_diff={diff.mean():.5f}"
  for threads in (1, 2):
    runs[f"torch_{threads}t"] = functools.partial(torch_run, threads)
    runs[f"torch_{threads}t"]()
  t, times = timing.interleaved_medians(runs, args.repeats)
  for name, ts in times.items():
    print(f"{name:>9}: median {t[name]:.3f} s = {n_tok / t[name]:.0f} tok/s "
          f"(runs: {', '.join(f'{x:.2f}' for x in ts)})")
  print(f"matmuls alone: {flops / t['matmuls'] / 1e9:.0f} GFLOP/s")
  t_torch = min(t["torch_1t"], t["torch_2t"])
  print(f"load average at end: {os.getloadavg()}")
  print(f"RESULT ours_tok_s={n_tok / t['ours']:.1f} "
        f"ratio_vs_transformers={t_torch / t['ours']:.3f} "
        f"frac_of_ceiling={t['matmuls'] / t['ours']:.3f} peak_rss_gb={peak_rss_gb:.2f} "
        f"cpu={timing.cpu_kind()}"
        + (f" bf16_tok_s={n_tok / t['ours_bf16']:.1f} bf16_speedup={t['ours'] / t['ours_bf16']:.3f}"
           f"{bf16_keys}" if args.bf16 else ""))


if __name__ == "__main__":
  main()
