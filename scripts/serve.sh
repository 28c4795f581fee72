#!/usr/bin/env bash
# Sets up, builds Release and serves the bundled default model over HTTP: the OpenAI API at
# http://127.0.0.1:30000/v1, SGLang's /generate, /health, /metrics (docs/SERVING.md).
# The default model is the tiny random-weight GLM-5 checkpoint under tests/fixtures, paired (in
# build/serve-model/) with a byte-level tokenizer and a small chat template so that text and chat
# requests work; its output is random bytes. LUCID_MODEL=<dir> serves another model directory.
# Extra arguments go to `lucid serve` (e.g. --port 8000 --api-key secret). Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
if [ -n "${LUCID_MODEL:-}" ]; then
  exec build/lucid serve --model-path "$LUCID_MODEL" "$@"
fi
MODEL=$(python3 -c 'import sys; sys.path.insert(0, "tests/e2e"); import lucid_server as ls; print(ls.make_model_dir("build/serve-model"))')
# A 65,536-token KV pool is plenty for the tiny model (on CPU an unset --max-total-tokens would hold
# max-running-requests x context-length, rule kv-capacity-cpu-requests).
exec build/lucid serve --model-path "$MODEL" --served-model-name tiny-glm5 --max-total-tokens 65536 "$@"
