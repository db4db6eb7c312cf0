"""XLA:CPU compiler options for the hot jitted programs (the CPU backend's, ``backend.py``;
``models/backend.py``'s ``jit`` applies them).

Why: on CPU, XLA hands matrix products to the YNNPACK library and by default also fuses the
surrounding reductions and element-wise ops into the same library call (e.g. softmax max, exp, sum
and the value product of attention become one YNNPACK graph). Those fused graphs run
single-threaded and slowly; sending only individual dots to the library and leaving the rest to
XLA's own emitters makes decode and the local judge faster (``CPU_OPTIONS``; see
benchmarks/README.md, Sampler and Judge). The training step and its teacher-forced pass take
``TRAINING_OPTIONS``: no library fusion at all, so every product runs on XLA's Eigen matmul, which
runs the step's large [tokens, features] x [features, features'] products faster than YNNPACK
does (see benchmarks/README.md, Train step). Other backends compile with their defaults.
"""
from __future__ import annotations

CPU_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}
TRAINING_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": ""}
