"""Copy heads at initialisation (``model.init.copy_heads``): a from-scratch model's first-layer
heads whose value and output projections start as a copy of the attended token.

Copying a name from the query into a call needs two things at once: a head that attends to the
name (its queries and keys) and a path that writes the attended token back as itself (its values
and output). From a random start neither earns a gradient without the other, so the small model
sits on a plateau where it memorises a frequent name instead of reading one (a place seen in a
dozen training rows is never copied, the query's radius never read). Starting the path as a copy
breaks the tie: attending to the right token then lowers the loss at once, and the attention
learns where to look.

In the first layer a head's values are projections of the normalised token embedding alone, so
for the chosen key-value groups the value projection is an orthonormal basis Q_k of a random
subspace and every query head of the group writes Q_k^T back: the layer adds P x (P the
projection onto the groups' subspace) of whatever token the head attends to, and the tied head
scores that token's id highest. The rest of the model keeps its random start.
"""
from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np


def init_copy_heads(model: Any, groups: int, seed: int) -> None:
  """Rewrites, in place, the first layer's value and output projections of its first ``groups``
  key-value groups as a copy of the attended token (see above). ``groups`` = 0 leaves the
  model as it is."""
  cfg = model.cfg
  if groups <= 0:
    return
  if groups > cfg.n_kv_heads:
    raise ValueError(f"model.init.copy_heads={groups} exceeds the model's {cfg.n_kv_heads} "
                     "key-value heads")
  f, d = cfg.head_dim, cfg.d_model
  reps = cfg.n_heads // cfg.n_kv_heads
  if groups * f > d:
    raise ValueError(f"model.init.copy_heads={groups}: {groups} x head_dim {f} exceeds d_model {d}")
  rng = np.random.default_rng([int(seed), 11])
  basis, _ = np.linalg.qr(rng.normal(size=(d, groups * f)))  # [D, groups*F], orthonormal columns
  attn = model.layers[0].attn
  v = np.array(attn.v.kernel[...], np.float32)  # [D, K*F]
  o = np.array(attn.o.kernel[...], np.float32)  # [H*F, D]
  for k in range(groups):
    q_DF = basis[:, k * f:(k + 1) * f]
    v[:, k * f:(k + 1) * f] = q_DF
    for r in range(reps):  # the group's query heads share its values: each writes 1/R of them
      h = k * reps + r
      o[h * f:(h + 1) * f] = q_DF.T / reps
  attn.v.kernel[...] = jnp.asarray(v, attn.v.kernel[...].dtype)
  attn.o.kernel[...] = jnp.asarray(o, attn.o.kernel[...].dtype)
