"""Group sampler on SmolLM2-135M: ours vs transformers `generate` vs the decode step's matmuls.

  .venv/bin/python benchmarks/sampler.py [--prompts 4] [--group 8] [--prompt-len 64] [--new 128]

32 rows = 4 prompts x G = 8, 64-token prompts, 128 new tokens per row, EOS ignored. Ours: prefill +
decode (row 0 of each group greedy, the rest temperature 1), wall time of the whole call, median
of --repeats. transformers: `generate` on the same 32 rows (torch CPU, greedy, EOS ignored) with 1
and 2 threads; the faster one counts. Ceiling: the decode step's matmuls alone (q/k/v/o,
gate/up/down of every layer, then the tied head, chained, at 32 rows), timed in this process
between our runs; ceiling tok/s = rows / matmul time. llama.cpp: single stream (one prompt, 128
tokens) when `llama_cpp` imports. Peak RSS is read before torch is imported, so it is ours.
Ends with one ``RESULT`` line.
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from arenarl_jax.models.embedded import find_smollm2_gguf
from arenarl_jax.models.loading import load_model
from arenarl_jax.sampler import Sampler, SamplingSettings

TEXT = ("You are a travel agent. Plan a three day trip to Lisbon for two people on a budget: "
        "find flights, a hotel near the old town, and a day trip to Sintra. Explain each choice. ")


def make_prompts(n: int, length: int) -> list[list[int]]:
  """n different prompts of exactly ``length`` tokens (real text, shifted per prompt)."""
  from arenarl_jax.tokenizer import Tokenizer  # pylint: disable=import-outside-toplevel
  ids = Tokenizer.from_gguf(find_smollm2_gguf()).encode(TEXT * 8)
  return [ids[3 * i: 3 * i + length] for i in range(n)]


def matmul_ceiling_fn(model, rows: int):
  """One decode step's weight matmuls, chained layer by layer, at ``rows`` rows."""
  cfg = model.cfg
  layers = [tuple(k.kernel[...] for k in (l.attn.q, l.attn.k, l.attn.v, l.attn.o, l.mlp.gate,
                                          l.mlp.up, l.mlp.down)) for l in model.layers]
  head = model.embed[...] if model.lm_head is None else model.lm_head.kernel[...].T
  x_ND = jax.random.normal(jax.random.key(0), (rows, cfg.d_model), jnp.float32)

  @jax.jit
  def run(layers, head, x_ND):
    for wq, wk, wv, wo, wg, wu, wd in layers:
      q, k, v = x_ND @ wq, x_ND @ wk, x_ND @ wv
      x_ND = x_ND + q @ wo + 1e-9 * (k.sum() + v.sum())
      x_ND = x_ND + (x_ND @ wg * (x_ND @ wu)) @ wd
    return jnp.einsum("nd,vd->nv", x_ND, head)

  return lambda: run(layers, head, x_ND).block_until_ready()


def median_time(fn, repeats: int) -> float:
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def transformers_fn(prompts, new: int, threads: int):
  import torch  # pylint: disable=import-outside-toplevel
  from transformers import AutoModelForCausalLM  # pylint: disable=import-outside-toplevel

  torch.set_num_threads(threads)
  path = find_smollm2_gguf()
  model = AutoModelForCausalLM.from_pretrained(os.path.dirname(path),
                                               gguf_file=os.path.basename(path),
                                               dtype=torch.float32).eval()
  model.generation_config.eos_token_id = None  # EOS ignored, as in ours
  ids = torch.tensor(prompts, dtype=torch.long)

  def run(n_new=new):
    with torch.inference_mode():
      out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                           max_new_tokens=n_new, pad_token_id=2)
    assert out.shape[1] == ids.shape[1] + n_new, out.shape
  return run


def llama_cpp_tok_s(prompt, new: int, threads: int) -> float | None:
  try:
    import llama_cpp  # pylint: disable=import-outside-toplevel
  except ImportError:
    return None
  llm = llama_cpp.Llama(model_path=find_smollm2_gguf(), n_ctx=512, n_threads=threads,
                        n_batch=512, logits_all=False, verbose=False)
  def run():
    llm.reset()
    for i, _ in enumerate(llm.generate(prompt, temp=0.0, top_k=1, reset=True)):
      if i + 1 == new:
        break
  run()
  return new / median_time(run, 2)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--prompts", type=int, default=4)
  parser.add_argument("--group", type=int, default=8)
  parser.add_argument("--prompt-len", type=int, default=64)
  parser.add_argument("--new", type=int, default=128)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--skip-transformers", action="store_true")
  args = parser.parse_args()
  rows, new = args.prompts * args.group, args.new
  print(f"load average at start: {os.getloadavg()}; devices: {jax.devices()[:1]}", flush=True)
  _, model = load_model("smollm2")
  prompts = make_prompts(args.prompts, args.prompt_len)

  sampler = Sampler(model, cache_len=args.prompt_len + new)
  settings = SamplingSettings(temperature=1.0, max_new_tokens=new)  # no eos_ids: EOS ignored
  keys = iter(jax.random.split(jax.random.key(0), 64))

  def ours():
    out, _ = sampler.sample(prompts, group_size=args.group, settings=settings, key=next(keys))
    assert int(out.lengths_N.min()) == new
  ceiling = matmul_ceiling_fn(model, rows)
  start = time.perf_counter()
  ours()
  ceiling()
  print(f"compile + first run: {time.perf_counter() - start:.1f} s", flush=True)
  t_ours, t_ceiling = [], []
  for _ in range(args.repeats):  # interleaved, so both see the same machine load
    t_ours.append(median_time(ours, 1))
    t_ceiling.append(median_time(ceiling, 5))
    print(f"  ours {rows * new / t_ours[-1]:.1f} tok/s; matmul step {t_ceiling[-1] * 1e3:.1f} ms",
          flush=True)
  t_ours, t_ceiling = statistics.median(t_ours), statistics.median(t_ceiling)
  ours_tok_s, ceiling_tok_s = rows * new / t_ours, rows / t_ceiling
  peak_rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
  print(f"ours: {ours_tok_s:.1f} tok/s ({t_ours / new * 1e3:.1f} ms per step incl. prefill); "
        f"ceiling {ceiling_tok_s:.1f} tok/s ({t_ceiling * 1e3:.1f} ms); peak RSS "
        f"{peak_rss_gb:.2f} GB", flush=True)

  t_hf = {}
  if not args.skip_transformers:
    for threads in (1, 2):
      run = transformers_fn(prompts, new, threads)
      run(2)
      t_hf[threads] = median_time(run, 1)
      print(f"transformers generate, {threads} thread(s): {rows * new / t_hf[threads]:.1f} tok/s",
            flush=True)
  hf_tok_s = rows * new / min(t_hf.values()) if t_hf else float("nan")
  for threads in (1, 2):
    llama = llama_cpp_tok_s(prompts[0], new, threads)
    print(f"llama.cpp single stream, {threads} thread(s): "
          + ("not installed" if llama is None else f"{llama:.1f} tok/s"), flush=True)
  print(f"load average at end: {os.getloadavg()}")
  print(f"RESULT ours_tok_s={ours_tok_s:.1f} ratio_vs_transformers={ours_tok_s / hf_tok_s:.3f} "
        f"frac_of_ceiling={ours_tok_s / ceiling_tok_s:.3f} peak_rss_gb={peak_rss_gb:.2f}")


if __name__ == "__main__":
  main()
