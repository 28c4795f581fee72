#!/usr/bin/env bash
# The device check, for a machine with one NVIDIA GPU: builds (or reuses) a CUDA build, then runs
# the CUDA backend's device tests (with the three tiny fixtures end to end on the GPU against the
# CPU: cuda-reference against the reference, cuda-bf16act against fast-bf16act; cuda-fp8act's
# conformance and cuBLASLt FP8 GEMM), the NCCL communicator's, `lucid generate` and `lucid serve`
# (openai client) on
# the GPU after `lucid backends --self-test` (whose record they are gated on), the matmul paths'
# micro-benchmark and the GPU benchmark on the 16 GB synth preset, and writes what they printed,
# with the device line and the times, into the folder it is given. Bounded: each step has a
# timeout (the whole run is meant to take under 8 minutes with a build brought from elsewhere, and
# the benchmark, the longest step, comes last: what ran before is kept if the limit cuts it).
#   scripts/cuda_check.sh OUT_DIR [BUILD_DIR]     (BUILD_DIR default build; built when missing)
# A build brought from another machine comes as scripts/cuda_bundle.sh's .device/ (the binaries
# with their libraries, and wheels of the openai client): used when BUILD_DIR is not given.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/cuda_check.sh OUT_DIR [BUILD_DIR]}
build=${2:-build}
mkdir -p "$out"
log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$out/summary.txt"; }
log "machine: $(uname -m), $(nproc) cores; $(nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader 2>&1 | head -1)"
python=.venv-e2e/bin/python
if [ -z "${2:-}" ] && [ -f .device/lucid-cuda.tar.xz ]; then
  rm -rf /tmp/lucid-device && mkdir -p /tmp/lucid-device
  tar -C /tmp/lucid-device -xJf .device/lucid-cuda.tar.xz && build=/tmp/lucid-device/bundle/bin
  log "using the bundled build (.device/lucid-cuda.tar.xz): $build"
  missing=$(LD_LIBRARY_PATH=/tmp/lucid-device/bundle/lib:$(ls -d /usr/local/cuda/lib64 /usr/local/cuda/lib \
    /opt/torch/.venv/lib/python3*/site-packages/nvidia/*/lib 2>/dev/null | paste -sd:) \
    ldd "$build"/real/* 2>&1 | grep "not found" | sort -u)
  [ -n "$missing" ] && log "libraries not found: $missing"
fi
if [ -d .device/whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/lucid-site .device/whl/*.whl >>"$out/summary.txt" 2>&1 &&
    export PYTHONPATH=/tmp/lucid-site${PYTHONPATH:+:$PYTHONPATH} && python=python3
  log "python for the serve tests: $python ($($python -c 'import openai; print("openai", openai.__version__)' 2>&1))"
fi
if [ ! -x "$build/src/backends/cuda/lucid_backends_cuda_tests" ] && [ ! -x "$build/lucid_backends_cuda_tests" ]; then
  log "building $build with the CUDA backend"
  LUCID_CUDA=ON timeout 420 scripts/build.sh >"$out/build.txt" 2>&1 || { log "build failed (see build.txt)"; exit 1; }
fi
tests=$build/lucid_backends_cuda_tests
[ -x "$tests" ] || tests=$(find "$build" -name lucid_backends_cuda_tests -type f -perm -u+x | head -1)
rc=0
export LUCID_SOURCE_DIR=$(pwd)  # the fixtures of this checkout, wherever the build was made
log "device tests: $tests"
timeout 180 "$tests" >"$out/cuda_tests.txt" 2>&1 || rc=1
# The tiny fixtures end to end on the GPU (CudaModel.*, CudaBf16ActModel.*): one line each, max
# error and margins.
grep -E "^\[ cuda(-bf16act)? \]|FAILED|SKIPPED|Fp8LtGemm" "$out/cuda_tests.txt" | tee -a "$out/summary.txt" >/dev/null
tail -3 "$out/cuda_tests.txt" | tee -a "$out/summary.txt"
nccl=$build/lucid_dist_nccl_tests
[ -x "$nccl" ] || nccl=$(find "$build" -name lucid_dist_nccl_tests -type f -perm -u+x | head -1)
if [ -n "$nccl" ]; then
  log "NCCL communicator tests (a world of one GPU): $nccl"
  timeout 60 "$nccl" >"$out/nccl_tests.txt" 2>&1 || rc=1
  tail -3 "$out/nccl_tests.txt" | tee -a "$out/summary.txt"
fi
# The self-test first: it is the record (under $out/cache) that generate and serve gate their
# kernels on. When a kernel failed, the gate refuses them (generate.txt shows the refusal); they
# then run again with --allow-unverified-kernels so the rest is still measured.
export XDG_CACHE_HOME="$out/cache"
log "lucid backends --self-test"
timeout 240 "$build/lucid" backends --self-test >"$out/self_test.txt" 2>&1 || rc=1
grep -E "cuda|self-test record" "$out/self_test.txt" | tee -a "$out/summary.txt" >/dev/null
gate=()
if ! timeout 60 "$build/lucid" generate --model-path tests/fixtures/models/tiny_glm_moe_dsa \
    --prompt-ids 3,14 --max-new-tokens 1 --device cuda >/dev/null 2>"$out/gate.txt"; then
  log "the self-test gate refused the GPU plan: $(grep -m1 -o 'the plan.s kernels.*' "$out/gate.txt" | cut -c1-400)"
  gate=(--allow-unverified-kernels)
  export LUCID_E2E_GPU_EXTRA_FLAGS=--allow-unverified-kernels
fi
grep -m2 "kernels\|self-test" "$out/gate.txt" | tee -a "$out/summary.txt" >/dev/null
# lucid generate on each tiny fixture, on the GPU and on the CPU: cuda-reference (--dtype float32)
# against the CPU reference (both exact f32), cuda-bf16act (--dtype bfloat16) against the CPU's
# fast-bf16act; the token ids side by side (a difference is a near-tie unless CudaModel.* or
# CudaBf16ActModel.* above failed too).
for m in tiny_deepseek_v3 tiny_deepseek_v32 tiny_glm_moe_dsa; do
  gen=("$build/lucid" generate --model-path "tests/fixtures/models/$m" --prompt-ids 3,14,15,92,65,35
       --max-new-tokens 12 --cpu-wait-policy environment)
  for pair in "float32 reference" "bfloat16 fast-bf16act"; do
    set -- $pair
    gpu=$(timeout 60 "${gen[@]}" --device cuda --dtype "$1" "${gate[@]}" 2>>"$out/generate.txt") || rc=1
    cpu=$(timeout 60 "${gen[@]}" --device cpu --cpu-kernels "$2" 2>>"$out/generate.txt") || rc=1
    same=differ; [ -n "$gpu" ] && [ "$gpu" = "$cpu" ] && same=equal
    log "generate $m $1: cuda [$gpu] cpu $2 [$cpu]: $same"
  done
done
# cuda-fp8act (FP8 activations, cuBLASLt's block-scaled FP8 GEMM) on the FP8 block fixture, beside
# the CPU's fast-bf16act: e4m3 activations are coarser than bf16, so a differing token is expected
# where the margin is small; the conformance rows and Fp8LtGemm* in cuda_tests.txt are the check.
gen=("$build/lucid" generate --model-path tests/fixtures/quant/tiny_deepseek_v32_fp8
     --prompt-ids 3,14,15,92,65,35 --max-new-tokens 12 --cpu-wait-policy environment)
gpu=$(timeout 60 "${gen[@]}" --device cuda --dtype bfloat16 --fp8-gemm-backend cuda-fp8act \
      --moe-runner-backend cuda-fp8act "${gate[@]}" 2>>"$out/generate.txt") || rc=1
cpu=$(timeout 60 "${gen[@]}" --device cpu --cpu-kernels fast-bf16act 2>>"$out/generate.txt") || rc=1
log "generate tiny_deepseek_v32_fp8 cuda-fp8act: cuda [$gpu] cpu fast-bf16act [$cpu]"
# lucid serve --device cuda on the tiny fixtures with the openai client (tests/e2e/test_serve_cuda.py).
# What the plan is on this machine's GPU (--target local), for the memory lines of serve's log.
timeout 60 "$build/lucid" explain --model-path tests/fixtures/models/tiny_glm_moe_dsa \
  >"$out/explain_local.txt" 2>&1 || rc=1
grep -E "^Target:|device |dtype |gpu-memory|max-total-tokens|weights |KV pool" "$out/explain_local.txt" \
  | tee -a "$out/summary.txt" >/dev/null
log "serve on the GPU: tests/e2e/test_serve_cuda.py"
LUCID_BINARY="$build/lucid" timeout 200 "$python" -B tests/e2e/test_serve_cuda.py \
  >"$out/serve_cuda.txt" 2>&1 || rc=1
grep -E "^\[ cuda \]|^(OK|FAILED)|^Ran |skipped" "$out/serve_cuda.txt" | tee -a "$out/summary.txt" >/dev/null
# The matmul paths against each other (the weight-only kernel, dequantize + cuBLAS, f32 SGEMM)
# at 16 to 1024 tokens: the figures that place cuda_weight_mma.h's kWeightMmaMaxTokens.
mm=$build/lucid_cuda_matmul_bench
[ -x "$mm" ] || mm=$(find "$build" -name lucid_cuda_matmul_bench -type f -perm -u+x | head -1)
if [ -n "$mm" ]; then
  log "matmul paths: $mm"
  timeout 120 "$mm" --benchmark_min_time=0.1 >"$out/matmul_bench.txt" 2>&1 || rc=1
  grep -E "^(Policy|Wmma|F32)/" "$out/matmul_bench.txt" | awk '{print $1, $2, $3, $NF}' \
    | tee -a "$out/summary.txt" >/dev/null
fi
# The GPU benchmark (lucid bench --device cuda) on the 16 GB synth preset, written here (weights
# far beyond L2), last: what ran before is kept when the time runs out.
ck=/tmp/lucid-synth-16g
log "synth --preset 16g into $ck"
timeout 240 "$build/lucid" synth --arch glm_moe_dsa --preset 16g --out "$ck" >>"$out/bench_cuda.txt" 2>&1 || rc=1
log "lucid bench --device cuda"
timeout 300 "$build/lucid" bench --device cuda --model-path "$ck" --prompt-len 512 --gen-len 4 \
  --repeats 2 --json >"$out/bench_cuda.json" 2>>"$out/bench_cuda.txt" || rc=1
grep -E "read |prefill|decode batch|model " "$out/bench_cuda.txt" | tee -a "$out/summary.txt" >/dev/null
log "done, rc=$rc"
exit $rc
