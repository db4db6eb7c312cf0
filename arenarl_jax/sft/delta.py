"""A start stored as a low-rank delta against the weights it began from.

A start fine-tuned from a pretrained model (SmolLM2-135M: 540 MB in float32) cannot be committed
whole, but SFT moves each matrix only a little (about 0.5% of its norm at 96 updates), so the
start is stored as what changed: per matrix W (shape [in, out]) the best rank-r approximation of
``W_tuned - W_base`` (truncated SVD, Eckart-Young) as factors ``A`` [in, r] = U_r S_r and ``B``
[r, out] = V_r^T; a matrix no wider than r and every vector (norm scales) keep their whole
delta. Factors are stored in ``start.delta_dtype`` (bfloat16 halves the bytes; the delta is
small, so its rounding is small against the weight it is added to).

    tensors = factorize(base, tuned, rank=32)   # flat dicts: name -> array
    params = apply(base, tensors)               # base + A @ B, placed like base
    save(path, tensors, metadata); tensors, metadata = load(path)

The pinned start is *defined* by ``apply(base, tensors)``: the build evaluates exactly the
weights a later run reconstructs (the same function on the same stored factors), so a start's
recorded validation is what loading it reproduces, whatever the truncation cost.
"""
from __future__ import annotations

import functools
import hashlib
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from flax import traverse_util
from safetensors.numpy import load_file, save_file

DTYPES = {"bfloat16": ml_dtypes.bfloat16, "float32": np.float32}
A, B, FULL = ".a", ".b", ".delta"


def flat_params(params: Mapping[Any, Any]) -> dict[str, Any]:
  """A nested pure dict of parameters (``nnx.to_pure_dict``) by dotted name."""
  return {".".join(str(k) for k in path): v
          for path, v in traverse_util.flatten_dict(dict(params)).items()}


def nested_params(flat: Mapping[str, Any], like: Mapping[Any, Any]) -> dict[Any, Any]:
  """``flat`` (by dotted name) back in the nested layout of ``like`` (its keys, ints kept)."""
  paths = traverse_util.flatten_dict(dict(like))
  return traverse_util.unflatten_dict({p: flat[".".join(str(k) for k in p)] for p in paths})


def digest(params: Mapping[str, Any]) -> str:
  """SHA-256 of a flat parameter dict's names, shapes, dtypes and bytes: the identity of the
  base a delta is added to (a changed base makes the stored delta meaningless)."""
  h = hashlib.sha256()
  for name in sorted(params):
    a = np.asarray(jax.device_get(params[name]))
    h.update(f"{name}:{a.shape}:{a.dtype}".encode())
    h.update(np.ascontiguousarray(a).tobytes())
  return h.hexdigest()


def factorize(base: Mapping[str, Any], tuned: Mapping[str, Any], rank: int,
              dtype: str = "bfloat16") -> dict[str, np.ndarray]:
  """The stored delta of ``tuned`` against ``base`` (flat dicts of the same names and shapes);
  parameters that did not change are left out."""
  if rank < 1:
    raise ValueError(f"delta rank must be >= 1, got {rank}")
  if dtype not in DTYPES:
    raise ValueError(f"delta dtype {dtype!r} is not one of {sorted(DTYPES)}")
  if set(base) != set(tuned):
    raise ValueError(f"delta: the tuned parameters differ in names from the base's: "
                     f"{sorted(set(base) ^ set(tuned))[:5]}")
  out: dict[str, np.ndarray] = {}
  for name in sorted(base):
    b, t = np.asarray(base[name], np.float32), np.asarray(tuned[name], np.float32)
    if b.shape != t.shape:
      raise ValueError(f"delta: {name} has shape {t.shape}, its base {b.shape}")
    d = t - b
    if not np.any(d):
      continue
    if d.ndim == 2 and min(d.shape) > rank:
      u, s, vt = np.linalg.svd(d, full_matrices=False)
      out[name + A] = (u[:, :rank] * s[:rank]).astype(DTYPES[dtype])
      out[name + B] = vt[:rank].astype(DTYPES[dtype])
    else:  # vectors and narrow matrices: their whole delta costs no more than factors would
      out[name + FULL] = d.astype(DTYPES[dtype] if d.ndim == 2 else np.float32)
  return out


def apply(base: Mapping[str, Any], tensors: Mapping[str, np.ndarray]) -> dict[str, Any]:
  """``base`` (flat, jax or numpy arrays) plus the stored delta, each result placed like its base
  parameter (same sharding and dtype). Names in ``tensors`` that ``base`` lacks are an error.
  One compiled sum per distinct shape and placement, not per parameter (a 30-layer model has
  about 200 changed parameters but a handful of shapes)."""
  out = dict(base)
  for name in _changed(base, tensors):
    parts = {k: jnp.asarray(v) for k, v in _parts(tensors, name).items()}
    out[name] = _jitted_sum(getattr(base[name], "sharding", None))(base[name], parts)
  return out


@functools.lru_cache(maxsize=None)
def _jitted_sum(sharding):
  return jax.jit(_sum) if sharding is None else jax.jit(_sum, out_shardings=sharding)


def lift(base: Mapping[str, Any], tensors: Mapping[str, Any]) -> dict[str, Any]:
  """``apply``'s sum as a pure function (traceable: the adapter's training step differentiates
  it with respect to ``tensors``)."""
  out = dict(base)
  for name in _changed(base, tensors):
    out[name] = _updated(base[name], tensors, name=name)
  return out


def _changed(base: Mapping[str, Any], tensors: Mapping[str, Any]) -> list[str]:
  names = sorted({k.rsplit(".", 1)[0] for k in tensors})
  unknown = [n for n in names if n not in base]
  if unknown:
    raise ValueError(f"delta: stored tensors for parameters the model does not have: "
                     f"{unknown[:5]}")
  return names


def _updated(w, tensors: Mapping[str, Any], *, name: str):
  """One parameter plus its delta (``name``'s stored tensors in ``tensors``)."""
  return _sum(w, _parts(tensors, name))


def _parts(tensors: Mapping[str, Any], name: str) -> dict[str, Any]:
  """``name``'s stored tensors, keyed by kind: ``delta`` (whole) or ``a`` and ``b``."""
  if name + FULL in tensors:
    return {"delta": tensors[name + FULL]}
  return {"a": tensors[name + A], "b": tensors[name + B]}


def _sum(w, parts: Mapping[str, Any]):
  """A parameter plus its delta, summed in float32; the product at full precision, so the
  build and every later load compute the same sum."""
  if "delta" in parts:
    d = jnp.asarray(parts["delta"]).astype(jnp.float32)
  else:
    d = jnp.matmul(jnp.asarray(parts["a"]).astype(jnp.float32),
                   jnp.asarray(parts["b"]).astype(jnp.float32),
                   precision=jax.lax.Precision.HIGHEST)
  return (jnp.asarray(w).astype(jnp.float32) + d).astype(jnp.asarray(w).dtype)


def stored(tensors: Mapping[str, Any], dtype: str) -> dict[str, np.ndarray]:
  """``tensors`` as a start stores them: factors and matrix deltas in ``dtype``, vectors in
  float32 (an adapter's tensors, trained in float32, take this form)."""
  if dtype not in DTYPES:
    raise ValueError(f"delta dtype {dtype!r} is not one of {sorted(DTYPES)}")
  out = {}
  for k, v in tensors.items():
    v = np.asarray(jax.device_get(v))
    out[k] = v.astype(np.float32 if v.ndim < 2 else DTYPES[dtype])
  return out


def pin(base: Mapping[Any, Any], tensors: Mapping[str, Any], *, rank: int, dtype: str,
        base_name: str, tuned: Mapping[Any, Any] | None = None
        ) -> tuple[dict[Any, Any], dict[str, np.ndarray], dict[str, Any]]:
  """(the start's parameters as a load reconstructs them, in ``base``'s nested layout and
  placement; the stored tensors; the record's ``delta`` block). ``base``: nested pure dict;
  ``tensors``: the delta (``factorize``'s, or an adapter's); ``base_name``: what the base is
  (``model.source`` or the preset). With ``tuned`` (the full fine-tune it approximates) the
  record says how much of its delta the stored one keeps."""
  flat_base = flat_params(base)
  keep = stored(tensors, dtype)
  flat = apply(flat_base, keep)
  info = {"rank": rank, "dtype": dtype, "bytes": nbytes(keep), "base": base_name,
          "base_sha256": digest(flat_base)}
  if tuned is not None:
    whole = lost = 0.0
    for k, t in flat_params(tuned).items():
      t = np.asarray(jax.device_get(t), np.float32)
      whole += float(np.sum((t - np.asarray(jax.device_get(flat_base[k]), np.float32)) ** 2))
      lost += float(np.sum((t - np.asarray(jax.device_get(flat[k]), np.float32)) ** 2))
    # the share of the fine-tune's delta (squared norm) that the stored delta keeps
    info["kept"] = round(1.0 - lost / whole, 4) if whole else 1.0
  return nested_params(flat, base), keep, info


def nbytes(tensors: Mapping[str, np.ndarray]) -> int:
  return int(sum(np.asarray(t).nbytes for t in tensors.values()))


def save(path: str, tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str]) -> None:
  save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, path,
            metadata={k: str(v) for k, v in metadata.items()})


def load(path: str) -> dict[str, np.ndarray]:
  return load_file(path)
