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


def to_chunks(x_NT, chunk: int):
  """[N, T', ...] -> [C, N, chunk, ...]: T' zero-padded to whole chunks, chunk-major (the scan's
  leading axis)."""
  n, t = x_NT.shape[:2]
  steps = -(-t // chunk)
  x_NT = jnp.pad(x_NT, ((0, 0), (0, steps * chunk - t)) + ((0, 0),) * (x_NT.ndim - 2))
  return jnp.moveaxis(x_NT.reshape(n, steps, chunk, *x_NT.shape[2:]), 1, 0)


def from_chunks(x_CNt, t: int):
  """[C, N, chunk] per-prediction values of tokens 1..T-1 -> [N, T] with 0 at position 0 (which
  predicts nothing)."""
  c, n, chunk = x_CNt.shape
  x_NT = jnp.moveaxis(x_CNt, 0, 1).reshape(n, c * chunk)[:, : t - 1]
  return jnp.concatenate([jnp.zeros((n, 1), x_NT.dtype), x_NT], axis=1)


def softmax_stats(z_VNt, tg_Nt, entropy: bool = True):
  """(logp_Nt, entropy_Nt, p_VNt) of vocabulary-major (tempered) logits z [V, N, t] at the
  targets tg [N, t]: log softmax(z)[target], H = -sum p log p = lse - sum p z and p = softmax(z);
  without ``entropy`` the last two are None (p is not formed)."""
  lse_Nt = jax.nn.logsumexp(z_VNt, axis=0)
  logp_Nt = jnp.take_along_axis(z_VNt, tg_Nt[None], axis=0)[0] - lse_Nt
  if not entropy:
    return logp_Nt, None, None
  p_VNt = jnp.exp(z_VNt - lse_Nt[None])
  return logp_Nt, lse_Nt - jnp.sum(p_VNt * z_VNt, axis=0), p_VNt


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
  h_CNtD, tg_CNt = to_chunks(h_NTD[:, :-1], chunk), to_chunks(tokens_NT[:, 1:], chunk)

  def one_chunk(h_NtD, tg_Nt):
    # Vocabulary-major logits (the head's fast orientation; reductions over axis 0).
    z_VNt = _vocab_major_logits(model, h_NtD) / t_N[None, :, None]
    logp_Nt, ent_Nt, _ = softmax_stats(z_VNt, tg_Nt, return_entropy)
    return logp_Nt, ent_Nt

  if checkpoint_chunks:
    one_chunk = jax.checkpoint(one_chunk)
  _, (lp_CNt, ent_CNt) = jax.lax.scan(lambda _, xs: (None, one_chunk(*xs)), None,
                                      (h_CNtD, tg_CNt))

  unchunk = lambda x_CNt: from_chunks(x_CNt, t)  # noqa: E731

  if not return_entropy:
    return unchunk(lp_CNt)
  return unchunk(lp_CNt), unchunk(ent_CNt)
