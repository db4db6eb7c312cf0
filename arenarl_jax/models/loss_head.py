"""The teacher-forced head fused with a per-token loss: the loss, the log-probs and entropies, and
the head's gradients in one chunked pass, with nothing recomputed in the backward.

``token_logprobs`` followed by a loss differentiates the head by recomputing each chunk's
[V, N, t] logits in the backward pass (its chunks are checkpointed so that one chunk's logits are
alive at a time). When the loss is a sum of per-token terms, each a function of its own token's
log-prob (``loss = sum_{n, t} f(logp[n, t]; extras[n, t])``: the token-ratio clipped objective
with any KL estimator and any aggregation, whose normalisers are fixed for the batch), the
gradient with respect to a chunk's logits is known as soon as its log-probs are:
  dL/dz[v, n, t] = f'(logp[n, t]) / T_n * (onehot(target[n, t])[v] - p[v, n, t])
so the forward pass forms dL/dh and dL/dW there and then, and the backward only scales them by
the loss's cotangent. That saves one of the head's four [V, D] x [D, tokens] products per chunk
and its second softmax pass, and keeps the same one-chunk memory. GSPO's sequence ratio couples a
row's tokens (not per-token) and stays on ``token_logprobs``.
"""
from __future__ import annotations

import functools
from typing import Callable, Mapping

import jax
import jax.numpy as jnp

from arenarl_jax.models.logprobs import from_chunks, row_temperature, softmax_stats, to_chunks
from arenarl_jax.models.transformer import Transformer

# token_loss(logp_Nt, extras) -> per-token loss [N, t], elementwise in (n, t); extras: the
# caller's [N, t] arrays for the same tokens.
TokenLoss = Callable[[jax.Array, Mapping[str, jax.Array]], jax.Array]


def supports(model) -> bool:
  """Whether ``model``'s head is the plain Transformer head (its weight is what the fused pass
  differentiates); a model with a head of its own takes ``token_logprobs``."""
  return isinstance(model, Transformer) and type(model).head is Transformer.head


def _head_weight(model: Transformer, dtype):
  """[V, D]: the tied embedding, or the untied head's kernel transposed."""
  if model.lm_head is None:
    return model.embed[...].astype(dtype)
  return model.lm_head.kernel[...].astype(dtype).T


def _chunk(token_loss, w_VD, t_N, grads: bool, h_NtD, tg_Nt, valid_Nt, ex):
  """One chunk: (loss, logp_Nt, entropy_Nt, dh_NtD or None, dW_VD or None)."""
  z_VNt = jnp.einsum("vd,ntd->vnt", w_VD, h_NtD,
                     preferred_element_type=jnp.float32) / t_N[None, :, None]
  logp_Nt, ent_Nt, p_VNt = softmax_stats(z_VNt, tg_Nt)
  per_token = lambda lp: jnp.sum(token_loss(lp, ex) * valid_Nt)
  if not grads:
    return per_token(logp_Nt), logp_Nt, ent_Nt, None, None
  loss, g_Nt = jax.value_and_grad(per_token)(logp_Nt)
  # dL/dz = g / T (onehot - p); the onehot is applied as a mask, not materialised.
  hit_VNt = jnp.arange(z_VNt.shape[0])[:, None, None] == tg_Nt[None]
  dz_VNt = (g_Nt / t_N[:, None])[None] * (hit_VNt.astype(jnp.float32) - p_VNt)
  dz_VNt = dz_VNt.astype(h_NtD.dtype)
  # Contracted over the leading (vocabulary) axis of both operands: the product's output is the
  # small [D, N, t], and dz is read in the layout it was written in ("vnt,vd->ntd" made XLA:CPU
  # write a transposed copy of the [V, N*t] dz first, a strided pass as slow as a product).
  # Both gradients accumulate in float32 and are rounded once (bfloat16 compute: the matrix units'
  # own accumulation; float32: the same products as before).
  dh_DNt = jnp.einsum("vd,vnt->dnt", w_VD, dz_VNt,
                      preferred_element_type=jnp.float32).astype(h_NtD.dtype)
  dh_NtD = jnp.transpose(dh_DNt, (1, 2, 0))
  dw_VD = jnp.einsum("vnt,ntd->vd", dz_VNt, h_NtD,
                     preferred_element_type=jnp.float32).astype(w_VD.dtype)
  return loss, logp_Nt, ent_Nt, dh_NtD, dw_VD


def _scan(token_loss, grads, h_CNtD, w_VD, tg_CNt, valid_CNt, t_N, ex_C):
  """All chunks: (loss, (logp_CNt, entropy_CNt), dh_CNtD, dW_VD); the dW accumulated."""

  def body(carry, xs):
    loss, dw = carry
    l, lp, ent, dh, dw_c = _chunk(token_loss, w_VD, t_N, grads, *xs)
    return (loss + l, dw if dw_c is None else dw + dw_c), (lp, ent, dh)

  dw0 = jnp.zeros(w_VD.shape, w_VD.dtype) if grads else None
  (loss, dw), (lp, ent, dh) = jax.lax.scan(body, (jnp.zeros((), jnp.float32), dw0),
                                           (h_CNtD, tg_CNt, valid_CNt, ex_C))
  return loss, (lp, ent), dh, dw


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _fused(token_loss, h_CNtD, w_VD, tg_CNt, valid_CNt, t_N, ex_C):
  loss, aux, _, _ = _scan(token_loss, False, h_CNtD, w_VD, tg_CNt, valid_CNt, t_N, ex_C)
  return loss, aux


def _fused_fwd(token_loss, h_CNtD, w_VD, tg_CNt, valid_CNt, t_N, ex_C):
  loss, aux, dh, dw = _scan(token_loss, True, h_CNtD, w_VD, tg_CNt, valid_CNt, t_N, ex_C)
  return (loss, aux), (dh, dw, tg_CNt, valid_CNt, t_N, ex_C)


def _fused_bwd(token_loss, res, ct):
  del token_loss
  dh, dw, tg_CNt, valid_CNt, t_N, ex_C = res
  ct_loss = ct[0]  # the log-probs and entropies are returned stop-gradient (see the caller)
  zeros = lambda x: jnp.zeros(x.shape, x.dtype)
  return (ct_loss.astype(dh.dtype) * dh, ct_loss.astype(dw.dtype) * dw,
          jnp.zeros(tg_CNt.shape, jax.dtypes.float0), zeros(valid_CNt), zeros(t_N),
          jax.tree.map(zeros, ex_C))


_fused.defvjp(_fused_fwd, _fused_bwd)


def fused_token_loss(model: Transformer, tokens_NT, token_loss: TokenLoss,
                     extras: Mapping[str, jax.Array], *, chunk: int = 64, temperature=1.0):
  """(loss, logp_NT, entropy_NT) with loss = sum over n and t >= 1 of token_loss(logp, extras)
  at (n, t); logp_NT and entropy_NT as ``token_logprobs(..., return_entropy=True)`` gives them
  (0 at position 0, which predicts nothing and adds no term).

  ``token_loss`` must be elementwise: its value at (n, t) may depend on logp[n, t] and
  extras[k][n, t] only (it is differentiated per chunk). ``extras``: [N, T] float arrays aligned
  with ``tokens_NT`` (the term at t uses extras[:, t]). Only ``loss`` is differentiable (with
  respect to the model's parameters through the hidden states and the head weight); the
  log-probs and entropies are for metrics and come back stop-gradient.
  """
  if not supports(model):
    raise ValueError(f"fused_token_loss needs the plain Transformer head, got "
                     f"{type(model).__name__}; use token_logprobs")
  n, t = tokens_NT.shape
  t_N = row_temperature(temperature, n)
  h_NTD, _ = model.hidden(tokens_NT)
  # Predictions of tokens 1..T-1 from hidden states 0..T-2, in whole chunks.
  chunked = lambda x_NT: to_chunks(x_NT, chunk)  # noqa: E731
  h_CNtD = chunked(h_NTD[:, :-1])
  tg_CNt = chunked(tokens_NT[:, 1:])
  valid_CNt = chunked(jnp.ones((n, t - 1), jnp.float32))
  ex_C = {k: chunked(jnp.asarray(v, jnp.float32)[:, 1:]) for k, v in extras.items()}
  loss, (lp_CNt, ent_CNt) = _fused(token_loss, h_CNtD, _head_weight(model, h_NTD.dtype), tg_CNt,
                                   valid_CNt, t_N, ex_C)

  unchunk = lambda x_CNt: from_chunks(jax.lax.stop_gradient(x_CNt), t)  # noqa: E731
  return loss, unchunk(lp_CNt), unchunk(ent_CNt)
