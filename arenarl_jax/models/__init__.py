"""The decoder family (Llama, Qwen2, Qwen3) in Flax NNX, its weights and its backend seam.

  config.py, transformer.py   hyper-parameters and presets; the model (``make_model``)
  backend.py                  the one seam: compilation and the hot operations, chosen once
  loading.py                  one entry point for weights: embedded SmolLM2, GGUF, HF directory
  settings.py                 ``model.attention`` and ``model.remat`` names (import-free)
  cpu/                        C++ kernels and XLA:CPU settings, reached only through backend.py

Modules are imported by name; importing this package loads nothing (configs read settings.py).
"""
