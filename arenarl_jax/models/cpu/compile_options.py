"""XLA:CPU compiler options for the hot jitted programs: ``program`` replaces ``jax.jit``.

Why: on CPU, XLA hands matrix products to the YNNPACK library and by default also fuses the
surrounding reductions and element-wise ops into the same library call (e.g. softmax max, exp, sum
and the value product of attention become one YNNPACK graph). Those fused graphs run
single-threaded and slowly; sending only individual dots to the library and leaving the rest to
XLA's own emitters makes decode and the local judge faster (``CPU_OPTIONS``, benchmarks/README.md).
The training step and its teacher-forced pass take ``TRAINING_OPTIONS``: no library fusion at all,
so every product runs on XLA's Eigen matmul, which runs the step's [tokens, features] x [features,
features'] products at about twice YNNPACK's rate on this CPU (benchmarks/train_step.py). Other
backends compile with their defaults.

The backend is looked up at call time, so importing never initialises one (multi-host runs must
call ``jax.distributed.initialize`` first). A user's own ``XLA_FLAGS`` setting of the option wins,
and an XLA that does not know the option falls back to the defaults (once, with a warning).
"""
from __future__ import annotations

import functools
import logging
import os

import jax

CPU_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}
TRAINING_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": ""}

_state = {"cpu_options_ok": True}


def _use_cpu_options(options) -> bool:
  if not _state["cpu_options_ok"] or jax.default_backend() != "cpu":
    return False
  return not any(name in os.environ.get("XLA_FLAGS", "") for name in options)


def program(fn=None, *, options=None, **jit_kwargs):
  """``jax.jit(fn, **jit_kwargs)``, compiled with ``options`` (default ``CPU_OPTIONS``) when
  running on CPU. The result also has ``jitted()`` (the jitted function in use) and ``lower``."""
  if fn is None:
    return functools.partial(program, options=options, **jit_kwargs)
  options = dict(CPU_OPTIONS if options is None else options)
  plain = jax.jit(fn, **jit_kwargs)
  tuned = jax.jit(fn, compiler_options=options, **jit_kwargs)

  @functools.wraps(fn)
  def call(*args, **kwargs):
    if not _use_cpu_options(options):
      return plain(*args, **kwargs)
    try:
      return tuned(*args, **kwargs)
    except jax.errors.JaxRuntimeError as err:
      if not any(name in str(err) for name in options):
        raise
      logging.warning("this XLA rejects %s (%s); compiling with its defaults", options, err)
      _state["cpu_options_ok"] = False
      return plain(*args, **kwargs)

  call.jitted = lambda: tuned if _use_cpu_options(options) else plain
  call.lower = lambda *args, **kwargs: call.jitted().lower(*args, **kwargs)
  return call
