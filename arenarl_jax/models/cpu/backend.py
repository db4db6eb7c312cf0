"""The CPU backend: registers itself with ``models/backend.py``, which imports this module when
JAX runs on the CPU.

- compiler options: ``compile_options.CPU_OPTIONS`` for sampling and the judge,
  ``compile_options.TRAINING_OPTIONS`` for training (why: ``compile_options.py``);
- products: ``models/matmul.py``'s ``dense``/``dense_t`` with their backward written out;
- remat: ``models/remat.py``'s checkpoint tied to the block's output cotangent;
- attention: ``auto`` is ``cpu_kernel`` (``attention.py``);
- decode: the feature-major step of ``decode.py`` for the library's Transformer when its attention
  asks for it.
"""
from __future__ import annotations

from arenarl_jax.models import backend, matmul, remat
from arenarl_jax.models.cpu import compile_options, decode

CPU = backend.Backend(
    platform="cpu",
    dense=matmul.dense,
    dense_t=matmul.dense_t,
    remat=remat.checkpointed,
    default_attention="cpu_kernel",
    compiler_options={backend.INFERENCE: compile_options.CPU_OPTIONS,
                      backend.TRAINING: compile_options.TRAINING_OPTIONS},
    feature_major_decode=decode.FEATURE_MAJOR)

backend.register(CPU)
