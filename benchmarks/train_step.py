"""One RL training step on SmolLM2-135M: the trainer's own train_step vs the same step in PyTorch.

  .venv/bin/python benchmarks/train_step.py [--batch 8] [--tokens 512] [--repeats 3]
  .venv/bin/python benchmarks/train_step.py --model tiny --batch 2 --tokens 64 --repeats 1  # smoke
  .venv/bin/python benchmarks/train_step.py --remat full --memory_only  # compile, report memory

Both sides: the arenarl preset's loss (token ratio clipped at 0.2 / 0.28, k3 KL to a frozen
reference at coefficient 0.02, seq_mean_token_mean), the reference's log-probs from a no-grad pass,
clip-by-global-norm 1.0 + AdamW, float32, the same tokens, mask, advantages and old log-probs.
Ours is ``trainer.Trainer.step`` (chunked head fused with the loss, donated state); torch is the
straightforward full-logits step as its users write it, best of 1 and 2 threads, in a worker
process of its own started by this script (one framework's allocator and thread pools must not
slow the other's steps down), with the same environment: the script first re-executes itself with
the retained-heap allocator settings of ``models/cpu/allocator.py``, as the CLI does, so neither
side faults its step's memory in afresh on every step.
MFU = model FLOPs (6 x parameters x tokens + 12 x layers x heads x head_dim x T x tokens) per
second over the median of ten float32 2048^3 matmuls timed in this process; HFU also counts the
work the step really does beyond that (the reference pass, the attention backward's recomputed
scores and the blocks' work that ``--remat`` recomputes; the token ratio's fused head recomputes
no logits).
Peak RSS is this process's, so it is ours alone. ``--remat`` is the trainer's
``model.remat`` (default: the training default); XLA's memory analysis of the compiled step
(temporaries, arguments, outputs) is printed, and ``--memory_only`` stops there (no timing).
Ends with one ``RESULT`` line.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from arenarl_jax import sharding
from arenarl_jax.rl import losses
from arenarl_jax.rl.settings import LossSettings
from arenarl_jax.models import remat as remat_lib
from arenarl_jax.models.cpu import allocator
from arenarl_jax.models.cpu import compile_options
from arenarl_jax.models.config import PRESETS
from arenarl_jax.models.loading import load_model
from arenarl_jax.models.safetensors_io import export_hf_dir
from arenarl_jax.models.transformer import make_model
from arenarl_jax.trainer import Trainer, make_optimizer

import timing  # benchmarks/timing.py (the script folder is on sys.path)

OPTIM = dict(lr=1e-6, weight_decay=0.1, b1=0.9, b2=0.98, grad_clip=1.0, schedule="constant",
             warmup_steps=0)
LOSS = LossSettings(ratio="token", kl="k3", kl_coef=0.02, clip_low=0.2, clip_high=0.28,
                         aggregation="seq_mean_token_mean")


def matmul_rate() -> float:
  """FLOP/s of a float32 2048^3 matmul (median of ten), the best over XLA's default compile and
  the two option sets of ``compile_options`` (the trainer's and the sampler's), so the step's own
  options never lower the ceiling it is measured against."""
  a = jax.random.normal(jax.random.key(0), (2048, 2048), jnp.float32)
  rates = {}
  for name, options in (("default", None), ("training", compile_options.TRAINING_OPTIONS),
                        ("sampling", compile_options.CPU_OPTIONS)):
    mm = jax.jit(lambda x, y: x @ y).lower(a, a).compile(options)
    mm(a, a).block_until_ready()
    rates[name] = 2 * 2048 ** 3 / timing.median_time(lambda mm=mm: mm(a, a).block_until_ready(), 10)
  print("2048^3 matmul GFLOP/s by compile options: "
        + ", ".join(f"{k} {v / 1e9:.0f}" for k, v in rates.items()))
  return max(rates.values())


def make_inputs(cfg, n: int, t: int) -> dict[str, np.ndarray]:
  rng = np.random.default_rng(0)
  mask = np.ones((n, t), np.float32)
  mask[:, : t // 8] = 0.0  # a prompt
  return {"tokens_NT": rng.integers(0, cfg.vocab_size, (n, t)).astype(np.int32),
          "loss_mask_NT": mask,
          "advantages_N": rng.normal(size=n).astype(np.float32),
          "temperature_N": np.ones(n, np.float32),
          "sampler_logp_NT": np.zeros((n, t), np.float32),
          "policy_step_N": np.zeros(n, np.int32)}


def compile_step(trainer: Trainer, train_state, ref, batch):
  """(the compiled step, XLA's memory analysis of it in GB by kind)."""
  compiled = trainer.step.lower(train_state, ref, batch).compile()
  stats = compiled.memory_analysis()
  gb = {"temp": stats.temp_size_in_bytes, "args": stats.argument_size_in_bytes,
        "out": stats.output_size_in_bytes, "alias": stats.alias_size_in_bytes}
  return compiled, {k: v / 1e9 for k, v in gb.items()}


def torch_step_fn(hf_dir: str, inputs: dict[str, np.ndarray]):
  """The same loss and optimizer in PyTorch (full logits); ``run(threads)``."""
  import torch  # pylint: disable=import-outside-toplevel
  from transformers import AutoModelForCausalLM  # pylint: disable=import-outside-toplevel

  model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).train()
  ref = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
  opt = torch.optim.AdamW(model.parameters(), lr=OPTIM["lr"], betas=(OPTIM["b1"], OPTIM["b2"]),
                          weight_decay=OPTIM["weight_decay"])
  ids = torch.tensor(inputs["tokens_NT"], dtype=torch.long)
  mask = torch.tensor(inputs["loss_mask_NT"])[:, 1:]
  adv = torch.tensor(inputs["advantages_N"])[:, None]
  old = torch.tensor(inputs["old_logp_NT"])[:, 1:]

  def logp(m):
    logits = m(input_ids=ids).logits[:, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None])[..., 0]

  def run(threads):
    torch.set_num_threads(threads)
    with torch.no_grad():
      ref_lp = logp(ref)
    lp = logp(model)
    w = torch.exp(lp - old)
    pg = -torch.minimum(w * adv, torch.clamp(w, 1 - LOSS.clip_low, 1 + LOSS.clip_high) * adv)
    log_r = (ref_lp - lp).clamp(-20, 20)
    tok = pg + LOSS.kl_coef * (torch.exp(log_r) - 1 - log_r)
    loss = ((tok * mask).sum(-1) / mask.sum(-1).clamp(min=1)).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), OPTIM["grad_clip"])
    opt.step()
    return loss.item()

  return run


_DONE_LINE = "TORCH_STEP_DONE"


def torch_worker(hf_dir: str) -> None:
  """``--torch_worker DIR``: the torch step on ``DIR``'s model and ``inputs.npz``; runs one step
  per thread count read from stdin and answers each with the line ``TORCH_STEP_DONE`` (the
  caller times the round trip, as it times ours)."""
  inputs = dict(np.load(os.path.join(hf_dir, "inputs.npz")))
  run = torch_step_fn(hf_dir, inputs)
  for line in sys.stdin:
    run(int(line))
    print(_DONE_LINE, flush=True)


class TorchProcess:
  """The torch step in a worker process (this script with ``--torch_worker``)."""

  def __init__(self, hf_dir: str):
    self.proc = subprocess.Popen([sys.executable, __file__, "--torch_worker", hf_dir],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

  def step(self, threads: int) -> None:
    """Runs one step with ``threads`` threads and waits for it."""
    self.proc.stdin.write(f"{threads}\n")
    self.proc.stdin.flush()
    for line in self.proc.stdout:
      if line.startswith(_DONE_LINE):
        return
    raise RuntimeError(f"the torch worker exited with {self.proc.wait()}")

  def close(self) -> None:
    self.proc.stdin.close()
    self.proc.wait()


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--model", default="smollm2", choices=("smollm2", "tiny"))
  parser.add_argument("--batch", type=int, default=8)
  parser.add_argument("--tokens", type=int, default=512)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--chunk", type=int, default=64, help="token_logprobs chunk over T")
  parser.add_argument("--remat", default=remat_lib.TRAINING_DEFAULT, choices=remat_lib.CHOICES,
                      help="model.remat of the trainer's step")
  parser.add_argument("--memory_only", action="store_true",
                      help="compile the step, print XLA's memory analysis, time nothing")
  parser.add_argument("--torch_worker", default="", help=argparse.SUPPRESS)
  parser.add_argument("--skip_torch", action="store_true",
                      help="time ours alone (ratio_vs_torch=nan)")
  parser.add_argument("--compute_dtype", default="float32", choices=("float32", "bfloat16"),
                      help="model.compute_dtype of ours (bfloat16: AMX where the CPU has it; the "
                           "parameters and the optimizer stay float32; torch stays float32)")
  args = parser.parse_args()
  if args.torch_worker:
    torch_worker(args.torch_worker)
    return
  allocator.reexec_with_retained_heap()
  n, t = args.batch, args.tokens
  print(f"load average at start: {os.getloadavg()}; devices: {jax.devices()[:1]}")

  if args.model == "smollm2":
    cfg, model = load_model("smollm2", compute_dtype=args.compute_dtype)
  else:
    cfg = dataclasses.replace(PRESETS["tiny"], compute_dtype=args.compute_dtype)
    model = make_model(cfg, seed=0)
  graphdef, state = nnx.split(model)
  params = nnx.to_pure_dict(state)
  mesh = sharding.make_mesh(1, 1, 1, devices=jax.devices()[:1])
  trainer = Trainer(graphdef, params, mesh, losses.make_rl_loss(LOSS), make_optimizer(OPTIM, 100),
                    chunk=args.chunk, remat=args.remat)
  train_state = trainer.init_state(params)
  ref = trainer.place_params(params)
  inputs = make_inputs(cfg, n, t)
  batch = trainer.put_batch(inputs)
  if args.memory_only:  # the step's program needs only the shape of the old log-probs
    batch["old_logp_NT"] = jax.ShapeDtypeStruct((n, t), jnp.float32, sharding=trainer.rows)
  else:
    batch["old_logp_NT"] = trainer.logprobs(train_state.params, batch)
    inputs["old_logp_NT"] = np.asarray(batch["old_logp_NT"])

  start = time.perf_counter()
  compiled, mem = compile_step(trainer, train_state, ref, batch)
  print(f"ours: compile {time.perf_counter() - start:.1f} s; XLA memory analysis (remat="
        f"{args.remat}): temporaries {mem['temp']:.2f} GB, arguments {mem['args']:.2f} GB, "
        f"outputs {mem['out']:.2f} GB (aliased {mem['alias']:.2f} GB); temporaries + arguments "
        f"{mem['temp'] + mem['args']:.2f} GB")
  if args.memory_only:
    print(f"RESULT remat={args.remat} xla_temp_gb={mem['temp']:.2f} xla_args_gb={mem['args']:.2f} "
          f"xla_peak_gb={mem['temp'] + mem['args']:.2f}")
    return

  holder = {"state": train_state}

  def ours():
    holder["state"], metrics = compiled(holder["state"], ref, batch)
    jax.block_until_ready(metrics)

  start = time.perf_counter()
  ours()
  print(f"ours: first step {time.perf_counter() - start:.1f} s")
  rate = matmul_rate()
  peak_rss_gb = timing.peak_rss_gb()
  print(f"peak RSS (this process, ours alone): {peak_rss_gb:.2f} GB; "
        f"2048^3 matmul: {rate / 1e9:.0f} GFLOP/s")

  if args.skip_torch:  # ours alone: A/B runs of our own step across code versions or settings
    med, times = timing.interleaved_medians({"ours": ours}, args.repeats)
  else:
    with tempfile.TemporaryDirectory() as hf_dir:
      export_hf_dir(model, cfg, hf_dir)
      np.savez(os.path.join(hf_dir, "inputs.npz"), **inputs)
      worker = TorchProcess(hf_dir)
      try:
        runs = {"ours": ours}
        for threads in (1, 2):
          runs[f"torch_{threads}t"] = lambda threads=threads: worker.step(threads)
          runs[f"torch_{threads}t"]()  # warm-up
        med, times = timing.interleaved_medians(runs, args.repeats)
      finally:
        worker.close()
  for name, ts in times.items():
    print(f"{name:>9}: median {med[name]:.2f} s = {n * t / med[name]:.0f} tok/s "
          f"(runs: {', '.join(f'{x:.2f}' for x in ts)})")

  p, tokens = cfg.num_params(), n * t
  attn = 12 * cfg.n_layers * cfg.n_heads * cfg.head_dim * t * tokens
  model_flops = 6 * p * tokens + attn
  # Beyond the model FLOPs: the reference's forward, the head recomputed in the backward (none
  # with the token ratio: its gradients are formed in the forward, models/loss_head.py), the
  # attention backward's recomputed scores (flash form, models/causal_blocks.py) and what remat
  # recomputes (full: every block's forward). Attention counts the whole square (the PaLM
  # convention) although the causal blocks and the kernel skip the masked half.
  head = 0 if LOSS.ratio == "token" else 2 * cfg.vocab_size * cfg.d_model * tokens
  recompute = attn / 6 + {"none": 0, "dots": 0, "dots_no_batch": 0,
                          "full": 2 * (p - cfg.vocab_size * cfg.d_model) * tokens + attn / 3
                          }[args.remat]
  hardware_flops = model_flops + (2 * p * tokens + attn / 3) + head + recompute
  mfu = model_flops / med["ours"] / rate
  hfu = hardware_flops / med["ours"] / rate
  ratio = (float("nan") if args.skip_torch
           else min(med["torch_1t"], med["torch_2t"]) / med["ours"])
  print(f"model {args.model}: {p / 1e6:.1f} M parameters; {n} x {t} tokens; "
        f"model TFLOP per step {model_flops / 1e12:.2f}")
  print(f"load average at end: {os.getloadavg()}")
  print(f"RESULT mfu={mfu:.3f} hfu={hfu:.3f} ratio_vs_torch={ratio:.3f} "
        f"peak_rss_gb={peak_rss_gb:.2f} xla_temp_gb={mem['temp']:.2f} xla_args_gb={mem['args']:.2f} "
        f"remat={args.remat} cpu={timing.cpu_kind()} compute_dtype={args.compute_dtype}")


if __name__ == "__main__":
  main()
