#!/usr/bin/env bash
# `mpirun -np 2 lucid bench --tp-size 2 [--ep-size 2] --json` on the tiny GLM-5 and DeepSeek-V3
# fixtures: one JSON document (rank 0's; the worker prints nothing), a world of 2 MPI ranks, and
# for each decode batch the time each rank spent in collectives, below the step's time, with the
# collectives the sharding implies: per layer one all-reduce after attention and one after the
# MLP / MoE block, plus the vocabulary-parallel embedding's all-reduce and lm_head's all-gather
# (2 * layers + 2), carrying bytes in proportion to the batch. A single-process run has no
# communication figures.
# Usage: bench_tp_test.sh LUCID MPIRUN FIXTURES_DIR (ctest mpi/bench_tp).
set -u
lucid=$1 mpirun=$2 fixtures=$3
fail=0
check() {  # check NAME EXPECT_TP JSON_FILE CONFIG
  python3 - "$@" <<'PY'
import json, sys
name, tp, path, config = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
with open(path) as f:
    j = json.load(f)  # exactly one document: a second (a worker's) would not parse
layers = json.load(open(config))["num_hidden_layers"]
errors = []
if j["world"]["ranks"] != tp:
    errors.append(f"world {j['world']}, want {tp} ranks")
per_batch = {}
for d in j["decode"]:
    c = d.get("communication")
    if tp == 1:
        if c is not None:
            errors.append(f"batch {d['batch']}: communication figures in a single-process run")
        continue
    if c is None:
        errors.append(f"batch {d['batch']}: no communication figures")
        continue
    if len(c["ms_by_rank"]) != tp or min(c["ms_by_rank"]) <= 0:
        errors.append(f"batch {d['batch']}: ms_by_rank {c['ms_by_rank']}")
    if not 0 < c["ms"] < d["step_ms"]:
        errors.append(f"batch {d['batch']}: {c['ms']} ms in collectives of a {d['step_ms']} ms step")
    if c["collectives_per_step"] != 2 * layers + 2:
        errors.append(f"batch {d['batch']}: {c['collectives_per_step']} collectives, want "
                      f"{2 * layers + 2}")
    per_batch[d["batch"]] = c["bytes_per_step"]
if tp > 1 and per_batch.get(4) != 4 * per_batch.get(1, -1):
    errors.append(f"bytes per step by batch {per_batch}: not in proportion to the batch")
print(("FAIL " if errors else "ok ") + name + (": " + "; ".join(errors) if errors else f": {per_batch}"))
sys.exit(1 if errors else 0)
PY
}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for m in tiny_glm_moe_dsa tiny_deepseek_v3; do
  args=(bench --model-path "$fixtures/$m" --batch 1,4 --gen-len 3 --prompt-len 64 --skip-prefill
        --json)
  "$lucid" "${args[@]}" >"$out" 2>/dev/null || { echo "FAIL $m: single-process bench failed"; fail=1; }
  check "$m single process" 1 "$out" "$fixtures/$m/config.json" || fail=1
  for ep in 1 2; do
    timeout 120 "$mpirun" --oversubscribe -np 2 "$lucid" "${args[@]}" --tp-size 2 --ep-size $ep \
      >"$out" 2>/dev/null || { echo "FAIL $m tp 2 ep $ep: exit $?"; fail=1; continue; }
    check "$m tp 2 ep $ep" 2 "$out" "$fixtures/$m/config.json" || fail=1
  done
done
exit $fail
