"""The attention seam: which implementation a model's attention runs, chosen once per model.

``model.attention`` (config key ``model.attention``; ``Transformer(..., attention=)``) is one of
- ``reference``: ``models/attention.py`` ``attend``, a plain float32 softmax over materialised
  scores. The test oracle; every other implementation is checked against it.
- ``dot_product_attention``: ``jax.nn.dot_product_attention`` (``models/dot_product_attention.py``):
  cuDNN flash attention on GPU where its constraints hold, XLA's implementation otherwise.
- ``cpu_kernel``: the CPU implementation (``models/cpu/``): attention against the cache by a
  compiled C++ kernel that reads only each query's visible slots, and the feature-major decode
  step. Where the kernel cannot be built (no compiler) or the cache is not float32, its
  attention is the reference one.
- ``auto`` (default): the backend's ``default_attention`` (``models/backend.py``): ``cpu_kernel``
  on CPU, ``dot_product_attention`` on GPU and TPU.

The choice is resolved when a program is traced (the backend is known then) and is part of the
model's static graph, so each compiled program runs exactly one implementation.

An implementation is an object with ``name``, ``feature_major_decode`` and three methods taking
queries [N, T, K, R, F] and the chunk's keys and values [N, T, K, F] (see ``ReferenceAttention``):
``sequence`` (full causal sequence with a key mask), ``cache`` (write a chunk at its positions,
attend; decode is T = 1) and ``branch`` (tree branches with extra keys, no write). A subclass of
``ReferenceAttention`` overrides what it accelerates and inherits the rest.

Slot for a TPU decode kernel: a Pallas ragged/paged attention would be a subclass overriding
``cache`` for T = 1 (read each row's slots below its position), registered in ``_FACTORIES``
under its own name, and picked by ``auto`` on TPU once it is tested against the reference here.
"""
from __future__ import annotations

import functools

from arenarl_jax.models import backend
from arenarl_jax.models.attention import ReferenceAttention
from arenarl_jax.models.settings import ATTENTION_CHOICES as CHOICES


def _dot_product():
  from arenarl_jax.models import dot_product_attention  # pylint: disable=g-import-not-at-top
  return dot_product_attention.DotProductAttention()


def _cpu():
  from arenarl_jax.models.cpu.attention import CpuAttention  # pylint: disable=g-import-not-at-top
  return CpuAttention()


_FACTORIES = {"reference": ReferenceAttention, "dot_product_attention": _dot_product,
              "cpu_kernel": _cpu}


def check(name: str, where: str = "model.attention") -> str:
  """``name`` if it is a known choice, else a ValueError naming ``where``."""
  if name not in CHOICES:
    raise ValueError(f"{where} must be one of {CHOICES}, got {name!r}")
  return name


def resolved_name(name: str) -> str:
  """The implementation ``name`` stands for on the current default backend."""
  check(name)
  if name == "auto":
    return backend.current().default_attention
  return name


@functools.cache
def _instance(name: str):
  return _FACTORIES[name]()


def resolve(name: str):
  """The implementation object of ``name`` (``auto`` resolved for the current backend)."""
  return _instance(resolved_name(name))
