"""Sampled tokens follow the intended distribution (temperature, top-k, top-p) on fixed logits.

Tolerance: every token's empirical frequency is within 4.5 binomial standard deviations of its
intended probability (fixed seeds, so the tests are deterministic); tokens outside the top-k /
top-p set are never drawn, and greedy rows always take the argmax.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from arenarl_jax.models.config import ModelConfig
from arenarl_jax.sampling.sampler import RowSettings, Sampler, SamplingSettings, token_lists
from arenarl_jax.sampling import choose

LOGITS_V = np.array([2.0, 1.5, 1.5, 0.3, -0.5, -2.0], np.float32)


def intended(temperature, top_k=0, top_p=1.0):
  """Reference: softmax(logits / T), cut to the top-k, then to the top-p nucleus, renormalised."""
  p = np.exp(LOGITS_V / temperature - np.max(LOGITS_V / temperature))
  p /= p.sum()
  if top_k:
    p = np.where(p >= np.sort(p)[::-1][top_k - 1], p, 0.0)
  if top_p < 1:
    desc = np.sort(p)[::-1]
    cut = desc[np.argmax(np.cumsum(desc) >= top_p * desc.sum())]
    p = np.where(p >= cut, p, 0.0)
  return p / p.sum()


def assert_follows(tokens, p):
  n = tokens.size
  freq = np.bincount(tokens.reshape(-1), minlength=len(p)) / n
  sigma = np.sqrt(p * (1 - p) / n)
  assert np.all(freq[p == 0] == 0), (freq, p)
  assert np.all(np.abs(freq - p) <= 4.5 * sigma + 1e-12), (freq, p, sigma)


CASES = [  # (temperature, top_k, top_p): the cuts land between tokens and on a tie (1.5, 1.5)
    (0.7, 0, 1.0), (1.0, 0, 0.8), (1.3, 3, 1.0), (1.0, 2, 1.0), (2.0, 4, 0.7), (1.0, 0, 0.3)]


@pytest.mark.parametrize("temperature,top_k,top_p", CASES)
def test_token_choice_matches_the_intended_distribution(temperature, top_k, top_p):
  n = 40_000
  rows = RowSettings(temperature_N=jnp.full((n,), temperature, jnp.float32),
                     top_p_N=jnp.full((n,), top_p, jnp.float32),
                     top_k_N=jnp.full((n,), top_k, jnp.int32))
  logits_NV = jnp.broadcast_to(jnp.asarray(LOGITS_V), (n, len(LOGITS_V)))
  tokens_N, logp_N = jax.jit(choose.choose_tokens)(logits_NV, rows, jax.random.key(0))
  tokens_N = np.asarray(tokens_N)
  assert_follows(tokens_N, intended(temperature, top_k, top_p))
  # log-prob = temperature-scaled log-softmax of the full logits (not renormalised by the cut).
  want = jax.nn.log_softmax(LOGITS_V / temperature)[tokens_N]
  np.testing.assert_allclose(np.asarray(logp_N), want, atol=1e-6, rtol=0)


def test_greedy_rows_take_the_argmax_and_score_at_temperature_one():
  logits_NV = jnp.asarray(np.random.default_rng(0).normal(size=(64, 500)).astype(np.float32))
  rows = SamplingSettings(temperature=0.5, top_p=0.5).rows(64, 4)
  tokens_N, logp_N = jax.jit(choose.choose_tokens)(logits_NV, rows, jax.random.key(1))
  anchors = np.arange(0, 64, 4)
  np.testing.assert_array_equal(np.asarray(tokens_N)[anchors], np.argmax(logits_NV, -1)[anchors])
  want = jax.nn.log_softmax(logits_NV, axis=-1)[anchors, np.argmax(logits_NV, -1)[anchors]]
  np.testing.assert_allclose(np.asarray(logp_N)[anchors], want, atol=1e-6)


def test_truncation_equals_a_sorted_reference_on_a_large_vocabulary():
  rng = np.random.default_rng(2)
  n, v = 24, 3000
  w = np.exp(rng.normal(size=(n, v)) * 3).astype(np.float32)
  w /= w.max(-1, keepdims=True)
  w[0, :7] = 1.0  # a 7-way tie at the top
  top_k = rng.integers(0, 40, n).astype(np.int32)
  top_p = rng.uniform(0.05, 1.0, n).astype(np.float32)
  top_p[::4] = 1.0
  got = np.asarray(jax.jit(choose.truncate)(w, top_k, top_p)) > 0
  for i in range(n):
    desc = np.sort(w[i])[::-1]
    kept = np.where(w[i] >= (desc[top_k[i] - 1] if top_k[i] else 0), w[i], 0)
    if top_p[i] < 1:
      desc = np.sort(kept)[::-1]
      kept = np.where(kept >= desc[np.argmax(np.cumsum(desc) >= top_p[i] * desc.sum())], kept, 0)
    np.testing.assert_array_equal(got[i], kept > 0, err_msg=f"row {i}")


class FixedLogits(nnx.Module):
  """Ignores its input: the same logits at every position (exercises the decode loop's draws)."""

  def __init__(self):
    self.cfg = ModelConfig(vocab_size=len(LOGITS_V), d_model=1, n_layers=1, n_heads=1,
                           n_kv_heads=1, head_dim=1, ffn_dim=1)
    self.logits = nnx.Param(jnp.asarray(LOGITS_V))

  def hidden(self, tokens_NT, positions_NT=None, *, cache=None, mask_NT=None):
    return jnp.zeros(tokens_NT.shape + (1,)), cache

  def head(self, h_NTD):
    return jnp.broadcast_to(self.logits[...], h_NTD.shape[:-1] + self.logits.shape)

  def __call__(self, tokens_NT, positions_NT=None, *, cache=None, mask_NT=None):
    h_NTD, cache = self.hidden(tokens_NT, positions_NT, cache=cache)
    return self.head(h_NTD), cache


def test_decode_loop_draws_follow_the_distribution_at_every_step():
  sampler = Sampler(FixedLogits(), cache_len=40)
  settings = SamplingSettings(temperature=1.0, top_p=0.9, greedy_anchor=False, max_new_tokens=32)
  out, _ = sampler.sample([[0]] * 64, group_size=4, settings=settings, key=jax.random.key(3))
  tokens = np.asarray(token_lists(out))  # [256 rows, 32 steps]
  p = intended(1.0, 0, 0.9)
  assert_follows(tokens, p)
  assert_follows(tokens[:, -1], p)  # the last step alone, too (fresh randomness per step)
  assert len({tuple(t) for t in tokens}) == 256


def test_vocab_major_logits_give_the_same_choices():
  """[V, N] logits (the feature-major decode step's layout) sample exactly as their [N, V]
  transpose: the same tokens and log-probs for greedy, temperature and top-p rows."""
  n, v = 48, 1000  # V not a multiple of the 256-token blocks
  logits_NV = jnp.asarray(np.random.default_rng(3).normal(size=(n, v)).astype(np.float32) * 3)
  for settings in (SamplingSettings(temperature=0.8), SamplingSettings(temperature=1.0, top_p=0.9)):
    rows = settings.rows(n, 4)  # every 4th row greedy
    key = jax.random.key(7)
    want = jax.jit(choose.choose_tokens)(logits_NV, rows, key)
    vocab_major = jax.jit(lambda x, r, k: choose.choose_tokens(x, r, k, vocab_axis=0))
    got = vocab_major(logits_NV.T, rows, key)
    np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(want[0]))
    np.testing.assert_allclose(np.asarray(got[1]), np.asarray(want[1]), atol=1e-6, rtol=0)
    assert len(set(np.asarray(want[0]).tolist())) > n // 2  # really sampled, not all one token
  with pytest.raises(ValueError, match="vocab_axis"):
    choose.choose_tokens(logits_NV, rows, key, vocab_axis=2)
