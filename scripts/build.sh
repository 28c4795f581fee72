#!/usr/bin/env bash
# Configures and builds into build/ (Release by default). Extra arguments go to cmake's configure step.
# The CUDA backend (src/backends/cuda) is built when the CUDA toolkit's nvcc is found (on PATH or in
# /usr/local/cuda/bin), which needs no GPU: LUCID_CUDA=OFF skips it, LUCID_CUDA=ON insists on it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cuda_args=()
nvcc=$(command -v nvcc || true)
[ -n "$nvcc" ] || { [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc; } || true
case "${LUCID_CUDA:-auto}" in
  OFF | off | 0) cuda_args=(-DLUCID_CUDA=OFF) ;;
  ON | on | 1)
    [ -n "$nvcc" ] || { echo "build: LUCID_CUDA=ON but no nvcc (CUDA toolkit) found" >&2; exit 2; }
    cuda_args=(-DLUCID_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc") ;;
  auto)
    if [ -n "$nvcc" ]; then
      cuda_args=(-DLUCID_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc")
    else
      echo "build: no nvcc found, building without the CUDA backend"
      cuda_args=(-DLUCID_CUDA=OFF)
    fi ;;
  *) echo "build: LUCID_CUDA must be ON, OFF or auto, not \"$LUCID_CUDA\"" >&2; exit 2 ;;
esac
cmake -S . -B build -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" "${cuda_args[@]}" "$@" >/dev/null
cmake --build build -j "$(nproc)"
