"""Cached forward (prefill + decode at per-row offsets) equals the full one; chunked log-probs."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hf_reference import jit_forward

from arenarl_jax.models.kv_cache import KVCache
from arenarl_jax.models.logprobs import token_logprobs
from arenarl_jax.models.safetensors_io import load_hf_dir

VARIANTS = ["qwen3", "qwen2_yarn_untied"]  # qk-norm; q/k/v biases + YaRN


@pytest.fixture(scope="module")
def models(hf_dirs):
  out = {}
  for v in VARIANTS:
    cfg, model = load_hf_dir(hf_dirs(v)[1])
    out[v] = cfg, model, jit_forward(model)
  return out


def full_logits(forward, tokens_NT):
  logits, _ = forward(jnp.asarray(tokens_NT))
  return np.asarray(logits)


@pytest.mark.parametrize("variant", VARIANTS)
def test_prefill_then_decode_equals_full_forward(variant, models):
  cfg, _, forward = models[variant]
  rng = np.random.default_rng(1)
  tokens = rng.integers(0, cfg.vocab_size, (3, 14)).astype(np.int32)
  want = full_logits(forward, tokens)
  prompt = np.array([3, 6, 9])
  # One right-padded prefill chunk; each row's padding writes slots its decode later overwrites.
  width = prompt.max()
  positions = np.broadcast_to(np.arange(width), (3, width)).astype(np.int32)
  cache = KVCache.init(cfg, n_rows=3, n_slots=16)
  logits, cache = forward(jnp.asarray(tokens[:, :width]), jnp.asarray(positions), cache=cache)
  rows = np.arange(3)
  np.testing.assert_allclose(np.asarray(logits)[rows, prompt - 1], want[rows, prompt - 1],
                             atol=1e-4, rtol=0)
  for step in range(5):
    pos = prompt + step
    logits, cache = forward(jnp.asarray(tokens[rows, pos][:, None]),
                          jnp.asarray(pos[:, None].astype(np.int32)), cache=cache)
    np.testing.assert_allclose(np.asarray(logits)[:, 0], want[rows, pos], atol=1e-4, rtol=0)


def test_second_chunk_at_per_row_offsets(models):
  cfg, _, forward = models["qwen3"]
  rng = np.random.default_rng(2)
  tokens = rng.integers(0, cfg.vocab_size, (3, 12)).astype(np.int32)
  want = full_logits(forward, tokens)
  first = np.array([2, 5, 3])
  cache = KVCache.init(cfg, n_rows=3, n_slots=12)
  positions = np.broadcast_to(np.arange(5), (3, 5)).astype(np.int32)
  _, cache = forward(jnp.asarray(tokens[:, :5]), jnp.asarray(positions), cache=cache)
  pos = (first[:, None] + np.arange(4)).astype(np.int32)
  chunk = np.take_along_axis(tokens, pos, axis=1)
  logits, _ = forward(jnp.asarray(chunk), jnp.asarray(pos), cache=cache)
  np.testing.assert_allclose(np.asarray(logits), np.take_along_axis(want, pos[..., None], axis=1),
                             atol=1e-4, rtol=0)


def test_cache_writes_past_the_end_are_dropped(models):
  cfg, _, forward = models["qwen3"]
  tokens = np.arange(6, dtype=np.int32)[None] % cfg.vocab_size
  cache = KVCache.init(cfg, n_rows=1, n_slots=4)
  _, cache = forward(jnp.asarray(tokens[:, :4]), jnp.arange(4, dtype=jnp.int32)[None], cache=cache)
  before = np.asarray(cache.k[0])
  _, after = forward(jnp.asarray(tokens[:, 4:5]), jnp.array([[4]], jnp.int32), cache=cache)
  np.testing.assert_array_equal(np.asarray(after.k[0]), before)


def test_rows_after_a_shared_prefix_equal_full_forward(models):
  """B = 2 prompts (3 and 5 tokens, padded to 5) shared by G = 2 rows each; every row then gets
  its own 4 tokens in one chunk: each row's logits equal a full pass over prompt + its tokens."""
  cfg, model, forward = models["qwen3"]
  rng = np.random.default_rng(3)
  counts = np.array([3, 5])
  prompts = rng.integers(0, cfg.vocab_size, (2, 5)).astype(np.int32)
  prompt_cache = KVCache.init(cfg, n_rows=2, n_slots=5)
  _, prompt_cache = forward(jnp.asarray(prompts), None, cache=prompt_cache)
  own = rng.integers(0, cfg.vocab_size, (4, 4)).astype(np.int32)
  cache = KVCache.init(cfg, n_rows=4, n_slots=6, prefix=prompt_cache.as_prefix(jnp.asarray(counts)))
  np.testing.assert_array_equal(cache.start_N(), [3, 3, 5, 5])
  pos = (np.repeat(counts, 2)[:, None] + np.arange(4)).astype(np.int32)
  logits, cache = forward(jnp.asarray(own), jnp.asarray(pos), cache=cache)
  for n in range(4):
    full = np.concatenate([prompts[n // 2, :counts[n // 2]], own[n]])[None]
    want = full_logits(forward, full)[0, counts[n // 2]:]
    np.testing.assert_allclose(np.asarray(logits)[n], want, atol=1e-4, rtol=0)
  # The row buffers hold only the rows' own tokens, from slot 0.
  assert cache.n_slots == 6 and cache.prefix.k[0].shape[-1] == 5


def test_fill_writes_the_same_cache_as_hidden(models):
  cfg, model, _ = models["qwen3"]
  tokens = jnp.asarray(np.random.default_rng(4).integers(0, cfg.vocab_size, (2, 7)), jnp.int32)
  positions = jnp.broadcast_to(jnp.arange(7, dtype=jnp.int32), (2, 7))
  _, want = nnx.jit(lambda m, c: m.hidden(tokens, positions, cache=c))(
      model, KVCache.init(cfg, 2, 8))
  got = nnx.jit(lambda m, c: m.fill(tokens, positions, cache=c))(model, KVCache.init(cfg, 2, 8))
  for a, b in zip(got.k + got.v, want.k + want.v):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6, rtol=0)


@pytest.mark.parametrize("chunk,temperature", [(1, 1.0), (5, 0.7), (64, 1.0)])
def test_token_logprobs_equal_log_softmax_of_full_logits(chunk, temperature, models):
  cfg, model, forward = models["qwen2_yarn_untied"]
  rng = np.random.default_rng(3)
  tokens = rng.integers(0, cfg.vocab_size, (3, 14)).astype(np.int32)
  mask = np.ones_like(tokens)
  mask[1, :4] = 0  # left padding
  positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0).astype(np.int32)
  logits, _ = forward(jnp.asarray(tokens), jnp.asarray(positions), mask_NT=jnp.asarray(mask))
  logp_all = np.asarray(jax.nn.log_softmax(logits / temperature, axis=-1))
  want = np.take_along_axis(logp_all[:, :-1], tokens[:, 1:, None], axis=-1)[..., 0]
  graphdef, state = nnx.split(model)
  logprobs = jax.jit(lambda state, *args: token_logprobs(
      nnx.merge(graphdef, state), *args, chunk=chunk, temperature=temperature))
  got = np.asarray(logprobs(state, jnp.asarray(tokens), jnp.asarray(positions), jnp.asarray(mask)))
  assert got.shape == tokens.shape
  np.testing.assert_array_equal(got[:, 0], 0.0)
  valid = (mask[:, 1:] * mask[:, :-1]).astype(bool)
  np.testing.assert_allclose(got[:, 1:][valid], want[valid], atol=1e-5, rtol=0)
  assert want.min() < -1.0  # not a degenerate near-uniform distribution


def test_the_two_layouts_hold_the_same_cache():
  """An ``nskf`` cache is the ``nkfs`` one transposed, through init, write, resize, take_rows and
  as_prefix; a dot_product_attention model makes ``nskf`` caches, the reference ``nkfs``."""
  from arenarl_jax.models import config as config_lib  # pylint: disable=g-import-not-at-top
  from arenarl_jax.models import kv_cache  # pylint: disable=g-import-not-at-top
  from arenarl_jax.models.transformer import make_model  # pylint: disable=g-import-not-at-top
  cfg = config_lib.get_preset("tiny")  # 2 layers, 2 KV heads of 16
  a = KVCache.init(cfg, n_rows=3, n_slots=8)
  b = KVCache.init(cfg, n_rows=3, n_slots=8, layout="nskf")
  assert a.k[0].shape == (3, 2, 16, 8) and a.v[0].shape == (3, 2, 8, 16)
  assert b.k[0].shape == b.v[0].shape == (3, 8, 2, 16)
  assert a.n_slots == b.n_slots == 8 and (a.head_axis, b.head_axis) == (1, 2)
  rng = np.random.default_rng(0)
  k_NTKF = jnp.asarray(rng.normal(size=(3, 2, 2, 16)), jnp.float32)
  v_NTKF = jnp.asarray(rng.normal(size=(3, 2, 2, 16)), jnp.float32)
  positions = jnp.asarray([[0, 1], [5, 6], [7, 8]])  # slot 8 is past the end: dropped
  wa = a.layer(0).write(k_NTKF, v_NTKF, positions)
  wb = b.layer(0).write(k_NTKF, v_NTKF, positions)
  for x, y in zip(wa, kv_cache.as_nkfs(*wb, "nskf")):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  np.testing.assert_array_equal(np.asarray(wb[0][1, 5]), np.asarray(k_NTKF[1, 0]))
  assert float(jnp.abs(wb[0][2, 7]).sum()) > 0  # slot 7 written, slot 8 dropped
  a, b = a.replace(k=(wa[0], a.k[1]), v=(wa[1], a.v[1])), b.replace(k=(wb[0], b.k[1]),
                                                                   v=(wb[1], b.v[1]))
  for grown_a, grown_b in ((a.resize(12), b.resize(12)), (a.resize(4), b.resize(4))):
    assert grown_b.n_slots == grown_a.n_slots and grown_b.layout == "nskf"
    np.testing.assert_array_equal(np.asarray(grown_a.k[0]),
                                  np.asarray(kv_cache.as_nkfs(grown_b.k[0], grown_b.v[0],
                                                              "nskf")[0]))
  rows = jnp.asarray([2, 0])
  assert b.take_rows(rows).layout == "nskf"
  prefix = b.as_prefix(jnp.asarray([3, 1, 2]))
  with_prefix = KVCache.init(cfg, 6, 4, prefix=prefix, layout="nskf")
  assert with_prefix.position_bound == 4 + 8 and with_prefix.layer(1).layout == "nskf"
  with pytest.raises(ValueError, match="cannot take a nskf prefix"):
    KVCache.init(cfg, 6, 4, prefix=prefix)
  with pytest.raises(ValueError, match="layout must be one of"):
    KVCache.init(cfg, 1, 4, layout="nsfk")
  assert make_model(cfg, attention="dot_product_attention").empty_cache(1, 4).layout == "nskf"
  assert make_model(cfg, attention="reference").empty_cache(1, 4).layout == "nkfs"
