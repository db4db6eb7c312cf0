"""The ``cpu_kernel`` attention choice: attention against the cache on the compiled kernel
(``kernel.py``); full causal sequences (the training forward) with the kernels' forward and
backward (``causal_blocks`` holds the custom gradient, and the blocked jnp versions of both for a
key mask); the reference attention for everything the kernels do not cover (caches or sequences
that are not float32; no compiler); and the feature-major decode step (``decode.py``) for the
sampler."""
from __future__ import annotations

import jax.numpy as jnp

from arenarl_jax.models import causal_blocks
from arenarl_jax.models.attention import ReferenceAttention, branch_counts
from arenarl_jax.models.cpu import kernel
from arenarl_jax.models.kv_cache import LayerCache


class CpuAttention(ReferenceAttention):
  """The kernel for cache chunks (decode writes in place) and tree branches."""

  name = "cpu_kernel"
  feature_major_decode = True

  def sequence(self, q_NTKRF, k_NTKF, v_NTKF, mask_NT):
    if not kernel.available(q_NTKRF.dtype) or not kernel.available(k_NTKF.dtype):
      return super().sequence(q_NTKRF, k_NTKF, v_NTKF, mask_NT)
    blocks = causal_blocks.block_count(q_NTKRF.shape[1])
    if mask_NT is not None:  # any key mask: the jnp forward (the kernel's counts are prefixes)
      return causal_blocks.causal_attention(q_NTKRF, k_NTKF, v_NTKF,
                                            mask_NT.astype(jnp.float32), blocks)
    return causal_blocks.causal_attention(q_NTKRF, k_NTKF, v_NTKF, None, blocks, kernel.causal,
                                          kernel.causal_backward)

  def cache(self, q_NTKRF, k_NTKF, v_NTKF, positions_NT, layer: LayerCache, *, mesh=None):
    if not kernel.available(layer.v.dtype):
      return super().cache(q_NTKRF, k_NTKF, v_NTKF, positions_NT, layer)
    if q_NTKRF.shape[1] == 1:
      return kernel.decode(q_NTKRF, k_NTKF, v_NTKF, positions_NT, layer, mesh=mesh)
    return kernel.chunk(q_NTKRF, k_NTKF, v_NTKF, positions_NT, layer)

  def branch(self, q_NTKRF, k_NTKF, v_NTKF, layer: LayerCache, lengths_N, sees_TT):
    if not kernel.available(layer.v.dtype):
      return super().branch(q_NTKRF, k_NTKF, v_NTKF, layer, lengths_N, sees_TT)
    count_NT = branch_counts(layer, lengths_N, q_NTKRF.shape[1])
    return kernel.branch(q_NTKRF, k_NTKF, v_NTKF, layer, count_NT, sees_TT)
