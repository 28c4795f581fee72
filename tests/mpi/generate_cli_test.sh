#!/usr/bin/env bash
# `mpirun -np 2 lucid generate --tp-size 2` (and with --ep-size 2) prints the same greedy tokens as
# the single-process command, for the three tiny DeepSeek-family fixtures, with the reference
# kernels; `--tp-size 2` without a launcher is refused with exit code 2 and a line naming mpirun.
# Usage: generate_cli_test.sh LUCID MPIRUN FIXTURES_DIR (ctest mpi/generate_cli).
set -u
lucid=$1 mpirun=$2 fixtures=$3
ids=1,17,42,99,3,200,7,64,128,5,250,33,81,12,9,77
fail=0
for m in tiny_glm_moe_dsa tiny_deepseek_v32 tiny_deepseek_v3; do
  args=(generate --model-path "$fixtures/$m" --prompt-ids $ids --max-new-tokens 10
        --cpu-kernels reference)
  want=$("$lucid" "${args[@]}") || { echo "FAIL $m: single-process run failed"; fail=1; continue; }
  for ep in 1 2; do
    got=$(timeout 120 "$mpirun" --oversubscribe -np 2 "$lucid" "${args[@]}" --tp-size 2 \
          --ep-size $ep)
    rc=$?
    if [ $rc -ne 0 ] || [ "$got" != "$want" ]; then
      echo "FAIL $m tp 2 ep $ep (exit $rc): got '$got', want '$want'"
      fail=1
    else
      echo "ok $m tp 2 ep $ep: $got"
    fi
  done
done
err=$("$lucid" generate --model-path "$fixtures/tiny_deepseek_v3" --prompt-ids 1,2 \
      --max-new-tokens 1 --tp-size 2 2>&1 >/dev/null)
rc=$?
if [ $rc -ne 2 ] || [[ "$err" != *"mpirun -np 2"* ]]; then
  echo "FAIL: --tp-size 2 without mpirun: exit $rc, '$err'"
  fail=1
else
  echo "ok refusal: $err"
fi
exit $fail
