"""Everything CPU-specific, behind the one ``model.attention`` choice (``cpu_kernel``; ``auto``
picks it on CPU): the C++ attention kernel (``cache_attention.cc``; built, verified and
registered by ``build.py``, called by ``kernel.py``), its attention implementation
(``attention.py``), the feature-major decode step (``decode.py``), the XLA:CPU compiler
options of the hot programs (``compile_options.py``) and, process-wide rather than per model, the
retained-heap allocator settings that CPU-only entry points re-execute with (``allocator.py``)."""
