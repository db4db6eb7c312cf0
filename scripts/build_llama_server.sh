#!/usr/bin/env bash
# Builds llama.cpp's own OpenAI-compatible server (`llama-server`: parallel slots, continuous
# batching) from the sources that the llama-cpp-python sdist vendors, for the judge benchmark's
# HTTP side (benchmarks/judge.py finds it here, or via $LLAMA_SERVER_BIN / --server_binary).
# About 13 minutes on 2 cores; offline apart from the sdist download from PyPI.
#   bash scripts/build_llama_server.sh            # -> .cache/llama-server/build/bin/llama-server
#   bash scripts/build_llama_server.sh OUT_DIR    # -> OUT_DIR/build/bin/llama-server
#   JOBS=4 bash scripts/build_llama_server.sh     # parallel compile jobs (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=0.3.36  # the llama-cpp-python version setup.sh --judge installs
OUT=${1:-.cache/llama-server}
JOBS=${JOBS:-2}
PY=.venv/bin/python
[ -x "$PY" ] || PY=${PYTHON:-python3}
command -v cmake >/dev/null || { echo "build_llama_server.sh: cmake not found" >&2; exit 1; }

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
BIN="$OUT/build/bin/llama-server"
if [ -x "$BIN" ]; then
  echo "$BIN already built"
  exit 0
fi
if [ ! -d "$OUT/src" ]; then
  "$PY" -m pip download -q --disable-pip-version-check --no-binary :all: --no-deps \
    "llama-cpp-python==$VERSION" -d "$OUT/sdist"
  mkdir -p "$OUT/src"
  tar -xzf "$OUT"/sdist/llama_cpp_python-"$VERSION".tar.gz -C "$OUT/src" --strip-components=1
fi
# The default -march=native build crashes on this platform (SIGILL in ggml's AMX code): the
# portable AVX2 flags; only the server target, without tests, examples, web UI, curl or OpenSSL.
cmake -S "$OUT/src/vendor/llama.cpp" -B "$OUT/build" -DCMAKE_BUILD_TYPE=Release \
  -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
  -DGGML_AVX512=OFF -DLLAVA_BUILD=OFF \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF
cmake --build "$OUT/build" --target llama-server -j"$JOBS"
"$BIN" --version
echo "built $BIN (benchmarks/judge.py finds it; elsewhere: export LLAMA_SERVER_BIN=$BIN)"
