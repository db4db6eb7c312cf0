"""Group sampler on a hand-checkable fake model ("previous token + 1") and a tiny random model."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from arenarl_jax.models import kv_cache
from arenarl_jax.models.config import PRESETS, ModelConfig
from arenarl_jax.models.kv_cache import KVCache
from arenarl_jax.models.transformer import make_model, set_attention
from arenarl_jax.rollout.agent_loop import CompileCounter
from arenarl_jax.sampling.sampler import (PAD, Sampler, SamplingSettings, finish_reasons, sample,
                                 token_lists)


class PlusOne(nnx.Module):
  """Always predicts (previous token + 1) % V with certainty; caches token ids as keys/values."""

  def __init__(self, vocab: int = 64):
    self.cfg = ModelConfig(vocab_size=vocab, d_model=vocab, n_layers=1, n_heads=1, n_kv_heads=1,
                           head_dim=1, ffn_dim=1)
    self.shift = nnx.Param(jnp.roll(jnp.eye(vocab, dtype=jnp.float32), 1, axis=1) * 1e4)

  def hidden(self, tokens_NT, positions_NT=None, *, cache=None, mask_NT=None):
    if cache is not None:
      ids_NTKF = tokens_NT[:, :, None, None].astype(jnp.float32)
      k, v = cache.layer(0).write(ids_NTKF, ids_NTKF, positions_NT)
      cache = cache.replace(k=(k,), v=(v,))
    return jax.nn.one_hot(tokens_NT, self.cfg.vocab_size), cache

  def head(self, h_NTD):
    return h_NTD @ self.shift[...]

  def __call__(self, tokens_NT, positions_NT=None, *, cache=None, mask_NT=None):
    h_NTD, cache = self.hidden(tokens_NT, positions_NT, cache=cache)
    return self.head(h_NTD), cache


STOPS = SamplingSettings(temperature=1.0, eos_ids=(10,), stop_sequences=((20, 21), (40, 99)),
                         max_new_tokens=6)


def cached_ids(state, row, upto):
  """What the fake model cached for ``row`` at positions [0, upto): the prompt once per group in
  the shared prefix, the rest in the row's own buffer (keys and values agree in both)."""
  cache = state.cache
  prompt = row // (cache.n_rows // cache.prefix.lengths_B.shape[0])
  start = int(cache.prefix.lengths_B[prompt])

  def ids(k, v, r, n):
    keys = np.asarray(k)[r, 0, 0, :n]
    np.testing.assert_array_equal(keys, np.asarray(v)[r, 0, :n, 0])
    return keys.astype(int).tolist()
  return (ids(cache.prefix.k[0], cache.prefix.v[0], prompt, start)
          + ids(cache.k[0], cache.v[0], row, upto - start))


def test_plus_one_gives_exact_sequences_stops_and_lengths():
  sampler = Sampler(PlusOne(), cache_len=32)
  out, state = sampler.sample([[1, 2, 3], [15, 16], [60]], group_size=2, settings=STOPS,
                              key=jax.random.key(0))
  assert token_lists(out) == [[4, 5, 6, 7, 8, 9]] * 2 + [[17, 18, 19, 20, 21]] * 2 + [
      [61, 62, 63, 0, 1, 2]] * 2
  assert finish_reasons(out) == ["length"] * 2 + ["stop"] * 2 + ["length"] * 2
  np.testing.assert_array_equal(out.lengths_N, [6, 6, 5, 5, 6, 6])
  np.testing.assert_array_equal(out.tokens_NT[2], [17, 18, 19, 20, 21, PAD])
  np.testing.assert_array_equal(out.logp_NT, 0.0)  # certain predictions, greedy or sampled
  # The last sampled token is in the cache, so a row's length counts it.
  np.testing.assert_array_equal(state.lengths_N, [9, 9, 7, 7, 7, 7])
  assert cached_ids(state, 2, 7) == [15, 16, 17, 18, 19, 20, 21]
  assert not np.asarray(state.done_N).any()


def test_extend_appends_at_each_rows_offset_then_decoding_continues():
  sampler = Sampler(PlusOne(), cache_len=32)
  _, state = sampler.sample([[1, 2, 3], [15, 16], [60]], group_size=2, settings=STOPS,
                            key=jax.random.key(0))
  state = sampler.extend(state, [[30], [], [5, 6, 7], [1], [2, 3], [62]])
  np.testing.assert_array_equal(state.lengths_N, [10, 9, 10, 8, 9, 8])
  assert cached_ids(state, 0, 10) == [1, 2, 3, 4, 5, 6, 7, 8, 9, 30]
  assert cached_ids(state, 2, 10) == [15, 16, 17, 18, 19, 20, 21, 5, 6, 7]
  assert cached_ids(state, 4, 9) == [60, 61, 62, 63, 0, 1, 2, 2, 3]
  out, state = sampler.decode(state, STOPS, jax.random.key(1))
  # Row 1 was not extended: it continues after its own last token (9 -> 10 = EOS).
  assert token_lists(out) == [[31, 32, 33, 34, 35, 36], [10], [8, 9, 10], [2, 3, 4, 5, 6, 7],
                              [4, 5, 6, 7, 8, 9], [63, 0, 1, 2, 3, 4]]
  assert finish_reasons(out) == ["length", "eos", "eos", "length", "length", "length"]
  np.testing.assert_array_equal(state.done_N, [False, True, True, False, False, False])
  # Done rows sit out the next turn.
  out, state = sampler.decode(state, STOPS, jax.random.key(2))
  assert token_lists(out) == [[37, 38, 39, 40, 41, 42], [], [], [8, 9, 10], [10],
                              [5, 6, 7, 8, 9, 10]]
  assert finish_reasons(out) == ["length", "none", "none", "eos", "eos", "eos"]
  np.testing.assert_array_equal(out.tokens_NT[1], PAD)


def test_stop_sequence_needs_its_whole_tail_within_the_turn():
  sampler = Sampler(PlusOne(), cache_len=32)
  settings = SamplingSettings(stop_sequences=((41, 42, 43),), max_new_tokens=8)
  out, _ = sampler.sample([[37], [40], [41]], group_size=1, settings=settings,
                          key=jax.random.key(0))
  # Row 2 never generates 41 itself: "41 42 43" spans the prompt, so it is not a stop.
  assert token_lists(out) == [[38, 39, 40, 41, 42, 43], [41, 42, 43],
                              [42, 43, 44, 45, 46, 47, 48, 49]]
  assert finish_reasons(out) == ["stop", "stop", "length"]


def test_full_cache_ends_the_row_with_length_and_marks_it_done():
  sampler = Sampler(PlusOne(), cache_len=8)
  out, state = sampler.sample([[1, 2, 3, 4, 5], [7]], group_size=1,
                              settings=SamplingSettings(max_new_tokens=6), key=jax.random.key(0))
  assert token_lists(out) == [[6, 7, 8], [8, 9, 10, 11, 12, 13]]
  assert finish_reasons(out) == ["length", "length"]
  np.testing.assert_array_equal(state.lengths_N, [8, 7])
  np.testing.assert_array_equal(state.done_N, [True, False])
  with pytest.raises(ValueError, match="row 1 holds 7 tokens; 2 more exceed cache_len=8"):
    sampler.extend(state, [[], [1, 2]])


def test_the_cache_grows_within_a_turn_and_a_row_that_fills_cache_len_ends_there():
  sampler = Sampler(PlusOne(), cache_len=24, cache_sizes=(8, 16))
  settings = SamplingSettings(max_new_tokens=20)
  prompts = [[1, 2, 3], [30] * 7, [50]]
  out, state = sampler.sample(prompts, group_size=1, settings=settings, key=jax.random.key(0))
  # Row 0: 3 + 20 = 23 tokens; row 1 fills all 24 slots after 17 tokens; row 2: 1 + 20.
  assert token_lists(out) == [list(range(4, 24)), list(range(31, 48)),
                              [(50 + k) % 64 for k in range(1, 21)]]
  assert finish_reasons(out) == ["length", "length", "length"]
  np.testing.assert_array_equal(state.lengths_N, [23, 24, 21])
  np.testing.assert_array_equal(state.done_N, [False, True, False])
  assert state.cache.n_slots == 24  # 8 -> 16 -> 24 during the turn
  assert cached_ids(state, 0, 23) == list(range(1, 24))
  assert cached_ids(state, 1, 24) == [30] * 7 + list(range(31, 48))
  # The same turn on a cache of cache_len throughout: identical output.
  fixed, _ = Sampler(PlusOne(), cache_len=24, cache_sizes=()).sample(
      prompts, group_size=1, settings=settings, key=jax.random.key(0))
  np.testing.assert_array_equal(out.tokens_NT, fixed.tokens_NT)
  np.testing.assert_array_equal(out.finish_N, fixed.finish_N)


def test_bad_input_is_rejected_with_a_clear_message():
  sampler = Sampler(PlusOne(), cache_len=16)
  with pytest.raises(ValueError, match="prompt row 1: token ids must be in"):
    sampler.prefill([[1], [64]])
  with pytest.raises(ValueError, match="at least one token"):
    sampler.prefill([[1], []])
  with pytest.raises(ValueError, match="leaves no room"):
    sampler.prefill([list(range(16))])
  with pytest.raises(ValueError, match="top_p"):
    SamplingSettings(top_p=0.0)
  with pytest.raises(ValueError, match="temperature"):
    SamplingSettings(temperature=-1.0)
  state = sampler.prefill([[1], [2]])
  with pytest.raises(ValueError, match="token lists for 1 rows, state has 2"):
    sampler.extend(state, [[1]])


def test_settings_are_hashable_and_expand_to_greedy_anchors():
  settings = SamplingSettings(temperature=0.7, top_p=0.9, top_k=5, stop_sequences=[[1, 2]])
  assert hash(settings) == hash(SamplingSettings(temperature=0.7, top_p=0.9, top_k=5,
                                                 stop_sequences=((1, 2),)))
  rows = settings.rows(6, 3)
  np.testing.assert_allclose(rows.temperature_N, [0, 0.7, 0.7, 0, 0.7, 0.7])
  np.testing.assert_allclose(rows.top_p_N, 0.9)
  np.testing.assert_array_equal(rows.top_k_N, 5)


@pytest.fixture(scope="module")
def tiny():
  """A tiny random model with peaked logits (so greedy choices are not float-order ties)."""
  model = make_model(PRESETS["tiny"], seed=3)
  model.embed[...] = model.embed[...] * 50.0
  return model


def test_same_key_same_output_and_other_keys_differ(tiny):
  sampler = Sampler(tiny, cache_len=64)
  settings = SamplingSettings(temperature=1.5, max_new_tokens=12)
  prompts = [[5, 6, 7, 8], [9, 10]]
  a, _ = sampler.sample(prompts, group_size=4, settings=settings, key=jax.random.key(7))
  b, _ = sampler.sample(prompts, group_size=4, settings=settings, key=jax.random.key(7))
  c, _ = sampler.sample(prompts, group_size=4, settings=settings, key=jax.random.key(8))
  np.testing.assert_array_equal(a.tokens_NT, b.tokens_NT)
  np.testing.assert_array_equal(a.logp_NT, b.logp_NT)
  tokens = np.asarray(a.tokens_NT)
  # Greedy anchors (rows 0 and 4) agree across keys; sampled rows differ within a group.
  np.testing.assert_array_equal(tokens[[0, 4]], np.asarray(c.tokens_NT)[[0, 4]])
  assert len({tuple(t) for t in tokens[1:4]}) == 3
  assert not np.array_equal(tokens, np.asarray(c.tokens_NT))


def test_one_shot_sample_matches_the_sampler(tiny):
  # Same shapes and settings as the test above, so the programs compiled there are reused.
  settings = SamplingSettings(temperature=1.5, max_new_tokens=12)
  prompts = [[5, 6, 7, 8], [9, 10]]
  out = sample(tiny, prompts, group_size=4, settings=settings, key=jax.random.key(3),
               cache_len=64)
  ref, _ = Sampler(tiny, cache_len=64).sample(prompts, group_size=4, settings=settings,
                                              key=jax.random.key(3))
  np.testing.assert_array_equal(out.tokens_NT, ref.tokens_NT)
  np.testing.assert_array_equal(out.logp_NT, ref.logp_NT)


def test_every_attention_choice_samples_what_the_reference_samples(tiny):
  """cpu_kernel (the CPU default: feature-major decode, kernel attention), dot_product_attention
  and reference: same tokens, log-probs within 1e-5."""
  settings = SamplingSettings(temperature=1.5, max_new_tokens=12)
  prompts = [[5, 6, 7, 8], [9, 10]]
  outs = []
  for attention in ("cpu_kernel", "dot_product_attention", "reference"):
    sampler = Sampler(set_attention(tiny, attention), cache_len=64)
    assert sampler.decode_step.feature_major == (attention == "cpu_kernel")
    outs.append(sampler.sample(prompts, group_size=4, settings=settings, key=jax.random.key(5))[0])
  set_attention(tiny, "auto")
  for out in outs[:2]:
    np.testing.assert_array_equal(out.tokens_NT, outs[-1].tokens_NT)
    np.testing.assert_allclose(out.logp_NT, outs[-1].logp_NT, atol=1e-5, rtol=0)
  # not the library's Transformer
  assert not Sampler(PlusOne(), cache_len=16).decode_step.feature_major


def test_multi_turn_equals_a_fresh_prefill_of_the_whole_history(tiny):
  sampler = Sampler(tiny, cache_len=64)
  settings = SamplingSettings(temperature=1.0, max_new_tokens=7)
  prompts = [[11, 12, 13, 14, 15], [21, 22], [31, 32, 33]]
  turn1, state = sampler.sample(prompts, group_size=2, settings=settings, key=jax.random.key(1))
  observations = [[100, 101, 102], [], [103], [104, 105, 106, 107, 108, 109, 110], [111], [112]]
  state = sampler.extend(state, observations)
  turn2, _ = sampler.decode(state, settings, jax.random.key(2))

  history = [prompts[r // 2] + gen + obs
             for r, (gen, obs) in enumerate(zip(token_lists(turn1), observations))]
  fresh = sampler.prefill(history, group_size=1)
  want, _ = sampler.decode(fresh, settings, jax.random.key(2), rows=settings.rows(6, 2))
  np.testing.assert_array_equal(turn2.tokens_NT, want.tokens_NT)
  np.testing.assert_allclose(turn2.logp_NT, want.logp_NT, atol=1e-5, rtol=0)
  assert min(len(t) for t in token_lists(turn2)) == 7


def test_a_whole_rollout_compiles_a_few_programs_once(tiny):
  sampler = Sampler(tiny, cache_len=96, buckets=(8, 16, 32, 96))
  settings = SamplingSettings(temperature=1.0, max_new_tokens=6)
  rng = np.random.default_rng(0)

  sizes = set()

  def rollout(seed):
    lengths = rng.integers(9, 17, 3)  # prompts all in the 16 bucket
    prompts = [rng.integers(0, 1000, n).tolist() for n in lengths]
    _, state = sampler.sample(prompts, group_size=2, settings=settings, key=jax.random.key(seed))
    for turn in range(3):
      sizes.add(state.cache.n_slots)
      obs = [rng.integers(0, 1000, rng.integers(0, 8)).tolist() for _ in range(6)]  # bucket 8
      state = sampler.extend(state, obs)
      sizes.add(state.cache.n_slots)
      out, state = sampler.decode(state, settings, jax.random.key(seed + turn + 1))
    sizes.add(state.cache.n_slots)
    return token_lists(out)

  with CompileCounter() as compiles:  # loads from the suite's shared compilation cache count
    rollout(0)
    first = compiles.count
    rollout(10)
  # Rows hold up to 6 + 3 * (7 + 6) = 45 tokens of their own: cache sizes 32 and 64 of the
  # ladder. Programs: prefill, begin/end of a turn, and per cache size one decode, one extend (one
  # observation bucket) and one resize into it.
  assert sizes == {32, 64}
  assert 5 <= first <= 3 + 3 * len(sizes), first
  assert compiles.count == first  # a second rollout of other lengths compiles nothing


def test_a_growing_cache_gives_the_same_rollout_as_a_fixed_one(tiny):
  settings = SamplingSettings(temperature=1.0, max_new_tokens=7)
  prompts = [[11, 12, 13, 14, 15], [21, 22], [31, 32, 33]]
  observations = [[[100, 101, 102], [], [103], [104, 105, 106, 107], [111], [112]],
                  [[1] * 12, [2], [], [3] * 9, [4], [5]]]

  def rollout(sampler):
    out, state = sampler.sample(prompts, group_size=2, settings=settings, key=jax.random.key(1))
    outs, sizes = [out], [state.cache.n_slots]
    for turn, obs in enumerate(observations):
      state = sampler.extend(state, obs)
      sizes.append(state.cache.n_slots)
      out, state = sampler.decode(state, settings, jax.random.key(2 + turn))
      outs.append(out)
      sizes.append(state.cache.n_slots)
    return outs, sizes

  want, fixed_sizes = rollout(Sampler(tiny, cache_len=64, cache_sizes=()))
  got, sizes = rollout(Sampler(tiny, cache_len=64, cache_sizes=(16, 32)))
  assert fixed_sizes == [64] * 5
  # Sizes count each row's own tokens (its prompt is the shared prefix): 7 new -> 16; + 4
  # observed = 11 (16); decoding 7 more reaches 18 mid-turn -> 32; + 12 observed = 30 (32);
  # decoding 7 more reaches 37 mid-turn -> 64.
  assert sizes == [16, 16, 32, 32, 64]
  for w, g in zip(want, got):
    np.testing.assert_array_equal(g.tokens_NT, w.tokens_NT)
    np.testing.assert_allclose(g.logp_NT, w.logp_NT, atol=1e-5, rtol=0)
