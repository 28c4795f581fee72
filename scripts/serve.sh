#!/usr/bin/env bash
# Sets up, builds Release and runs lucid on the bundled default model (a tiny random-weight GLM-5
# checkpoint under tests/fixtures). Until the HTTP server exists this runs a greedy generation.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
MODEL="${LUCID_MODEL:-tests/fixtures/models/tiny_glm_moe_dsa}"
exec build/lucid generate --model-path "$MODEL" --prompt-ids 1,2,3,4,5 --max-new-tokens 16 "$@"
