#!/usr/bin/env bash
# One process x T threads against T ranks x 1 thread (tensor parallelism, and with --ep-size T) on
# one `lucid synth` checkpoint: `lucid bench` decode steps at the given batches, the layouts run
# alternately for ROUNDS rounds in one run, each rank bound to its own core by mpirun. Writes each
# run's JSON and log to OUT and prints one line per run (step ms per batch, and for the ranked runs
# the time rank 0 and the slowest rank spent in collectives per step).
# Usage: tools/compare/ranks/run.sh LUCID CHECKPOINT OUT [ROUNDS=2] [BATCHES=1,32] [T=2]
set -euo pipefail
lucid=$1 ckpt=$2 out=$3 rounds=${4:-2} batches=${5:-1,32} t=${6:-2}
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
bench=(bench --model-path "$ckpt" --batch "$batches" --skip-prefill --json)
for r in $(seq 1 "$rounds"); do
  for layout in process tp tp_ep; do
    f=$out/$layout.$r
    case $layout in
      process) OMP_NUM_THREADS=$t "$lucid" "${bench[@]}" >"$f.json" 2>"$f.log" ;;
      tp) OMP_NUM_THREADS=1 mpirun --bind-to core -np "$t" "$lucid" "${bench[@]}" --tp-size "$t" \
            >"$f.json" 2>"$f.log" ;;
      tp_ep) OMP_NUM_THREADS=1 mpirun --bind-to core -np "$t" "$lucid" "${bench[@]}" \
               --tp-size "$t" --ep-size "$t" >"$f.json" 2>"$f.log" ;;
    esac
    python3 - "$layout" "$r" "$f.json" <<'PY'
import json, sys
layout, r, path = sys.argv[1:]
j = json.load(open(path))
cells = []
for d in j["decode"]:
    c = d.get("communication")
    comm = f" (collectives rank 0 {c['ms']:.2f} ms, slowest {max(c['ms_by_rank']):.2f})" if c else ""
    cells.append(f"batch {d['batch']}: {d['step_ms']:.2f} ms{comm}")
print(f"round {r} {layout:7s} | " + " | ".join(cells) + " | " + j["machine"]["line"])
PY
  done
done
