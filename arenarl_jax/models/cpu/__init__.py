"""Everything CPU-specific, behind the one ``model.attention`` choice (``cpu_kernel``; ``auto``
picks it on CPU): the C++ attention kernels (``cache_attention.cc``: against a KV cache;
``causal_attention.cc``: the training attention of full causal sequences, forward and backward;
both on the tiles of ``attention_tiles.h``; built, verified and registered by ``build.py``, called by
``kernel.py``), their attention implementation (``attention.py``), the feature-major decode step
(``decode.py``), the XLA:CPU compiler options of the hot programs (``compile_options.py``) and,
process-wide rather than per model, the retained-heap allocator settings that CPU-only entry
points re-execute with (``allocator.py``). ``backend.py`` registers them as the CPU's backend with
``models/backend.py``, the one seam the rest of the package goes through: nothing outside
``models/`` imports this package. Importing it imports nothing (``allocator.py`` runs before JAX
starts)."""
