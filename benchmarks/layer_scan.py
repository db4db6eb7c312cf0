"""Compile time of the training value-and-grad: layers unrolled (the model) vs stacked under a scan.

  .venv/bin/python benchmarks/layer_scan.py [--preset qwen3_8b] [--batch 1] [--tokens 128]
  .venv/bin/python benchmarks/layer_scan.py --preset tiny --tokens 16  # smoke (also checks values)

Both sides are ``jax.value_and_grad`` of the mean ``token_logprobs`` with ``--remat`` applied per
block, lowered from abstract shapes (``abstract_model``: no weights are allocated) and compiled on
the CPU backend; lowering and compiling are timed separately. The unrolled side is
``models/transformer.py`` as it is (a Python loop over ``n_layers`` blocks). The scanned side is a
prototype here: the blocks' parameters stacked on a leading [L] axis and one block body under
``jax.lax.scan`` (the same ``jax.checkpoint`` policy on the body), the embedding, final norm and
head from the model. With ``--preset tiny`` the two are also run on random weights and their loss
and gradients compared. Ends with one ``RESULT`` line.
"""
from __future__ import annotations

import argparse
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from arenarl_jax.models import attention_choice, remat as remat_lib
from arenarl_jax.models.attention import Context
from arenarl_jax.models.config import PRESETS, ModelConfig
from arenarl_jax.models.logprobs import token_logprobs
from arenarl_jax.models.rope import rope_tables
from arenarl_jax.models.transformer import Transformer, abstract_model, make_model, set_remat


class ScannedModel:
  """The ``hidden`` / ``head`` surface ``token_logprobs`` reads, with the blocks under a scan.

  ``shell``: a Transformer with no layers (embedding, final norm, head); ``block_graphdef`` and
  ``blocks``: one block's graph definition and every block's state stacked on axis 0."""

  def __init__(self, shell: Transformer, block_graphdef, blocks, remat: str):
    self.shell, self.block_graphdef, self.blocks, self.remat = shell, block_graphdef, blocks, remat

  def hidden(self, tokens_NT, positions_NT=None, *, mask_NT=None):
    cfg = self.shell.cfg
    n, t = tokens_NT.shape
    if positions_NT is None:
      positions_NT = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (n, t))
    impl = attention_choice.resolve(self.shell.attention)
    cos, sin = rope_tables(cfg, positions_NT, None)
    x_NTD = jnp.take(self.shell.embed[...], tokens_NT, axis=0)

    def body(x_NTD, block_state):
      block = nnx.merge(self.block_graphdef, block_state)
      return block(x_NTD, cos, sin, Context(positions_NT, mask_NT), impl)[0], None

    if self.remat != "none":
      body = jax.checkpoint(body, policy=remat_lib.policy(self.remat), prevent_cse=False)
    x_NTD, _ = jax.lax.scan(body, x_NTD, self.blocks)
    return self.shell.final_norm(x_NTD), None

  def head(self, h_NTD):
    return self.shell.head(h_NTD)


def split_for_scan(cfg: ModelConfig, state):
  """(shell graphdef, shell state, block graphdef, stacked block state) from a full model's state
  (pure dict); the shell is the same model with no layers."""
  shell_cfg = ModelConfig(**{**cfg.__dict__, "n_layers": 0})
  shell_graphdef, _ = nnx.split(abstract_model(shell_cfg))
  block_graphdef, _ = nnx.split(abstract_model(ModelConfig(**{**cfg.__dict__, "n_layers": 1})
                                               ).layers[0])
  layers = state["layers"]
  stacked = jax.tree.map(lambda *xs: _stack(xs), *[layers[i] for i in range(cfg.n_layers)])
  shell = {k: v for k, v in state.items() if k != "layers"}
  shell["layers"] = {}
  return shell_graphdef, shell, block_graphdef, stacked


def _stack(xs):
  if isinstance(xs[0], jax.ShapeDtypeStruct):
    return jax.ShapeDtypeStruct((len(xs),) + xs[0].shape, xs[0].dtype)
  return jnp.stack(xs)


def unrolled_loss(graphdef, remat: str, chunk: int):
  def loss(state, tokens_NT):
    model = set_remat(nnx.merge(graphdef, nnx.State(state)), remat)
    return jnp.mean(token_logprobs(model, tokens_NT, chunk=chunk))
  return loss


def scanned_loss(shell_graphdef, block_graphdef, remat: str, chunk: int):
  def loss(state, tokens_NT):
    shell_state, blocks = state
    shell = nnx.merge(shell_graphdef, nnx.State(shell_state))
    model = ScannedModel(shell, block_graphdef, nnx.State(blocks), remat)
    return jnp.mean(token_logprobs(model, tokens_NT, chunk=chunk))
  return loss


def timed_compile(loss, state, tokens):
  """(lowering seconds, compile seconds) of jit(value_and_grad(loss)) and the compiled program."""
  start = time.perf_counter()
  lowered = jax.jit(jax.value_and_grad(loss)).lower(state, tokens)
  lowered_s = time.perf_counter() - start
  start = time.perf_counter()
  compiled = lowered.compile()
  return lowered_s, time.perf_counter() - start, compiled


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--preset", default="qwen3_8b", choices=sorted(PRESETS))
  parser.add_argument("--batch", type=int, default=1)
  parser.add_argument("--tokens", type=int, default=128)
  parser.add_argument("--chunk", type=int, default=64, help="token_logprobs chunk over T")
  parser.add_argument("--remat", default=remat_lib.TRAINING_DEFAULT, choices=remat_lib.CHOICES)
  args = parser.parse_args(argv)
  print(f"load average at start: {os.getloadavg()}; devices: {jax.devices()[:1]}")
  cfg = PRESETS[args.preset]
  graphdef, abstract = nnx.split(abstract_model(cfg))
  abstract = nnx.to_pure_dict(abstract)
  tokens = jax.ShapeDtypeStruct((args.batch, args.tokens), jnp.int32)
  shell_graphdef, shell, block_graphdef, blocks = split_for_scan(cfg, abstract)

  unrolled = unrolled_loss(graphdef, args.remat, args.chunk)
  scanned = scanned_loss(shell_graphdef, block_graphdef, args.remat, args.chunk)
  u_lower, u_compile, u_prog = timed_compile(unrolled, abstract, tokens)
  s_lower, s_compile, s_prog = timed_compile(scanned, (shell, blocks), tokens)
  u_temp = u_prog.memory_analysis().temp_size_in_bytes / 1e9
  s_temp = s_prog.memory_analysis().temp_size_in_bytes / 1e9
  print(f"{args.preset}: {cfg.n_layers} layers, {cfg.num_params() / 1e9:.2f} B parameters, "
        f"{args.batch} x {args.tokens} tokens, remat={args.remat}")
  print(f"  unrolled: lower {u_lower:.1f} s, compile {u_compile:.1f} s, XLA temporaries "
        f"{u_temp:.2f} GB")
  print(f"  scanned:  lower {s_lower:.1f} s, compile {s_compile:.1f} s, XLA temporaries "
        f"{s_temp:.2f} GB")

  max_diff = float("nan")
  if args.preset == "tiny":  # the prototype computes the model's loss and gradients
    state = nnx.to_pure_dict(nnx.state(make_model(cfg, seed=0)))
    _, shell_v, _, blocks_v = split_for_scan(cfg, state)
    tokens_v = jnp.asarray(np.random.default_rng(0).integers(0, cfg.vocab_size, tokens.shape),
                           jnp.int32)
    u_val, u_grad = u_prog(state, tokens_v)
    s_val, (s_shell, s_blocks) = s_prog((shell_v, blocks_v), tokens_v)
    _, s_shell_grad, _, s_blocks_grad = split_for_scan(cfg, u_grad)
    diffs = [abs(float(u_val) - float(s_val))]
    diffs += [float(jnp.max(jnp.abs(a - b))) for a, b in zip(
        jax.tree.leaves((s_shell_grad, s_blocks_grad)), jax.tree.leaves((s_shell, s_blocks)))]
    max_diff = max(diffs)
    print(f"  values: loss {float(u_val):.6f} vs {float(s_val):.6f}; max |grad difference| "
          f"{max_diff:.2e}")
    assert max_diff < 1e-5, max_diff
  print(f"load average at end: {os.getloadavg()}")
  print(f"RESULT unrolled_lower_s={u_lower:.1f} unrolled_compile_s={u_compile:.1f} "
        f"scan_lower_s={s_lower:.1f} scan_compile_s={s_compile:.1f} "
        f"compile_speedup={(u_lower + u_compile) / (s_lower + s_compile):.2f} "
        f"unrolled_temp_gb={u_temp:.2f} scan_temp_gb={s_temp:.2f}")
  return {"max_diff": max_diff, "unrolled_s": u_lower + u_compile, "scan_s": s_lower + s_compile}


if __name__ == "__main__":
  main()
