"""Every attention implementation equals the reference at the seam: full sequences with left
padding, cache chunks at per-row offsets after shared prompt prefixes, decode, and tree branches
with extra keys, for GQA ratios 1-7 and head sizes 32-128 (float32, within 1e-5), on caches of
both layouts (models/kv_cache.py); the reference itself on an ``nskf`` cache equals itself on
the same cache stored ``nkfs``."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from arenarl_jax.models import attention_choice
from arenarl_jax.models.attention import ReferenceAttention
from arenarl_jax.models.cpu import kernel
from arenarl_jax.models import kv_cache
from arenarl_jax.models.kv_cache import LayerCache

IMPLEMENTATIONS = ["dot_product_attention", pytest.param("cpu_kernel", marks=pytest.mark.skipif(
    not kernel.available(), reason="no C++ compiler / not a CPU backend"))]
# (R = query heads per KV head, F = head size): every ratio 1-7, sizes 32-128.
SHAPES = [(1, 32), (2, 64), (3, 48), (4, 128), (5, 96), (6, 64), (7, 32)]
KV = 2
REF = ReferenceAttention()


def _arr(rng, *shape):
  return jnp.asarray(rng.normal(size=shape), jnp.float32)


def _close(got, want):
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5, rtol=0)


def _layer(rng, f, s, prefix: bool):
  """4 rows; with ``prefix`` 2 prompts (5 and 9 positions) shared by G = 2 rows each."""
  k, v = _arr(rng, 4, KV, f, s), _arr(rng, 4, KV, s, f)
  if not prefix:
    return LayerCache(k, v, jnp.zeros((4,), jnp.int32))
  lengths_B = jnp.asarray([5, 9], jnp.int32)
  return LayerCache(k, v, jnp.repeat(lengths_B, 2), _arr(rng, 2, KV, f, 9),
                    _arr(rng, 2, KV, 9, f), lengths_B)


def _tree_sees():
  """[6, 6] tree mask: nodes 0 -> 1 -> 2 and 0 -> 3 -> 4 -> 5 (two branches sharing a root)."""
  parent = [-1, 0, 1, 0, 3, 4]
  sees = np.eye(6, dtype=bool)
  for node, up in enumerate(parent):
    if up >= 0:
      sees[node] |= sees[up]
  return jnp.asarray(sees)


def _in_layout(layer: LayerCache, layout: str) -> LayerCache:
  """The same cache stored in ``layout`` (built ``nkfs``)."""
  if layout == "nkfs":
    return layer
  k, v = kv_cache.as_nskf(layer.k, layer.v, "nkfs")
  pk, pv = ((None, None) if layer.prefix_k is None
            else kv_cache.as_nskf(layer.prefix_k, layer.prefix_v, "nkfs"))
  return LayerCache(k, v, layer.start_N, pk, pv, layer.prefix_lengths_B, layout=layout)


def _calls(impl, inputs, layout="nkfs"):
  """Every kind of call of ``impl`` on ``inputs`` with the caches stored in ``layout``, the
  written buffers given back ``nkfs`` (one jitted program per implementation)."""
  seq, mask_NT, per_layer = inputs
  out = [impl.sequence(*seq, mask_NT)]
  for layer, chunks, branch in per_layer:
    layer = _in_layout(layer, layout)
    for q, k, v, positions_NT in chunks:
      got, (gk, gv) = impl.cache(q, k, v, positions_NT, layer)
      out += [got, *kv_cache.as_nkfs(gk, gv, layout)]
    out.append(impl.branch(*branch[:3], layer, *branch[3:]))
  return out


def _layouts(name):
  """The cache layouts ``name`` reads: the CPU kernel only its own."""
  return ("nkfs",) if name == "cpu_kernel" else kv_cache.LAYOUTS


@pytest.mark.parametrize("name", IMPLEMENTATIONS + ["reference"])
@pytest.mark.parametrize("r,f", SHAPES)
def test_every_call_equals_the_reference(name, r, f):
  impl = attention_choice.resolve(name)
  assert impl.name == name and impl.cache_layout in kv_cache.LAYOUTS
  rng = np.random.default_rng(r * 1000 + f)
  # Full sequence, rows left-padded by 0, 3 and 6 tokens (compared at the real queries).
  t = 11
  seq = (_arr(rng, 3, t, KV, r, f), _arr(rng, 3, t, KV, f), _arr(rng, 3, t, KV, f))
  mask_NT = jnp.arange(t)[None, :] >= jnp.asarray([0, 3, 6])[:, None]
  per_layer = []
  for prefix in (False, True):
    layer = _layer(rng, f, 24, prefix)
    # With the shared prefix: a chunk of 7 tokens and a decode token at per-row offsets in the
    # rows' own buffers (without it, as the local judge's cache: the branches only).
    chunks = [(_arr(rng, 4, t, KV, r, f), _arr(rng, 4, t, KV, f), _arr(rng, 4, t, KV, f),
               (layer.start_N + jnp.asarray([0, 5, 2, 16]))[:, None] + jnp.arange(t))
              for t in ((7, 1) if prefix else ())]
    # Tree branches after each row's first lengths_N positions.
    branch = (_arr(rng, 4, 6, KV, r, f), _arr(rng, 4, 6, KV, f), _arr(rng, 4, 6, KV, f),
              layer.start_N + jnp.asarray([1, 12, 24, 7]), _tree_sees())
    per_layer.append((layer, chunks, branch))
  inputs = (seq, mask_NT, per_layer)
  layouts = _layouts(name)
  got, want = jax.jit(lambda x: ([_calls(impl, x, lay) for lay in layouts], _calls(REF, x)))(
      inputs)
  real = mask_NT[..., None, None, None]
  for one in got:
    _close(jnp.where(real, one[0], 0), jnp.where(real, want[0], 0))
    for a, b in zip(one[1:], want[1:]):
      _close(a, b)


def test_a_branch_is_its_own_causal_sequence():
  """The reference's tree branch equals a cache chunk holding exactly the branch's path."""
  rng = np.random.default_rng(3)
  f, r = 32, 2
  layer = _layer(rng, f, 16, prefix=False)
  q, k, v = _arr(rng, 4, 3, KV, r, f), _arr(rng, 4, 3, KV, f), _arr(rng, 4, 3, KV, f)
  lengths_N = jnp.asarray([4, 4, 4, 4])
  # Nodes 0 -> 1 and 0 -> 2: node 2 must not see node 1.
  sees_TT = jnp.asarray([[1, 0, 0], [1, 1, 0], [1, 0, 1]], bool)
  got = REF.branch(q, k, v, layer, lengths_N, sees_TT)
  for path in ([0, 1], [0, 2]):
    idx = jnp.asarray(path)
    want, _ = REF.cache(q[:, idx], k[:, idx], v[:, idx], 4 + jnp.arange(2)[None].repeat(4, 0),
                        layer)
    _close(got[:, idx], want)


def test_choices_and_auto():
  assert attention_choice.resolved_name("auto") == "cpu_kernel"  # the tests run on CPU
  assert attention_choice.resolve("reference").feature_major_decode is False
  with pytest.raises(ValueError, match="model.attention must be one of"):
    attention_choice.check("flash")


def test_dot_product_attention_in_bfloat16_is_near_the_float32_reference():
  """bfloat16 inputs (the dtype cuDNN needs on GPU; XLA's implementation here): max |error|
  <= 2e-2 x max |value| of the float32 reference on the same values."""
  impl = attention_choice.resolve("dot_product_attention")
  rng = np.random.default_rng(11)
  r, f = 3, 64
  layer = _layer(rng, f, 24, prefix=True)
  q, k, v = _arr(rng, 4, 7, KV, r, f), _arr(rng, 4, 7, KV, f), _arr(rng, 4, 7, KV, f)
  positions_NT = (layer.start_N + jnp.asarray([0, 5, 2, 16]))[:, None] + jnp.arange(7)
  bf = lambda x: x.astype(jnp.bfloat16)
  layer_bf = jax.tree.map(lambda x: bf(x) if x.dtype == jnp.float32 else x, layer)
  up = lambda x: x.astype(jnp.float32)
  layer_up = jax.tree.map(lambda x: up(x) if x.dtype == jnp.bfloat16 else x, layer_bf)
  for got, want in (
      (impl.sequence(bf(q), bf(k), bf(v), None),
       REF.sequence(up(bf(q)), up(bf(k)), up(bf(v)), None)),
      (impl.cache(bf(q), bf(k), bf(v), positions_NT, layer_bf)[0],
       REF.cache(up(bf(q)), up(bf(k)), up(bf(v)), positions_NT, layer_up)[0])):
    assert got.dtype == jnp.bfloat16
    err = np.max(np.abs(np.asarray(up(got)) - np.asarray(want)))
    assert err <= 2e-2 * np.max(np.abs(np.asarray(want)))
