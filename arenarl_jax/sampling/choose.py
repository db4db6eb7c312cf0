"""Choosing the next token from logits: greedy, temperature, top-k, top-p, and its log-prob.

The returned log-prob is log softmax(logits / T)[token] with T the row's temperature (T = 1 for
greedy rows): the temperature-scaled policy's log-prob, *not* renormalised by top-k/top-p, so it
equals a teacher-forced ``token_logprobs(..., temperature=T)`` over the same tokens.
"""
from __future__ import annotations

import jax
import jax.extend.random as jex_random
import jax.numpy as jnp

from arenarl_jax.sampling.settings import RowSettings

_BLOCK = 256  # inverse-CDF search: first over V/256 block sums, then inside one block


def _last_positive(w_NK):
  """Index of the last entry > 0 per row (0 when none)."""
  k = w_NK.shape[-1]
  return k - 1 - jnp.argmax(jnp.flip(w_NK > 0, axis=-1), axis=-1)


def row_uniforms(key, first_row, n: int):
  """Elements first_row .. first_row + n - 1 of ``jax.random.uniform(key, (M,))`` (any M that
  covers them), with ``first_row`` a traced int32 scalar.

  Partitionable threefry draws element i from counter i alone, so a host's share of a batch (or
  one wave of an evaluation) draws the numbers of its global rows without a draw as long as the
  batch. A traced offset keeps one compiled program for every offset: a static one compiled
  each decode program anew for every wave of an evaluation.
  """
  if not jax.config.jax_threefry_partitionable:
    raise ValueError("row_uniforms needs jax_threefry_partitionable=True (JAX's default): only "
                     "then is element i of a random draw independent of its length")
  typed = jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
  impl = str(jax.random.key_impl(key)) if typed else jax.config.jax_default_prng_impl
  if impl != "threefry2x32":
    raise ValueError(f"row_uniforms needs threefry2x32 keys, got {impl}")
  key = jax.random.key_data(key) if typed else key
  # Counter i is the 64-bit index (hi, lo); row offsets stay far below 2**32, so hi is 0.
  lo_N = jnp.asarray(first_row, jnp.uint32) + jax.lax.iota(jnp.uint32, n)
  bits1_N, bits2_N = jex_random.threefry2x32_p.bind(key[0], key[1], jnp.zeros_like(lo_N), lo_N)
  # jax.random.uniform's map from 32 bits to [0, 1): the top 23 bits as the mantissa of [1, 2).
  mantissa_N = jax.lax.shift_right_logical(bits1_N ^ bits2_N, jnp.uint32(9))
  one_bits = jnp.uint32(0x3F800000)
  floats_N = jax.lax.bitcast_convert_type(mantissa_N | one_bits, jnp.float32) - 1.0
  return jnp.maximum(0.0, floats_N)


def inverse_cdf(w_NV, u_N):
  """(index i drawn with probability w_i / sum(w) from one uniform u in [0, 1) per row, sum(w)).

  Two-level search (block sums, then one block's cumsum) so no full-vocabulary cumsum or sort is
  needed; indices with zero weight are never returned (rounding is clamped onto positive weight).
  """
  w_NbK = _blocks(w_NV, 1)
  return _inverse_cdf_blocks(w_NbK.sum(axis=-1), u_N, lambda b_N: _pick_block(w_NbK, b_N, 1))


def _blocks(x, vocab_axis: int, fill=0.0):
  """The vocabulary axis split into blocks: [N, V] -> [N, V/_BLOCK, _BLOCK] (vocab_axis 1) or
  [V, N] -> [V/_BLOCK, _BLOCK, N] (vocab_axis 0); the last block padded with ``fill``."""
  v = x.shape[vocab_axis]
  nb = -(-v // _BLOCK)
  widths = [(0, 0), (0, 0)]
  widths[vocab_axis] = (0, nb * _BLOCK - v)
  x = jnp.pad(x, widths, constant_values=fill)
  return x.reshape(x.shape[0], nb, _BLOCK) if vocab_axis else x.reshape(nb, _BLOCK, x.shape[1])


def _pick_block(x_blocks, b_N, vocab_axis: int):
  """Row n's block b_N[n] of ``_blocks`` output: [N, _BLOCK] in either layout."""
  if vocab_axis:
    return jnp.take_along_axis(x_blocks, b_N[:, None, None], axis=1)[:, 0]
  return jnp.take_along_axis(x_blocks, b_N[None, None, :], axis=0)[0].T


def _inverse_cdf_blocks(bsum_Nb, u_N, inner):
  """inverse_cdf from the per-block weight sums [N, nb] and ``inner(b_N)``, the chosen blocks'
  weights [N, _BLOCK]; (index, the total weight per row). Only the block sums and one block per
  row are needed, so when the weights are an element-wise function of the logits XLA fuses them
  into the sums and the full weights are never written to memory."""
  cum_Nb = jnp.cumsum(bsum_Nb, axis=-1)
  target_N = u_N * cum_Nb[:, -1]
  b_N = jnp.minimum(jnp.sum(cum_Nb <= target_N[:, None], axis=-1), _last_positive(bsum_Nb))
  b_N1 = b_N[:, None]
  below_N = jnp.take_along_axis(cum_Nb, b_N1, axis=-1)[:, 0] - jnp.take_along_axis(
      bsum_Nb, b_N1, axis=-1)[:, 0]
  frac_N = jnp.clip((target_N - below_N) / jnp.take_along_axis(bsum_Nb, b_N1, axis=-1)[:, 0], 0, 1)
  inner_NK = inner(b_N)
  icum_NK = jnp.cumsum(inner_NK, axis=-1)
  j_N = jnp.sum(icum_NK <= (frac_N * icum_NK[:, -1])[:, None], axis=-1)
  return b_N * _BLOCK + jnp.minimum(j_N, _last_positive(inner_NK)), cum_Nb[:, -1]


def _largest_threshold(w_NV, holds):
  """Per row, the largest t with holds(t) (t = 0 must hold, t > max(w) must not), found by
  bisection on float32 bit patterns (monotone for t >= 0): exact in 31 passes over V, no sort."""
  n = w_NV.shape[0]
  lo_N = jnp.zeros((n,), jnp.int32)
  hi_N = jnp.full((n,), jax.lax.bitcast_convert_type(jnp.float32(jnp.inf), jnp.int32))

  def step(_, bounds):
    lo_N, hi_N = bounds
    mid_N = lo_N + (hi_N - lo_N) // 2
    ok_N = holds(jax.lax.bitcast_convert_type(mid_N, jnp.float32))
    return jnp.where(ok_N, mid_N, lo_N), jnp.where(ok_N, hi_N, mid_N)

  lo_N, _ = jax.lax.fori_loop(0, 31, step, (lo_N, hi_N))
  return jax.lax.bitcast_convert_type(lo_N, jnp.float32)


def truncate(w_NV, top_k_N, top_p_N):
  """Zeroes weights outside the top-k, then outside the top-p nucleus of what is left.

  Both cut at a per-row threshold weight, so tokens tied with the last kept one are kept too
  (top-k as in transformers); top-p keeps the smallest set {w >= t} whose mass reaches top_p of
  the top-k mass. Rows with top_k 0 and top_p 1 are unchanged.
  """
  def enough_tokens(t_N):
    return jnp.sum(w_NV >= t_N[:, None], axis=-1) >= top_k_N

  t_k_N = jnp.where(top_k_N > 0, _largest_threshold(w_NV, enough_tokens), 0.0)
  w_NV = jnp.where(w_NV >= t_k_N[:, None], w_NV, 0.0)
  target_N = top_p_N * jnp.sum(w_NV, axis=-1)

  def enough_mass(t_N):
    return jnp.sum(jnp.where(w_NV >= t_N[:, None], w_NV, 0.0), axis=-1) >= target_N

  t_p_N = jnp.where(top_p_N < 1, _largest_threshold(w_NV, enough_mass), 0.0)
  return jnp.where(w_NV >= t_p_N[:, None], w_NV, 0.0)


def choose_tokens(logits, rows: RowSettings, key, *, vocab_axis: int = 1):
  """(tokens_N int32, logp_N float32) for one step; greedy rows take the argmax.

  ``logits``: float32 [N, V] (vocab_axis 1) or [V, N] (vocab_axis 0, as the feature-major decode
  step's head writes them: sampling reads them in place instead of transposing 49k x N floats).
  """
  if vocab_axis not in (0, 1) or logits.ndim != 2:
    raise ValueError(f"choose_tokens takes [N, V] or [V, N] logits with vocab_axis 1 or 0, got "
                     f"shape {logits.shape} and vocab_axis={vocab_axis}")
  logits = logits.astype(jnp.float32)
  greedy_N = rows.temperature_N <= 0
  inv_t_N = jnp.where(greedy_N, 1.0, 1.0 / jnp.where(greedy_N, 1.0, rows.temperature_N))
  per_row = lambda x_N: jnp.expand_dims(x_N, vocab_axis)  # [N] -> broadcastable over V
  # z = logits / T is never materialised (one V-wide pass less per step): 1/T > 0, so the max
  # and argmax of z are those of the logits, scaled.
  raw_max_N = jnp.max(logits, axis=vocab_axis)
  m_N = raw_max_N * inv_t_N
  # Row n takes element first_row + n of one draw, so any split of the rows over hosts (or
  # waves) samples the same numbers as the whole batch in one process.
  u_N = row_uniforms(key, rows.first_row, greedy_N.shape[0])
  needs_cut = jnp.any(~greedy_N & ((rows.top_k_N > 0) | (rows.top_p_N < 1)))
  # The [N, nb] block sums, whichever layout the blocks have.
  block_sums = lambda w_blocks: w_blocks.sum(axis=2) if vocab_axis else w_blocks.sum(axis=1).T

  # The branches take the logits, not z: cond operands are materialised, z need not be.
  def plain(logits, inv_t_N, m_N, u_N):
    # Weights exp(z - m) only inside the block sums and for the chosen block (one pass over V).
    z_blocks = _blocks(logits * per_row(inv_t_N), vocab_axis, -jnp.inf)
    m_blocks = m_N[:, None, None] if vocab_axis else m_N[None, None, :]
    inner = lambda b_N: jnp.exp(_pick_block(z_blocks, b_N, vocab_axis) - m_N[:, None])
    return _inverse_cdf_blocks(block_sums(jnp.exp(z_blocks - m_blocks)), u_N, inner)

  def cut(logits, inv_t_N, m_N, u_N):
    # Top-k/top-p need the full weights; this branch works on [N, V] whatever the input layout.
    w_NV = jnp.exp(jnp.moveaxis(logits, 1 - vocab_axis, 0) * inv_t_N[:, None] - m_N[:, None])
    drawn_N, _ = inverse_cdf(truncate(w_NV, rows.top_k_N, rows.top_p_N), u_N)
    return drawn_N, jnp.sum(w_NV, axis=-1)  # the log-prob is not renormalised by the cut

  drawn_N, total_N = jax.lax.cond(needs_cut, cut, plain, logits, inv_t_N, m_N, u_N)
  log_total_N = jnp.log(total_N)
  # Greedy rows' token: the first index holding the max (cheaper on CPU than jnp.argmax's
  # variadic reduction).
  v = logits.shape[vocab_axis]
  iota = jax.lax.broadcasted_iota(jnp.int32, logits.shape, vocab_axis)
  first_max_N = jnp.min(jnp.where(logits == per_row(raw_max_N), iota, v - 1), axis=vocab_axis)
  tokens_N = jnp.where(greedy_N, first_max_N, drawn_N).astype(jnp.int32)
  z_tok_N = jnp.take_along_axis(logits, per_row(tokens_N), axis=vocab_axis).reshape(-1) * inv_t_N
  return tokens_N, z_tok_N - m_N - log_total_N
