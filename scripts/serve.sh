#!/usr/bin/env bash
# Sets up, builds Release and serves a model over HTTP: the OpenAI API at
# http://127.0.0.1:30000/v1, SGLang's /generate, /health, /metrics (docs/SERVING.md).
# The default model is SmolLM2-135M-Instruct (Apache-2.0, a Q4_1 GGUF file that scripts/setup.sh
# puts in .cache/models/): a real instruction-tuned model, tokenizer and chat template included.
# LUCID_MODEL=<dir or .gguf file> serves another model; LUCID_MODEL=tiny-glm5 serves the tiny
# random-weight GLM-5 checkpoint under tests/fixtures (paired, in build/serve-model/, with a
# byte-level tokenizer and a small chat template; its output is random bytes).
# Extra arguments go to `lucid serve` (e.g. --port 8000 --api-key secret). Ctrl-C stops it.
# LUCID_TP=N serves over N ranks (tensor parallelism, the DeepSeek-V3 family only;
# docs/PARALLEL.md): a two-rank example, one kernel thread per rank,
#   LUCID_MODEL=tiny-glm5 LUCID_TP=2 scripts/serve.sh
# runs `OMP_NUM_THREADS=1 mpirun --enable-recovery -np 2 build/lucid serve --tp-size 2 ...`: rank 0
# serves HTTP, rank 1 runs its shard of every step. (As root, mpirun also wants
# OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1.) Ctrl-C then reaches every rank
# through mpirun, which ends them; `kill -TERM <rank 0's pid>` shuts down gracefully.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
MODEL=${LUCID_MODEL:-smollm2}
TP=${LUCID_TP:-1}
LUCID=(build/lucid)
if [ "$TP" -gt 1 ]; then
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
  LUCID=(mpirun --enable-recovery -np "$TP" build/lucid)
  set -- --tp-size "$TP" "$@"
fi
case "$MODEL" in
  smollm2)
    # 8,192 tokens of context (the model's own) and a 65,536-token KV pool.
    exec "${LUCID[@]}" serve --model-path .cache/models/SmolLM2-135M-Instruct.Q4_1.gguf \
      --served-model-name smollm2-135m-instruct --max-total-tokens 65536 "$@" ;;
  tiny-glm5)
    DIR=$(python3 -c 'import sys; sys.path.insert(0, "tests/e2e"); import lucid_server as ls; print(ls.make_model_dir("build/serve-model"))')
    # A 65,536-token KV pool is plenty for the tiny model (on CPU an unset --max-total-tokens would
    # hold max-running-requests x context-length, rule kv-capacity-cpu-requests).
    exec "${LUCID[@]}" serve --model-path "$DIR" --served-model-name tiny-glm5 \
      --max-total-tokens 65536 "$@" ;;
  *)
    exec "${LUCID[@]}" serve --model-path "$MODEL" "$@" ;;
esac
