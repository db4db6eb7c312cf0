"""Everything CPU-specific, behind the one ``model.attention`` choice (``cpu_kernel``; ``auto``
picks it on CPU): the C++ attention kernel (``cache_attention.cc``; built, verified and
registered by ``build.py``, called by ``kernel.py``), its attention implementation
(``attention.py``), the feature-major decode step (``decode.py``) and the XLA:CPU compiler
options of the hot programs (``compile_options.py``)."""
