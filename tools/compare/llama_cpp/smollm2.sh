#!/usr/bin/env bash
# lucid next to llama.cpp on SmolLM2-135M-Instruct's Q4_1 GGUF (the file scripts/setup.sh puts in
# .cache/models; both engines read the same file): run.sh with that one PAIRS row. Prefill 512,
# decode at batch 1/8/32 (ctx 512), alternating rounds, uptime and /usr/bin/time around every run.
#
#   LLAMA_BIN=.../build-llama/bin bash tools/compare/llama_cpp/smollm2.sh        # 2 threads, 2 rounds
#   LUCID_ISA=avx2 ROUNDS=3 LLAMA_BIN=... bash tools/compare/llama_cpp/smollm2.sh
# Every other run.sh variable (LUCID, THREADS, ROUNDS, LUCID_KERNELS, OUT, ...) passes through.
set -u
here=$(cd "$(dirname "$0")" && pwd)
MODEL=${MODEL:-.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf}
[ -f "$MODEL" ] || { echo "missing $MODEL (scripts/setup.sh fetches it)" >&2; exit 1; }
PAIRS="smollm2-q4_1:$MODEL:$MODEL" FORMATS=smollm2-q4_1 CKPT=- GGUF=- exec bash "$here/run.sh"
