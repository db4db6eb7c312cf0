"""The CPU attention kernel (models/cpu/kernel.py) equals the reference attention."""
import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from arenarl_jax.models import config as config_lib
from arenarl_jax.models.attention import attend
from arenarl_jax.models.cpu import build
from arenarl_jax.models.cpu import kernel
from arenarl_jax.models.kv_cache import KVCache
from arenarl_jax.models.transformer import make_model, set_attention
from arenarl_jax.sharding import make_mesh

pytestmark = pytest.mark.skipif(not kernel.available(),
                                reason="no C++ compiler / not a CPU backend")


def _problem(seed, n, kv, r, f, s, b, p):
  rng = np.random.default_rng(seed)
  arr = lambda *shape: jnp.asarray(rng.normal(size=shape), jnp.float32)
  return (arr(n, kv, r, f) * f ** -0.5, arr(n, kv, f, s), arr(n, kv, s, f), arr(b, kv, f, p),
          arr(b, kv, p, f), rng)


def _reference(q_NKRF, k_NKFS, v_NKSF, count_N, prefix=None):
  """The model's attention with the same visibility: own slots < count, prefix slots < length."""
  f, s = q_NKRF.shape[-1], k_NKFS.shape[-1]
  visible_N1S = jnp.arange(s)[None, None, :] < count_N[:, None, None]
  if prefix is not None:
    pk, pv, lengths_B = prefix
    prefix = (pk, pv, jnp.arange(pk.shape[-1])[None, :] < lengths_B[:, None])
  return attend(q_NKRF[:, None] * f ** 0.5, k_NKFS, v_NKSF, visible_N1S, prefix)[:, 0]


# (R, F): R = 1..7 covers the value tiles' row groups and their remainders; F = 48 is not a whole
# number of feature tiles at either vector width (the plain loop), 32 is one AVX2 tile or a
# half-width AVX-512 tile, 128 is several.
@pytest.mark.parametrize("r,f", [(3, 64), (1, 64), (2, 32), (4, 64), (7, 128), (3, 48)])
def test_kernel_equals_xla_attention_with_a_shared_prefix(r, f):
  """6 rows = 3 prompts x G = 2; own counts and prefix lengths that are not multiples of the
  kernel's slot tiles (16 or 32: masked tails), a full buffer, and a row that sees only its prefix."""
  q, k, v, pk, pv, _ = _problem(0, 6, 2, r, f, 40, 3, 21)
  count_N = jnp.asarray([1, 17, 40, 0, 33, 8], jnp.int32)
  lengths_B = jnp.asarray([21, 5, 16], jnp.int32)
  got, _, _ = jax.jit(lambda *a: kernel.attend(*a[:4], a[4:], group=2))(
      q, k, v, count_N, pk, pv, lengths_B)
  want = _reference(q, k, v, count_N, (pk, pv, lengths_B))
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=2e-6, rtol=0)


def test_kernel_without_a_prefix_and_rows_that_see_nothing():
  """Without a prefix only own slots count; a row with nothing visible gets zeros (the XLA path
  averages masked garbage there; the sampler discards such rows' outputs either way)."""
  q, k, v, _, _, _ = _problem(1, 4, 3, 3, 64, 24, 1, 1)
  count_N = jnp.asarray([24, 0, 7, 16], jnp.int32)
  got = np.asarray(jax.jit(kernel.attend)(q, k, v, count_N)[0])
  want = np.asarray(_reference(q, k, v, count_N))
  seen = np.asarray(count_N) > 0
  np.testing.assert_allclose(got[seen], want[seen], atol=2e-6, rtol=0)
  assert np.all(got[~seen] == 0)


def test_counts_past_the_buffer_are_clamped():
  """A count above S (a finished row's position past its end) reads S slots, never beyond."""
  q, k, v, _, _, _ = _problem(2, 2, 1, 3, 64, 16, 1, 1)
  big, _, _ = jax.jit(kernel.attend)(q, k, v, jnp.asarray([16, 1000], jnp.int32))
  np.testing.assert_allclose(np.asarray(big[1]), np.asarray(
      _reference(q, k, v, jnp.asarray([16, 16], jnp.int32))[1]), atol=2e-6, rtol=0)


def test_new_keys_and_values_are_written_in_place_before_attending():
  """``new``: each row's key and value land in its slot (a slot outside [0, S) is dropped), the
  query already sees them, and with the buffers donated the compiled program copies nothing."""
  q, k, v, _, _, rng = _problem(4, 4, 3, 3, 64, 32, 1, 1)
  k_new = jnp.asarray(rng.normal(size=(4, 3, 64)), jnp.float32)
  v_new = jnp.asarray(rng.normal(size=(4, 3, 64)), jnp.float32)
  slot_N = jnp.asarray([0, 5, 31, 32], jnp.int32)
  count_N = jnp.minimum(slot_N + 1, 32)
  want_k, want_v = np.array(k), np.array(v)
  for n in range(3):
    want_k[n, :, :, int(slot_N[n])] = k_new[n]
    want_v[n, :, int(slot_N[n]), :] = v_new[n]
  want_out = _reference(q, jnp.asarray(want_k), jnp.asarray(want_v), count_N)
  fn = jax.jit(lambda q, k, v, kn, vn, s: kernel.attend(q, k, v, jnp.minimum(s + 1, 32),
                                                                  new=(kn, vn, s)),
               donate_argnums=(1, 2))
  assert " copy(" not in fn.lower(q, k, v, k_new, v_new, slot_N).compile().as_text()
  out, got_k, got_v = fn(q, k, v, k_new, v_new, slot_N)
  np.testing.assert_array_equal(np.asarray(got_k), want_k)
  np.testing.assert_array_equal(np.asarray(got_v), want_v)
  np.testing.assert_allclose(np.asarray(out), np.asarray(want_out), atol=2e-6, rtol=0)


def test_rows_split_over_eight_devices_find_their_prompts():
  """With a mesh each device runs the kernel on its own rows (shard_map): 16 rows = 2 prompts x
  G = 8 over 8 devices, so devices 0-3 hold prompt 0's rows and 4-7 prompt 1's. The result
  equals one device's and stays sharded over all 8."""
  mesh = make_mesh(data=8)
  q, k, v, pk, pv, rng = _problem(3, 16, 2, 3, 64, 32, 2, 24)
  count_N = jnp.asarray(rng.integers(0, 33, 16), jnp.int32)
  lengths_B = jnp.asarray([24, 9], jnp.int32)
  rows = NamedSharding(mesh, P("data"))
  args = [jax.device_put(x, rows) for x in (q, k, v, count_N)]
  fn = jax.jit(lambda *a: kernel.attend(*a[:4], a[4:], group=8, mesh=mesh))
  got = fn(*args, pk, pv, lengths_B)[0]
  single = jax.jit(lambda *a: kernel.attend(*a[:4], a[4:], group=8))(
      q, k, v, count_N, pk, pv, lengths_B)[0]
  np.testing.assert_allclose(np.asarray(got), np.asarray(single), atol=0, rtol=0)
  np.testing.assert_allclose(np.asarray(got), np.asarray(
      _reference(q, k, v, count_N, (pk, pv, lengths_B))), atol=2e-6, rtol=0)
  assert len(got.sharding.device_set) == 8 and got.sharding.spec[0] == "data"


# ---------------------------------------------------------------- chunks (T tokens per row)
# (T, R): T = 1, 5, 37 with the kernel's 16-token tiles and R-dependent token groups (2 tokens of
# 3 heads, 6 of 1, 3 of 2, 1 of 4 or 7) and their remainders.
@pytest.mark.parametrize("t,r", [(37, 3), (5, 1), (16, 2), (19, 4), (3, 7)])
def test_chunk_kernel_equals_xla_attention(t, r):
  """Each token has its own visible count (not monotone; 0, past S), with a shared prefix."""
  rng = np.random.default_rng(t * 10 + r)
  n, kv, f, s, b, p = 4, 2, 64, 45, 2, 19
  arr = lambda *shape: jnp.asarray(rng.normal(size=shape), jnp.float32)
  q = arr(n, kv, t, r, f) * f ** -0.5
  k, v, pk, pv = arr(n, kv, f, s), arr(n, kv, s, f), arr(b, kv, f, p), arr(b, kv, p, f)
  count_NT = rng.integers(0, s + 1, (n, t)).astype(np.int32)
  count_NT[0, 0], count_NT[1, -1] = 0, 1000  # sees only its prefix; clamped to S
  lengths_B = jnp.asarray([19, 4], jnp.int32)
  got, k_out, v_out = jax.jit(lambda *a: kernel.attend(*a[:4], a[4:], group=2))(
      q, k, v, jnp.asarray(count_NT), pk, pv, lengths_B)
  visible_NTS = jnp.arange(s)[None, None, :] < jnp.asarray(count_NT)[:, :, None]
  prefix = (pk, pv, jnp.arange(p)[None, :] < lengths_B[:, None])
  want = attend(q.transpose(0, 2, 1, 3, 4) * f ** 0.5, k, v, visible_NTS, prefix)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want.transpose(0, 2, 1, 3, 4)),
                             atol=3e-6, rtol=0)
  np.testing.assert_array_equal(np.asarray(k_out), np.asarray(k))  # nothing written
  np.testing.assert_array_equal(np.asarray(v_out), np.asarray(v))
  # lse: log of each query's softmax normaliser over its visible prefix and own slots.
  _, lse, _, _ = _attend_with_lse(q, k, v, jnp.asarray(count_NT), pk, pv, lengths_B)
  q64, rows = np.asarray(q, np.float64), [0, 0, 1, 1]  # row n belongs to prompt n // 2
  scores = np.concatenate([np.einsum("nktrf,nkfp->nktrp", q64, np.asarray(pk)[rows]),
                           np.einsum("nktrf,nkfs->nktrs", q64, np.asarray(k))], axis=-1)
  seen = np.concatenate([np.broadcast_to((np.arange(p)[None, :] < np.asarray(lengths_B)[:, None])
                                         [rows][:, None, None, None], scores[..., :p].shape),
                         np.broadcast_to((np.arange(s)[None, None, :] < count_NT[:, :, None])
                                         [:, None, :, None], scores[..., p:].shape)], axis=-1)
  want_lse = np.log(np.sum(np.where(seen, np.exp(scores), 0.0), axis=-1))
  np.testing.assert_allclose(np.asarray(lse), want_lse, rtol=1e-5, atol=1e-5)


def _attend_with_lse(q, k, v, count, pk, pv, lengths_B):
  return jax.jit(lambda *a: kernel.attend(*a[:4], a[4:], group=2, lse=True))(
      q, k, v, count, pk, pv, lengths_B)


def test_chunk_without_prefix_sees_nothing_gives_zeros_and_cannot_write():
  rng = np.random.default_rng(5)
  q = jnp.asarray(rng.normal(size=(2, 1, 4, 3, 64)), jnp.float32)
  k = jnp.asarray(rng.normal(size=(2, 1, 64, 8)), jnp.float32)
  v = jnp.asarray(rng.normal(size=(2, 1, 8, 64)), jnp.float32)
  count_NT = jnp.asarray([[0, 1, 0, 8], [2, 0, 3, 0]], jnp.int32)
  got = np.asarray(jax.jit(kernel.attend)(q, k, v, count_NT)[0])
  assert np.all(got[0, 0, [0, 2]] == 0) and np.all(got[1, 0, [1, 3]] == 0)
  lse = np.asarray(jax.jit(lambda *a: kernel.attend(*a, lse=True))(q, k, v, count_NT)[1])
  assert np.all(lse[0, 0, [0, 2]] == -1e30) and np.all(np.abs(lse[0, 0, [1, 3]]) < 1e3)
  assert np.all(np.abs(got[0, 0, [1, 3]]) > 0)
  with pytest.raises(ValueError, match="only one token per row"):
    kernel.attend(q, k, v, count_NT, new=(k[:, :, :, 0], v[:, :, 0], count_NT[:, 0]))


@pytest.mark.parametrize("shared_prefix", [False, True])
def test_fill_and_hidden_on_the_kernel_equal_the_reference_attention(shared_prefix):
  """``Transformer.hidden`` / ``fill`` with attention ``cpu_kernel`` (chunks at per-row offsets, a
  second chunk after the first) give the same outputs and caches as ``reference``."""
  cfg = config_lib.ModelConfig(vocab_size=300, d_model=64, n_layers=2, n_heads=6, n_kv_heads=2,
                               head_dim=32, ffn_dim=96)
  model = make_model(cfg, seed=3, attention="reference")
  rng = np.random.default_rng(7)
  n = 4
  prefix = None
  if shared_prefix:  # 2 prompts x G = 2 rows, prompt lengths 5 and 9
    pcache = KVCache.init(cfg, 2, 9)
    tokens = jnp.asarray(rng.integers(0, 300, (2, 9)), jnp.int32)
    pcache = model.fill(tokens, jnp.broadcast_to(jnp.arange(9), (2, 9)), cache=pcache)
    prefix = pcache.as_prefix(jnp.asarray([5, 9], jnp.int32))
  cache = KVCache.init(cfg, n, 40, prefix=prefix)
  start_N = cache.start_N() + jnp.asarray([0, 3, 1, 7], jnp.int32)
  results = {}
  for attention in ("reference", "cpu_kernel"):
    set_attention(model, attention)
    c, outs = cache, []
    for t, offset in ((13, 0), (6, 13), (1, 19)):
      tokens = jnp.asarray(np.random.default_rng(t).integers(0, 300, (n, t)), jnp.int32)
      positions = start_N[:, None] + offset + jnp.arange(t)[None]
      h, c = jax.jit(lambda tok, pos, c: model.hidden(tok, pos, cache=c))(tokens, positions, c)
      outs.append(h)
    filled = model.fill(tokens, positions, cache=c)
    results[attention] = (outs, c, filled)
  (o0, c0, f0), (o1, c1, f1) = results["reference"], results["cpu_kernel"]
  for a, b in zip(o0, o1):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-5, rtol=0)
  for a, b in zip(jax.tree.leaves((c0, f0)), jax.tree.leaves((c1, f1))):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-5, rtol=0)


def test_unbuildable_kernel(monkeypatch, tmp_path, caplog):
  """A compiler that fails makes ``build`` raise with the command and the compiler's message;
  ``registered`` then logs it and says False (the reference attention is used)."""
  monkeypatch.delenv(build.REQUIRE_ENV, raising=False)
  monkeypatch.setenv(build.CACHE_ENV, str(tmp_path / "kernels"))
  monkeypatch.setenv("CXX", "false")
  with pytest.raises(RuntimeError, match="compiling the CPU kernels failed.*cache_attention.cc"):
    build.build()
  assert [p.name for p in (tmp_path / "kernels").iterdir()] == []  # no partial library left
  build.registered.cache_clear()
  with caplog.at_level(logging.WARNING):
    assert not kernel.available()
  assert "using the reference attention" in caplog.text
  build.registered.cache_clear()
  monkeypatch.undo()
  assert kernel.available()


def test_bfloat16_cache_falls_back():
  """The kernel is float32 only: other cache dtypes use the reference attention."""
  assert not kernel.available(jnp.bfloat16)
