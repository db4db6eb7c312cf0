"""Teacher-forced per-token log-probs (and entropies) without materialising [N, T, V] logits.

Used by the sampler's tests, the judge, the trainer's old and reference log-probs and the sequence
ratio's update (the per-token objectives differentiate ``loss_head.py`` instead), so it is
differentiable: the head and log-softmax run over T in chunks inside a scan, and each chunk is a
``jax.checkpoint``, so the backward pass recomputes one chunk's logits at a time instead of keeping
every chunk's [N, chunk, V] logits alive (for SmolLM2 at 8 x 512 that is 1.6 GB of logits -> 100
MB per 64-token chunk).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from arenarl_jax.models.transformer import Transformer


def row_temperature(temperature, n: int):
  """[N] float32 temperatures; T <= 0 (a greedy row) is scored at T = 1."""
  t_N = jnp.broadcast_to(jnp.asarray(temperature, jnp.float32), (n,))
  return jnp.where(t_N > 0, t_N, 1.0)


def _vocab_major_logits(model, h_NtD):
  """[V, N, t] logits: the Transformer's fast vocabulary-major head, or, for a model whose
  ``head`` is its own (a subclass or a stand-in overriding it), that head's logits moved."""
  if isinstance(model, Transformer) and type(model).head is Transformer.head:
    return model.head_vocab_major(h_NtD)
  return jnp.moveaxis(model.head(h_NtD), -1, 0)


def token_logprobs(model: Transformer, tokens_NT, positions_NT=None, mask_NT=None, *,
                   chunk: int = 64, temperature=1.0, return_entropy: bool = False,
                   checkpoint_chunks: bool = True):
  """logp_NT[n, t] = log softmax(logits / T_n)[tokens[n, t]] given tokens[n, :t]; position 0 gets 0.

  ``temperature`` is a scalar or one value per row ([N]); rows with T <= 0 (greedy) are scored at
  T = 1, the distribution a trainer can differentiate. With ``return_entropy`` also returns
  entropy_NT[n, t], the entropy of that same tempered next-token distribution (0 at position 0).
  ``checkpoint_chunks=False`` drops the per-chunk ``jax.checkpoint`` (same values; the backward
  then keeps every chunk's logits: only for measuring what the checkpoint saves).
  """
  n, t = tokens_NT.shape
  t_N = row_temperature(temperature, n)
  h_NTD, _ = model.hidden(tokens_NT, positions_NT, mask_NT=mask_NT)
  # Predict token t+1 from hidden t: shift targets left; the last hidden has no target.
  h_NTD = h_NTD[:, :-1]
  targets_NT = tokens_NT[:, 1:]
  steps = -(-(t - 1) // chunk)
  pad = steps * chunk - (t - 1)
  h_NTD = jnp.pad(h_NTD, ((0, 0), (0, pad), (0, 0)))
  targets_NT = jnp.pad(targets_NT, ((0, 0), (0, pad)))
  h_CNtD = h_NTD.reshape(n, steps, chunk, -1).swapaxes(0, 1)
  tg_CNt = targets_NT.reshape(n, steps, chunk).swapaxes(0, 1)

  def one_chunk(h_NtD, tg_Nt):
    # Vocabulary-major logits (the head's fast orientation; reductions over axis 0).
    z_VNt = _vocab_major_logits(model, h_NtD) / t_N[None, :, None]
    lse_Nt = jax.nn.logsumexp(z_VNt, axis=0)
    picked_Nt = jnp.take_along_axis(z_VNt, tg_Nt[None], axis=0)[0]
    if not return_entropy:
      return picked_Nt - lse_Nt, None
    # H = -sum p log p = lse - sum p z, with p = softmax(z).
    p_VNt = jnp.exp(z_VNt - lse_Nt[None])
    return picked_Nt - lse_Nt, lse_Nt - jnp.sum(p_VNt * z_VNt, axis=0)

  if checkpoint_chunks:
    one_chunk = jax.checkpoint(one_chunk)
  _, (lp_CNt, ent_CNt) = jax.lax.scan(lambda _, xs: (None, one_chunk(*xs)), None,
                                      (h_CNtD, tg_CNt))

  def unchunk(x_CNt):
    x_NT = x_CNt.swapaxes(0, 1).reshape(n, steps * chunk)[:, : t - 1]
    return jnp.concatenate([jnp.zeros((n, 1), x_NT.dtype), x_NT], axis=1)

  if not return_entropy:
    return unchunk(lp_CNt)
  return unchunk(lp_CNt), unchunk(ent_CNt)
