"""The decode attention kernel (models/decode_attention.py) equals the model's XLA attention."""
import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from arenarl_jax.models import decode_attention
from arenarl_jax.models.attention import attend
from arenarl_jax.sharding import make_mesh

pytestmark = pytest.mark.skipif(not decode_attention.available(),
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


# (R, F): R = 1..7 covers the kernel's groups of up to 3 queries and their remainders; F = 48 is
# not a whole number of its 32-feature tiles (the plain loop), 128 is two tiles.
@pytest.mark.parametrize("r,f", [(3, 64), (1, 64), (2, 32), (4, 64), (7, 128), (3, 48)])
def test_kernel_equals_xla_attention_with_a_shared_prefix(r, f):
  """6 rows = 3 prompts x G = 2; own counts and prefix lengths that are not multiples of the
  kernel's 16-slot tiles (masked tails), a full buffer, and a row that sees only its prefix."""
  q, k, v, pk, pv, _ = _problem(0, 6, 2, r, f, 40, 3, 21)
  count_N = jnp.asarray([1, 17, 40, 0, 33, 8], jnp.int32)
  lengths_B = jnp.asarray([21, 5, 16], jnp.int32)
  got, _, _ = jax.jit(lambda *a: decode_attention.attend(*a[:4], a[4:], group=2))(
      q, k, v, count_N, pk, pv, lengths_B)
  want = _reference(q, k, v, count_N, (pk, pv, lengths_B))
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=2e-6, rtol=0)


def test_kernel_without_a_prefix_and_rows_that_see_nothing():
  """Without a prefix only own slots count; a row with nothing visible gets zeros (the XLA path
  averages masked garbage there; the sampler discards such rows' outputs either way)."""
  q, k, v, _, _, _ = _problem(1, 4, 3, 3, 64, 24, 1, 1)
  count_N = jnp.asarray([24, 0, 7, 16], jnp.int32)
  got = np.asarray(jax.jit(decode_attention.attend)(q, k, v, count_N)[0])
  want = np.asarray(_reference(q, k, v, count_N))
  seen = np.asarray(count_N) > 0
  np.testing.assert_allclose(got[seen], want[seen], atol=2e-6, rtol=0)
  assert np.all(got[~seen] == 0)


def test_counts_past_the_buffer_are_clamped():
  """A count above S (a finished row's position past its end) reads S slots, never beyond."""
  q, k, v, _, _, _ = _problem(2, 2, 1, 3, 64, 16, 1, 1)
  big, _, _ = jax.jit(decode_attention.attend)(q, k, v, jnp.asarray([16, 1000], jnp.int32))
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
  fn = jax.jit(lambda q, k, v, kn, vn, s: decode_attention.attend(q, k, v, jnp.minimum(s + 1, 32),
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
  fn = jax.jit(lambda *a: decode_attention.attend(*a[:4], a[4:], group=8, mesh=mesh))
  got = fn(*args, pk, pv, lengths_B)[0]
  single = jax.jit(lambda *a: decode_attention.attend(*a[:4], a[4:], group=8))(
      q, k, v, count_N, pk, pv, lengths_B)[0]
  np.testing.assert_allclose(np.asarray(got), np.asarray(single), atol=0, rtol=0)
  np.testing.assert_allclose(np.asarray(got), np.asarray(
      _reference(q, k, v, count_N, (pk, pv, lengths_B))), atol=2e-6, rtol=0)
  assert len(got.sharding.device_set) == 8 and got.sharding.spec[0] == "data"


def test_switch_off_and_unbuildable_kernel(monkeypatch, tmp_path, caplog):
  """ARENARL_DECODE_KERNEL=0 turns the kernel off; a compiler that fails makes ``build`` raise
  with the command and the compiler's message (``available`` then logs it and says False)."""
  monkeypatch.setenv(decode_attention.ENV_SWITCH, "0")
  assert not decode_attention.available()
  monkeypatch.setenv(decode_attention.CACHE_ENV, str(tmp_path))
  monkeypatch.setenv("CXX", "false")
  with pytest.raises(RuntimeError, match="decode_attention.cc failed"):
    decode_attention.build()
  assert not list(tmp_path.iterdir())  # no partial library left behind
  decode_attention._registered.cache_clear()  # pylint: disable=protected-access
  monkeypatch.delenv(decode_attention.ENV_SWITCH)
  with caplog.at_level(logging.WARNING):
    assert not decode_attention.available()
  assert "using XLA attention" in caplog.text
  decode_attention._registered.cache_clear()  # pylint: disable=protected-access
  monkeypatch.undo()
  assert decode_attention.available()


def test_bfloat16_cache_falls_back():
  """The kernel is float32 only: other cache dtypes use the XLA attention."""
  assert not decode_attention.available(jnp.bfloat16)
