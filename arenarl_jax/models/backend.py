"""The one backend seam: how programs compile and what the model's hot operations run on.

Code outside ``models/`` asks this module, never a platform's own package, so the sampler, the
training step and the judge read the same on every backend:

    @backend.jit(static_argnames=("graphdef",))             # a sampling or judge program
    def prefill(graphdef, params, tokens): ...
    step = backend.jit(train_step, kind=backend.TRAINING)    # the training step
    decode_step = backend.current().decode_step(model)       # how decode feeds one token per row

A ``Backend`` is chosen once per JAX platform (``current()``: the default backend's platform,
looked up when first asked, so importing never initialises one; multi-host runs must call
``jax.distributed.initialize`` first). It provides:
- ``compiler_options``: XLA compiler options per program kind (``INFERENCE``: sampling and the
  local judge; ``TRAINING``: the training step and its teacher-forced pass), applied by ``jit``;
- ``dense``/``dense_t``: the model's dense products (x @ w and x @ w^T);
- ``remat``: the per-block checkpoint of the training forward (``models/remat.py``'s policies);
- ``default_attention``: what ``model.attention = "auto"`` stands for (``attention_choice``
  asks; it resolves the other choices itself);
- ``decode_step(model)``: the ``DecodeStep`` the sampler's decode loop runs for ``model``;
- ``prepare_process()`` (a module function): what an entry point does first, before JAX starts.

A platform's implementation registers itself (``register``) from its own package, which this
module imports on first use of that platform (``_PLATFORM_MODULES``: the CPU's is
``models/cpu/backend.py``). Any other platform gets the plain backend: ``jax.jit`` with XLA's
defaults, jnp products with autodiff's backward, and ``jax.checkpoint``.

Importing this module imports no JAX (``main.py`` prepares the process with it before JAX
starts): JAX and the implementations load when a backend is first asked for.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
import logging
import os
from typing import Any, Callable, Mapping

INFERENCE = "inference"  # sampling and the local judge
TRAINING = "training"  # the training step and its teacher-forced log-probs
KINDS = (INFERENCE, TRAINING)

# platform -> the module that registers its Backend when imported
_PLATFORM_MODULES = {"cpu": "arenarl_jax.models.cpu.backend"}
_REGISTERED: dict[str, "Backend"] = {}
_REJECTED: set[tuple[tuple[str, str], ...]] = set()  # option sets this XLA refused


class RowsDecode:
  """The decode step of every model on every backend: ``model.hidden`` and ``model.head`` on
  rows-first activations [N, D]; nothing to prepare."""

  feature_major = False

  def prepare(self, graphdef, params):
    """What ``logits`` and ``feed`` read besides the model, made once per set of weights."""
    del graphdef, params
    return None

  def logits(self, model, prepared, h_ND):
    """(logits of the hidden states, their vocabulary axis)."""
    del prepared
    return model.head(h_ND), 1

  def feed(self, model, prepared, tokens_N, positions_N, cache, *, mesh=None):
    """(hidden states [N, D], cache) after one token per row at its position (``mesh``: the
    rows' mesh, for steps whose attention splits rows over it)."""
    del prepared, mesh
    h_N1D, cache = model.hidden(tokens_N[:, None], positions_N[:, None], cache=cache)
    return h_N1D[:, 0], cache


ROWS_DECODE = RowsDecode()


@dataclasses.dataclass(frozen=True, eq=False)
class Backend:
  """What one platform compiles and runs (see the module doc). ``feature_major_decode``: a
  decode step for the models it ``serves`` (whose attention asks for feature-major decode), or
  None."""

  platform: str
  dense: Callable
  dense_t: Callable
  remat: Callable
  default_attention: str
  compiler_options: Mapping[str, Mapping[str, str]] = dataclasses.field(default_factory=dict)
  feature_major_decode: Any = None

  def options(self, kind: str) -> dict[str, str]:
    """The compiler options of programs of ``kind`` (empty: XLA's defaults)."""
    if kind not in KINDS:
      raise ValueError(f"program kind must be one of {KINDS}, got {kind!r}")
    return dict(self.compiler_options.get(kind, {}))

  def decode_step(self, model):
    """The decode step for ``model``: this backend's feature-major step where it serves the
    model, else ``ROWS_DECODE``."""
    step = self.feature_major_decode
    return step if step is not None and step.serves(model) else ROWS_DECODE


def register(backend: Backend) -> Backend | None:
  """Makes ``backend`` the one of its platform; returns the one it replaces (or None)."""
  previous = _REGISTERED.get(backend.platform)
  _REGISTERED[backend.platform] = backend
  return previous


def _make_plain(platform: str) -> Backend:
  from arenarl_jax.models import matmul, remat  # pylint: disable=g-import-not-at-top
  return Backend(platform=platform, dense=matmul.plain_dense, dense_t=matmul.plain_dense_t,
                 remat=functools.partial(remat.checkpointed, after_cotangent=False),
                 default_attention="dot_product_attention")


def get(platform: str) -> Backend:
  """The backend of ``platform`` (a JAX platform name: cpu, gpu, tpu, ...)."""
  if platform not in _REGISTERED:
    if platform in _PLATFORM_MODULES:
      importlib.import_module(_PLATFORM_MODULES[platform])  # registers itself
    if platform not in _REGISTERED:
      register(_make_plain(platform))
  return _REGISTERED[platform]


def current() -> Backend:
  """The backend of JAX's default platform."""
  import jax  # pylint: disable=g-import-not-at-top
  return get(jax.default_backend())


def _options_in_use(kind: str) -> dict[str, str]:
  """The current backend's options for ``kind``, or none: a user's own ``XLA_FLAGS`` setting of
  any of them wins, and a set this XLA rejected once is not tried again."""
  options = current().options(kind)
  if tuple(sorted(options.items())) in _REJECTED:
    return {}
  flags = os.environ.get("XLA_FLAGS", "")
  return {} if any(name in flags for name in options) else options


def jit(fn=None, *, kind: str = INFERENCE, **jit_kwargs):
  """``jax.jit(fn, **jit_kwargs)`` compiled with the current backend's options for ``kind``
  (usable as a decorator, with or without arguments). The backend is asked at each call; an
  XLA that rejects the options runs the program with its defaults (once, with a warning). The
  result also has ``jitted()`` (the jitted function in use) and ``lower``."""
  if fn is None:
    return functools.partial(jit, kind=kind, **jit_kwargs)
  if kind not in KINDS:
    raise ValueError(f"program kind must be one of {KINDS}, got {kind!r}")
  compiled = {}  # the options' items -> jax.jit of fn with them

  def select():
    """(the options in use, the jitted function compiled with them)."""
    import jax  # pylint: disable=g-import-not-at-top
    options = _options_in_use(kind)
    key = tuple(sorted(options.items()))
    if key not in compiled:
      extra = {"compiler_options": options} if options else {}
      compiled[key] = jax.jit(fn, **extra, **jit_kwargs)
    return options, compiled[key]

  def jitted():
    return select()[1]

  @functools.wraps(fn)
  def call(*args, **kwargs):
    import jax  # pylint: disable=g-import-not-at-top
    options, jitted_fn = select()
    try:
      return jitted_fn(*args, **kwargs)
    except jax.errors.JaxRuntimeError as err:
      if not any(name in str(err) for name in options):
        raise
      logging.warning("this XLA rejects %s (%s); compiling with its defaults", options, err)
      _REJECTED.add(tuple(sorted(options.items())))
      return jitted()(*args, **kwargs)

  call.jitted = jitted
  call.lower = lambda *args, **kwargs: jitted().lower(*args, **kwargs)
  return call


def prepare_process() -> None:
  """What an entry point does first, before anything imports JAX or starts threads: on a
  CPU-only Linux host, re-execute the command with the retained-heap allocator settings
  (``models/cpu/allocator.py``; it decides without starting JAX and returns when it does not
  apply). Imports no JAX."""
  from arenarl_jax.models.cpu import allocator  # pylint: disable=g-import-not-at-top
  allocator.reexec_with_retained_heap()


def release_host_memory() -> None:
  """Where a sequence of differently shaped programs ends (an evaluation wave, a cache that moved
  to a larger size): hand the host heap's free pages back, so that a CPU process running with
  the retained heap does not keep every shape's temporaries resident (``models/cpu/allocator.py``
  ``release_free_pages``). A no-op elsewhere."""
  from arenarl_jax.models.cpu import allocator  # pylint: disable=g-import-not-at-top
  allocator.release_free_pages()


def cpu_kind(amx: bool = False) -> str:
  """The host CPU's instruction-set kind (``avx512``, ``avx2`` or the machine's name; with
  ``amx``, ``+amx`` where it has AMX tiles): what a run records beside results that XLA:CPU's
  rounding can change (``models/cpu/isa.py``). Imports no JAX."""
  from arenarl_jax.models.cpu import isa  # pylint: disable=g-import-not-at-top
  return isa.cpu_kind(amx)
