"""Peak memory of value-and-grad of the mean token log-prob on SmolLM2-135M, per variant.

  .venv/bin/python benchmarks/logprobs_memory.py [--batch 8] [--tokens 512] [--chunk 64]
  .venv/bin/python benchmarks/logprobs_memory.py --model tiny --batch 2 --tokens 64  # smoke

A variant is ``token_logprobs``' per-chunk checkpoint (``ckpt``: on, the default;
``nockpt``: ``checkpoint_chunks=False``, every chunk's [N, chunk, V] logits kept for the backward)
times a ``model.remat`` policy. Each variant runs in a fresh subprocess (so none inherits another's
allocator high-water mark): it loads the model, compiles ``jax.value_and_grad`` of the mean
log-prob, reads XLA's memory analysis of the compiled program (temporaries + arguments), runs it
once and reads the process's real peak RSS (``VmHWM``; it includes the model load and the
runtime). ``peak_rss_gb`` is the training default (checkpointed chunks, ``remat.TRAINING_DEFAULT``),
``baseline_peak_rss_gb`` is no chunk checkpoint and no remat.

One-chunk check (asserted): with the checkpoint, the backward holds one chunk's logits at a time,
never every chunk's. Compiled at this run's N, chunk and d_model with no blocks (embedding, final
norm and the chunked head: the blocks' memory does not depend on the vocabulary), the temporaries at vocabularies V and V / 2 and at
S1 and S2 chunks give the vocabulary-sized memory that the extra chunks add,
``(temp(V, S2) - temp(V, S1)) - (temp(V/2, S2) - temp(V/2, S1))``: it must stay below one chunk's
[N, chunk, V/2] float32 logits (it is 0 when only the current chunk's logits are alive), while
without the checkpoint it is at least S2 - S1 chunks' logits. Ends with one ``RESULT`` line.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from arenarl_jax.models import remat as remat_lib
from arenarl_jax.models.config import PRESETS, ModelConfig
from arenarl_jax.models.logprobs import token_logprobs
from arenarl_jax.models.transformer import abstract_model, make_model, set_remat

VARIANTS = tuple(f"{c}_{r}" for c in ("ckpt", "nockpt") for r in remat_lib.CHOICES)
DEFAULT = f"ckpt_{remat_lib.TRAINING_DEFAULT}"
BASELINE = "nockpt_none"
S1, S2 = 2, 4  # chunk counts of the one-chunk check


def parse_variant(name: str) -> tuple[bool, str]:
  """'ckpt_dots_no_batch' -> (True, 'dots_no_batch')."""
  ckpt, _, policy = name.partition("_")
  if ckpt not in ("ckpt", "nockpt") or policy not in remat_lib.CHOICES:
    raise ValueError(f"--variants: unknown variant {name!r}; known: {VARIANTS}")
  return ckpt == "ckpt", policy


def mean_logp_fn(graphdef, tokens_NT, *, chunk: int, ckpt: bool, policy: str):
  def loss(state):
    model = set_remat(nnx.merge(graphdef, state), policy)
    return jnp.mean(token_logprobs(model, tokens_NT, chunk=chunk, checkpoint_chunks=ckpt))
  return loss


def peak_rss_gb() -> float:
  """This process's peak resident memory in GiB: Linux's ``VmHWM`` (the high-water mark of this
  address space, so not the parent's pages a fork-and-exec may carry into ``ru_maxrss``), else
  ``ru_maxrss``."""
  try:
    with open("/proc/self/status", encoding="ascii") as f:
      for line in f:
        if line.startswith("VmHWM:"):
          return int(line.split()[1]) / 2**20  # kB
  except OSError:
    pass
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def run_variant(args) -> dict:
  """In the child process: compile, analyse and run one variant; returns its numbers."""
  ckpt, policy = parse_variant(args.child)
  start = time.perf_counter()
  if args.model == "smollm2":
    from arenarl_jax.models.loading import load_model  # pylint: disable=import-outside-toplevel
    cfg, model = load_model("smollm2")
  else:
    cfg = PRESETS["tiny"]
    model = make_model(cfg, seed=0)
  graphdef, state = nnx.split(model)
  del model
  rss_loaded = peak_rss_gb()
  tokens = np.random.default_rng(0).integers(0, cfg.vocab_size, (args.batch, args.tokens))
  tokens_NT = jnp.asarray(tokens, jnp.int32)
  fn = jax.jit(jax.value_and_grad(mean_logp_fn(graphdef, tokens_NT, chunk=args.chunk, ckpt=ckpt,
                                               policy=policy)))
  compiled = fn.lower(state).compile()
  stats = compiled.memory_analysis()
  value, grads = compiled(state)
  jax.block_until_ready(grads)
  return {"variant": args.child, "xla_temp_gb": stats.temp_size_in_bytes / 1e9,
          "xla_args_gb": stats.argument_size_in_bytes / 1e9,
          "peak_rss_gb": peak_rss_gb(),
          "rss_after_load_gb": rss_loaded, "value": float(value),
          "seconds": time.perf_counter() - start}


def measure_in_subprocess(args, variant: str) -> dict:
  cmd = [sys.executable, os.path.abspath(__file__), "--child", variant, "--model", args.model,
         "--batch", str(args.batch), "--tokens", str(args.tokens), "--chunk", str(args.chunk)]
  out = subprocess.run(cmd, capture_output=True, text=True, check=False)
  lines = [l for l in out.stdout.splitlines() if l.startswith("VARIANT ")]
  if out.returncode or not lines:
    raise RuntimeError(f"variant {variant} failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
  return json.loads(lines[-1][len("VARIANT "):])


def chunk_growth_bytes(cfg: ModelConfig, n: int, chunk: int, ckpt: bool) -> tuple[int, int]:
  """(vocabulary-sized temporaries added by S2 - S1 extra chunks, one chunk's [N, chunk, V/2]
  float32 logits); see the module docstring. Abstract shapes: nothing is allocated."""
  temp = {}
  for vocab in (cfg.vocab_size, cfg.vocab_size // 2):
    small = ModelConfig(**{**cfg.__dict__, "vocab_size": vocab, "n_layers": 0})
    graphdef, state = nnx.split(abstract_model(small))
    for steps in (S1, S2):
      tokens = jax.ShapeDtypeStruct((n, steps * chunk + 1), jnp.int32)

      def loss(state, tokens_NT, graphdef=graphdef):
        model = nnx.merge(graphdef, state)
        return jnp.mean(token_logprobs(model, tokens_NT, chunk=chunk, checkpoint_chunks=ckpt))

      compiled = jax.jit(jax.value_and_grad(loss)).lower(state, tokens).compile()
      temp[vocab, steps] = compiled.memory_analysis().temp_size_in_bytes
  big, half = cfg.vocab_size, cfg.vocab_size // 2
  growth = (temp[big, S2] - temp[big, S1]) - (temp[half, S2] - temp[half, S1])
  return growth, n * chunk * (big - half) * 4


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--model", default="smollm2", choices=("smollm2", "tiny"))
  parser.add_argument("--batch", type=int, default=8)
  parser.add_argument("--tokens", type=int, default=512)
  parser.add_argument("--chunk", type=int, default=64, help="token_logprobs chunk over T")
  parser.add_argument("--variants", default=",".join(VARIANTS),
                      help=f"comma-separated subset of {VARIANTS} ({DEFAULT} and {BASELINE} are "
                           "always measured)")
  parser.add_argument("--child", default="", help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.child:
    print("VARIANT " + json.dumps(run_variant(args)), flush=True)
    return {}

  print(f"load average at start: {os.getloadavg()}; devices: {jax.devices()[:1]}")
  names = [v for v in args.variants.split(",") if v]
  for name in names:
    parse_variant(name)
  names = list(dict.fromkeys([DEFAULT, BASELINE] + names))
  results = {}
  for name in names:
    results[name] = r = measure_in_subprocess(args, name)
    print(f"{name:>22}: XLA temporaries {r['xla_temp_gb']:.3f} GB + arguments "
          f"{r['xla_args_gb']:.3f} GB = {r['xla_temp_gb'] + r['xla_args_gb']:.3f} GB; peak RSS "
          f"{r['peak_rss_gb']:.3f} GB (after load {r['rss_after_load_gb']:.3f} GB); mean log-prob "
          f"{r['value']:.5f}; {r['seconds']:.1f} s", flush=True)
  values = [r["value"] for r in results.values()]
  assert max(values) - min(values) <= 1e-4 * max(1.0, abs(values[0])), values

  cfg = PRESETS["smollm2_135m" if args.model == "smollm2" else "tiny"]  # shapes only
  growth, one_chunk = chunk_growth_bytes(cfg, args.batch, args.chunk, ckpt=True)
  growth_off, _ = chunk_growth_bytes(cfg, args.batch, args.chunk, ckpt=False)
  print(f"one-chunk check (N={args.batch}, chunk={args.chunk}, d_model={cfg.d_model}, V="
        f"{cfg.vocab_size} vs {cfg.vocab_size // 2}, {S1} vs {S2} chunks): vocabulary-sized memory "
        f"added by {S2 - S1} extra chunks: checkpointed {growth / 1e6:.1f} MB, not checkpointed "
        f"{growth_off / 1e6:.1f} MB; one chunk's logits {one_chunk / 1e6:.1f} MB")
  assert growth < one_chunk, (growth, one_chunk)
  assert growth_off >= (S2 - S1) * one_chunk, (growth_off, one_chunk)

  per = " ".join(f"{k}_xla_gb={v['xla_temp_gb'] + v['xla_args_gb']:.3f}" for k, v in results.items())
  print(f"load average at end: {os.getloadavg()}")
  print(f"RESULT peak_rss_gb={results[DEFAULT]['peak_rss_gb']:.3f} "
        f"baseline_peak_rss_gb={results[BASELINE]['peak_rss_gb']:.3f} "
        f"xla_gb={results[DEFAULT]['xla_temp_gb'] + results[DEFAULT]['xla_args_gb']:.3f} "
        f"baseline_xla_gb={results[BASELINE]['xla_temp_gb'] + results[BASELINE]['xla_args_gb']:.3f} "
        f"chunk_growth_mb={growth / 1e6:.1f} one_chunk_mb={one_chunk / 1e6:.1f} {per}")
  return {"results": results, "growth": growth, "growth_off": growth_off, "one_chunk": one_chunk}


if __name__ == "__main__":
  main()
