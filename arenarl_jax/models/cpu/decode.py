"""One token per row through the transformer with feature-major activations [D, N]: the
``cpu_kernel`` choice's decode step (the sampler uses it when the model's attention resolves to
``cpu_kernel``).

Why: at decode each weight matmul has only N rows. XLA:CPU's matmul library packs the right-hand
operand on every call, so the usual ``x[N, D] @ W[D, E]`` repacks the whole weight matrix at every
step, and that packing costs as much as the arithmetic. Written as ``Wt[E, D] @ x[D, N]`` the
weights are the left operand, read as stored, and only the small activations are packed.

``transposed_kernels`` makes the [out, in] copies (one weight-sized buffer; the sampler makes
them once per set of weights through ``FEATURE_MAJOR.prepare``, the CPU backend's decode step,
``models/cpu/backend.py``). Activations stay [D, N] through norms, projections, the MLP and
the head, using the model's own sub-layers (``RMSNorm(axis=0)``, ``Attention.heads`` for q/k
norm and RoPE); the attention is the model's chosen implementation (``CpuAttention``: the kernel,
which writes the token in place). The result equals ``model(tokens_N1, positions_N1,
cache=cache)`` up to float rounding (tests check it).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh

from arenarl_jax.models import attention_choice, backend, matmul
from arenarl_jax.models.cpu.attention import CpuAttention
from arenarl_jax.models.kv_cache import KVCache
from arenarl_jax.models.rope import rope_tables
from arenarl_jax.models.transformer import Transformer

_LAYER_KERNELS = (("attn", "q"), ("attn", "k"), ("attn", "v"), ("attn", "o"), ("mlp", "gate"),
                  ("mlp", "up"), ("mlp", "down"))


def supports(model) -> bool:
  """Only the library's Transformer itself: other models (and subclasses, which may override
  ``hidden`` or ``head``) are only known to follow the call contract."""
  return type(model) is Transformer  # pylint: disable=unidiomatic-typecheck


def transposed_kernels(model) -> tuple[tuple[tuple[jax.Array, ...], ...], jax.Array]:
  """(per layer the q, k, v, o, gate, up, down kernels as [out, in], the head as [V, D])."""
  dt = model.cfg.act_dtype
  layers = tuple(tuple(getattr(getattr(layer, part), name).kernel[...].T.astype(dt)
                       for part, name in _LAYER_KERNELS) for layer in model.layers)
  head = model.embed[...] if model.lm_head is None else model.lm_head.kernel[...].T
  return layers, head.astype(dt)


def _matmul(w_ED, x_DN, dtype=None):
  """w @ x in ``dtype`` (default ``x``'s). The barrier keeps XLA from folding a following
  transpose into the product, which would turn it back into the slow (activations-first) form.
  bfloat16 operands accumulate in float32, as the model's other products do
  (``matmul.accumulation_dtype``)."""
  acc = matmul.accumulation_dtype(dtype or x_DN.dtype)
  y = jax.lax.dot_general(w_ED, x_DN, (((1,), (0,)), ((), ())), preferred_element_type=acc)
  return jax.lax.optimization_barrier(y.astype(dtype or x_DN.dtype))


def _linear(linear, w_ED, x_DN):
  """A Linear layer on feature-major activations: [E, N] (its bias, if any, added per row)."""
  y_EN = _matmul(w_ED, x_DN)
  return y_EN + linear.bias[...][:, None].astype(y_EN.dtype) if linear.bias is not None else y_EN


def _rows(y_EN):
  """[E, N] -> [N, 1, E]: a projection's output in the layout ``Attention.heads`` takes."""
  return y_EN.T[:, None]


def hidden(model, kernels, tokens_N, positions_N, cache: KVCache, *, mesh: Mesh | None = None):
  """(final-norm hidden states [D, N], cache) for one token per row at its position.

  ``mesh``: the CPU kernel splits the rows over its 'data' axis."""
  impl = attention_choice.resolve(model.attention)
  extra = {"mesh": mesh} if isinstance(impl, CpuAttention) else {}
  cfg = model.cfg
  layers_t, _ = kernels
  n = tokens_N.shape[0]
  positions_N1 = positions_N[:, None]
  x_DN = jnp.take(model.embed[...], tokens_N, axis=0).T
  cos, sin = rope_tables(model.cfg, positions_N1, cache.position_bound)
  start_N = cache.start_N()
  new_k, new_v = [], []
  for i, (layer, (wq, wk, wv, wo, wg, wu, wd)) in enumerate(zip(model.layers, layers_t)):
    attn = layer.attn
    h_DN = layer.attn_norm(x_DN, axis=0)
    q, k, v = attn.heads(_rows(_linear(attn.q, wq, h_DN)), _rows(_linear(attn.k, wk, h_DN)),
                         _rows(_linear(attn.v, wv, h_DN)), cos, sin)
    q_N1KRF = q.reshape(n, 1, cfg.n_kv_heads, cfg.n_heads // cfg.n_kv_heads, cfg.head_dim)
    out_N1KRF, (k_NKFS, v_NKSF) = impl.cache(q_N1KRF, k, v, positions_N1,
                                             cache.layer(i, start_N), **extra)
    new_k.append(k_NKFS)
    new_v.append(v_NKSF)
    x_DN = x_DN + _linear(attn.o, wo, out_N1KRF.reshape(n, -1).T)
    h_DN = layer.mlp_norm(x_DN, axis=0)
    x_DN = x_DN + _matmul(wd, jax.nn.silu(_matmul(wg, h_DN)) * _matmul(wu, h_DN))
  return model.final_norm(x_DN, axis=0), cache.replace(k=tuple(new_k), v=tuple(new_v))


def head(kernels, h_DN):
  """Logits [V, N] float32 of feature-major hidden states (``choose_tokens(vocab_axis=0)``
  samples them in this layout)."""
  return _matmul(kernels[1], h_DN, jnp.float32)


def step(model, kernels, tokens_N, positions_N, cache: KVCache):
  """(logits [N, V] float32, cache) for one token per row at its position (see module doc)."""
  h_DN, cache = hidden(model, kernels, tokens_N, positions_N, cache)
  return head(kernels, h_DN).T, cache


@backend.jit(static_argnames=("graphdef",))
def _transpose_kernels(graphdef, params):
  """``transposed_kernels`` of the model, as one program."""
  return transposed_kernels(nnx.merge(graphdef, params))


class FeatureMajorDecode:
  """The sampler's decode step (``models/backend.py``'s ``DecodeStep``) in this module's layout:
  the hidden states are carried [N, D] between steps and turned [D, N] here; the head writes
  [V, N] logits, sampled in place (vocabulary axis 0)."""

  feature_major = True

  def serves(self, model) -> bool:
    """The library's Transformer whose attention asks for feature-major decode (``cpu_kernel``,
    ``auto`` on CPU)."""
    return supports(model) and attention_choice.resolve(model.attention).feature_major_decode

  def prepare(self, graphdef, params):
    """The transposed kernels of these weights."""
    return _transpose_kernels(graphdef, params)

  def logits(self, model, prepared, h_ND):
    del model
    return head(prepared, h_ND.T), 0

  def feed(self, model, prepared, tokens_N, positions_N, cache, *, mesh=None):
    h_DN, cache = hidden(model, prepared, tokens_N, positions_N, cache, mesh=mesh)
    return h_DN.T, cache


FEATURE_MAJOR = FeatureMajorDecode()
