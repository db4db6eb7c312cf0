"""Group sampler on SmolLM2-135M: ours vs transformers `generate` vs the decode step's matmuls.

  .venv/bin/python benchmarks/sampler.py [--prompts 4] [--group 8] [--prompt-len 64] [--new 128]

32 rows = 4 prompts x G = 8, 64-token prompts, 128 new tokens per row, EOS ignored. Ours: prefill +
decode (row 0 of each group greedy, the rest temperature 1), wall time of the whole call, with the
Sampler's defaults (each prompt a prefix shared by its group; the rows' own buffers grow along
the cache ladder 32, 64, 96, 128, 192 during the turn).
transformers: `generate` on the same 32 rows (torch CPU, greedy, EOS ignored) with 1 and 2 threads,
each in its own worker process (so this process's peak RSS stays ours), and the faster counts; a
run stops after --hf-max-time seconds (torch with 2 threads can collapse on a busy machine) and
then counts the tokens it made. Ceiling: the decode step's matmuls alone (q/k/v/o, gate/up/down of
every layer, then the tied head, chained, at 32 rows, in the form decode uses: feature-major on
CPU, see models/cpu/decode.py); ceiling tok/s = rows / matmul time. On a
shared machine the load changes from minute to minute, so each repeat runs ours, the ceiling and
both transformers workers back to back and the medians over repeats are compared. llama.cpp:
single stream (one prompt, 128 tokens) when `llama_cpp` imports. Ends with one ``RESULT`` line.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import jax
import jax.numpy as jnp

from arenarl_jax.models import backend
from arenarl_jax.models.cpu import decode
from arenarl_jax.models.embedded import find_smollm2_gguf
from arenarl_jax.models.loading import load_model
from arenarl_jax.sampling.sampler import Sampler, SamplingSettings

import timing  # benchmarks/timing.py (the script folder is on sys.path)

TEXT = ("You are a travel agent. Plan a three day trip to Lisbon for two people on a budget: "
        "find flights, a hotel near the old town, and a day trip to Sintra. Explain each choice. ")


def make_prompts(n: int, length: int) -> list[list[int]]:
  """n different prompts of exactly ``length`` tokens (real text, shifted per prompt)."""
  from arenarl_jax.text.tokenizer import Tokenizer  # pylint: disable=import-outside-toplevel
  ids = Tokenizer.from_gguf(find_smollm2_gguf()).encode(TEXT * 8)
  return [ids[3 * i: 3 * i + length] for i in range(n)]


def matmul_ceiling_fn(model, rows: int, feature_major: bool):
  """One decode step's weight matmuls, chained layer by layer, at ``rows`` rows, in the form the
  sampler's decode uses: ``x[N, D] @ W[D, E]``, or feature-major ``Wt[E, D] @ x[D, N]`` with the
  transposed kernels made beforehand (``models/cpu/decode.py``)."""
  cfg = model.cfg
  layers = [tuple(k.kernel[...] for k in (l.attn.q, l.attn.k, l.attn.v, l.attn.o, l.mlp.gate,
                                          l.mlp.up, l.mlp.down)) for l in model.layers]
  head = model.embed[...] if model.lm_head is None else model.lm_head.kernel[...].T
  x_ND = jax.random.normal(jax.random.key(0), (rows, cfg.d_model), jnp.float32)
  if feature_major:
    layers, head = decode.transposed_kernels(model)
    x_ND = x_ND.T.copy()  # [D, N]

  def mm(a, b):  # as models/cpu/decode.py: a barrier keeps XLA from refolding the transposed form
    return jax.lax.optimization_barrier(a @ b) if feature_major else a @ b

  @backend.jit  # compiled exactly as the sampler's programs are
  def run(layers, head, x):
    for wq, wk, wv, wo, wg, wu, wd in layers:
      q, k, v = (mm(wq, x), mm(wk, x), mm(wv, x)) if feature_major else (x @ wq, x @ wk, x @ wv)
      x = x + (mm(wo, q) if feature_major else q @ wo) + 1e-9 * (k.sum() + v.sum())
      x = x + (mm(wd, mm(wg, x) * mm(wu, x)) if feature_major else (x @ wg * (x @ wu)) @ wd)
    return mm(head, x) if feature_major else jnp.einsum("nd,vd->nv", x, head)

  return lambda: run(layers, head, x_ND).block_until_ready()


def transformers_worker(threads: int, prompts_len: int, n_prompts: int, group: int) -> None:
  """Worker process: loads transformers' SmolLM2 once, then per stdin line "NEW MAX_TIME" runs
  `generate` on the rows and prints "generated_per_row wall_s cpu_s"."""
  import torch  # pylint: disable=import-outside-toplevel
  from transformers import AutoModelForCausalLM  # pylint: disable=import-outside-toplevel

  torch.set_num_threads(threads)
  path = find_smollm2_gguf()
  model = AutoModelForCausalLM.from_pretrained(os.path.dirname(path),
                                               gguf_file=os.path.basename(path),
                                               dtype=torch.float32).eval()
  model.generation_config.eos_token_id = None  # EOS ignored, as in ours
  rows = [p for p in make_prompts(n_prompts, prompts_len) for _ in range(group)]
  ids = torch.tensor(rows, dtype=torch.long)
  print("ready", flush=True)
  for line in sys.stdin:
    new, max_time = int(line.split()[0]), float(line.split()[1])
    start, cpu = time.perf_counter(), time.process_time()
    with torch.inference_mode():
      out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                           max_new_tokens=new, pad_token_id=2, max_time=max_time)
    print(out.shape[1] - ids.shape[1], time.perf_counter() - start, time.process_time() - cpu,
          flush=True)


class TransformersWorker:
  """A transformers `generate` process with its own thread count, driven line by line."""

  def __init__(self, threads: int, args):
    self.threads = threads
    self.proc = subprocess.Popen(
        [sys.executable, __file__, "--transformers-worker", str(threads), "--prompts",
         str(args.prompts), "--group", str(args.group), "--prompt-len", str(args.prompt_len)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
    if self.proc.stdout.readline().strip() != "ready":
      raise RuntimeError(f"transformers worker ({threads} threads) failed to start")

  def run(self, new: int, max_time: float) -> tuple[int, float, float]:
    self.proc.stdin.write(f"{new} {max_time}\n")
    self.proc.stdin.flush()
    generated, wall, cpu = self.proc.stdout.readline().split()
    return int(generated), float(wall), float(cpu)

  def close(self):
    self.proc.stdin.close()
    self.proc.wait(timeout=60)


def llama_cpp_tok_s(prompt, new: int, threads: int, max_time: float) -> float | None:
  try:
    import llama_cpp  # pylint: disable=import-outside-toplevel
  except ImportError:
    return None
  llm = llama_cpp.Llama(model_path=find_smollm2_gguf(), n_ctx=512, n_threads=threads,
                        n_batch=512, logits_all=False, verbose=False)

  def run():
    start, n = time.perf_counter(), 0
    for n, _ in enumerate(llm.generate(prompt, temp=0.0, top_k=1, reset=True), start=1):
      if n == new or time.perf_counter() - start > max_time:
        break
    return n / (time.perf_counter() - start)

  run()
  return statistics.median(run() for _ in range(2))


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--prompts", type=int, default=4)
  parser.add_argument("--group", type=int, default=8)
  parser.add_argument("--prompt-len", type=int, default=64)
  parser.add_argument("--new", type=int, default=128)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--attention", default="auto", help="model.attention")
  parser.add_argument("--compute_dtype", default="float32", choices=("float32", "bfloat16"),
                      help="model.compute_dtype of ours (bfloat16: AMX where the CPU has it)")
  parser.add_argument("--hf-max-time", type=float, default=90.0)
  parser.add_argument("--skip-transformers", action="store_true")
  parser.add_argument("--transformers-worker", type=int, default=0, help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.transformers_worker:
    return transformers_worker(args.transformers_worker, args.prompt_len, args.prompts, args.group)
  rows, new = args.prompts * args.group, args.new
  print(f"load average at start: {os.getloadavg()}; devices: {jax.devices()[:1]}", flush=True)
  _, model = load_model("smollm2", attention=args.attention, compute_dtype=args.compute_dtype)
  prompts = make_prompts(args.prompts, args.prompt_len)

  sampler = Sampler(model, cache_len=args.prompt_len + new)
  settings = SamplingSettings(temperature=1.0, max_new_tokens=new)  # no eos_ids: EOS ignored
  keys = iter(jax.random.split(jax.random.key(0), 64))

  def ours():
    out, _ = sampler.sample(prompts, group_size=args.group, settings=settings, key=next(keys))
    assert int(out.lengths_N.min()) == new
  feature_major = sampler.decode_step.feature_major
  ceiling = matmul_ceiling_fn(model, rows, feature_major)
  # For reference only: the same matmuls in the other form (the one decode does not use).
  other_ceiling = matmul_ceiling_fn(model, rows, not feature_major)
  print(f"decode and ceiling matmuls: {'feature-major' if feature_major else 'rows-first'}",
        flush=True)
  start = time.perf_counter()
  ours()
  ceiling()
  other_ceiling()
  print(f"compile + first run: {time.perf_counter() - start:.1f} s", flush=True)
  workers = [] if args.skip_transformers else [TransformersWorker(t, args) for t in (1, 2)]
  for worker in workers:
    worker.run(2, args.hf_max_time)  # warm-up
  tok_s = {"ours": [], "ceiling": [], "other_form": [], "hf1": [], "hf2": []}
  cpu_ms_per_step = {"ours": [], "hf1": [], "hf2": []}
  for rep in range(args.repeats):
    cpu = time.process_time()
    t = timing.median_time(ours, 1)
    cpu_ms_per_step["ours"].append((time.process_time() - cpu) / new * 1e3)
    tok_s["ours"].append(rows * new / t)
    tok_s["ceiling"].append(rows / timing.median_time(ceiling, 5))
    tok_s["other_form"].append(rows / timing.median_time(other_ceiling, 5))
    for worker in workers:
      generated, wall, cpu = worker.run(new, args.hf_max_time)
      tok_s[f"hf{worker.threads}"].append(rows * generated / wall)
      cpu_ms_per_step[f"hf{worker.threads}"].append(cpu / generated * 1e3)
    print(f"  repeat {rep}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in tok_s.items() if v)
          + " tok/s; load " + f"{os.getloadavg()[0]:.1f}", flush=True)
  for worker in workers:
    worker.close()
  med = {k: statistics.median(v) for k, v in tok_s.items() if v}
  peak_rss_gb = timing.peak_rss_gb()
  print(f"medians (tok/s): " + ", ".join(f"{k} {v:.1f}" for k, v in med.items()))
  print("CPU ms per decode step (all threads, prefill included): " + ", ".join(
      f"{k} {statistics.median(v):.0f}" for k, v in cpu_ms_per_step.items() if v))
  hf_tok_s = max(med.get("hf1", float("nan")), med.get("hf2", float("nan")))
  for threads in (1, 2):
    llama = llama_cpp_tok_s(prompts[0], new, threads, max_time=30.0)
    print(f"llama.cpp single stream, {threads} thread(s): "
          + ("not installed" if llama is None else f"{llama:.1f} tok/s"), flush=True)
  print(f"load average at end: {os.getloadavg()}")
  print(f"RESULT ours_tok_s={med['ours']:.1f} ratio_vs_transformers={med['ours'] / hf_tok_s:.3f} "
        f"frac_of_ceiling={med['ours'] / med['ceiling']:.3f} peak_rss_gb={peak_rss_gb:.2f} "
        f"cpu={timing.cpu_kind()} compute_dtype={args.compute_dtype}")


if __name__ == "__main__":
  main()
