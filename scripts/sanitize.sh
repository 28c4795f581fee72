#!/usr/bin/env bash
# Sanitizer runs, each in its own build directory (git-ignored), -O1 -g1 (CMake LUCID_SANITIZE):
#
#   scripts/sanitize.sh asan   AddressSanitizer + UndefinedBehaviorSanitizer, build-asan/: the unit
#       tests of formats, tokenizer, core and server: the code that reads what comes from outside
#       (checkpoint headers, config.json, GGUF, tokenizer.json, chat templates, HTTP requests).
#       Leak checking is on. xgrammar and the kernel arithmetic (ops, backends_cpu, models) come
#       uninstrumented from build/ (the ordinary build's conformance suites cover the kernels).
#   scripts/sanitize.sh tsan   ThreadSanitizer, build-tsan/: the runtime and server unit tests
#       (engine thread, HTTP threads, aborts, shutdown). The model and its kernels (formats, ops,
#       backends_cpu, models) and xgrammar come uninstrumented from build/: they run on the engine
#       thread alone, and instrumenting them cost 11 of the 16 minutes of the runtime tests.
#       libgomp is not instrumented, so these run with OMP_NUM_THREADS=1 (TSan would take its
#       fork and join for races): TSan sees the engine's and the server's own threads.
#
# Chosen to fit CI on 2 cores after scripts/test.sh (1,896 s): .ci/run runs both side by side
# (asan JOBS=2, tsan JOBS=1). Cold (no ccache) CPU seconds, user + sys, per object on the shared
# 2-core box (docs/DESIGN.md has the table; some asan parts estimated from tsan's build of the
# same files): tsan ~710 s (build ~605, tests ~106, measured), asan ~1,520 s (build ~1,370,
# tests ~150), ~2,230 s together: ~19 min of 2-core wall, ~50 min for all of .ci/run.
# Left out: the runtime tests under ASan (TSan runs them), the models, backends_cpu, ops,
# grammar, config and bench unit tests (kernel arithmetic and the resolver: the ordinary build's
# conformance suites; the parsers are also fuzzed with ASan+UBSan), the LUCID_CPU_ISA reruns and
# the instrumented `lucid` binary with its e2e suites (lucid_e2e_tests, serve_errors,
# serve_threads), which need cli, config, bench, models and the kernels instrumented:
# EXTRA=e2e scripts/sanitize.sh asan adds them (not in CI; not measured).
# Environment: JOBS (build parallelism, default nproc); PREBUILT_DIR (default build/; empty:
# compile everything here); ccache is used when installed.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-}
shift || true
jobs=${JOBS:-$(nproc)}
root=$(pwd)
case "$kind" in
  asan)
    dir=build-asan
    san=address,undefined
    unit=(formats tokenizer core server)
    extra_targets=()
    prebuilt=(xgrammar ops backends_cpu models)
    if [ "${EXTRA:-}" = e2e ]; then
      extra_targets=(lucid lucid_e2e_tests)
      prebuilt=(xgrammar)
    fi
    ;;
  tsan)
    dir=build-tsan
    san=thread
    unit=(runtime server)
    extra_targets=()
    prebuilt=(xgrammar formats ops backends_cpu models)
    ;;
  *)
    echo "usage: scripts/sanitize.sh asan|tsan" >&2
    exit 2
    ;;
esac

launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
# CPU seconds (user + sys) of this shell's finished children so far: what CI's cores spend.
# (`times` in this shell, not in a subshell, which would count from zero.)
cpu_now() {
  local f
  f=$(mktemp)
  times >"$f"
  cpu=$(tail -1 "$f" | awk '{ t = 0; for (i = 1; i <= 2; ++i) { split($i, a, "m"); t += a[1] * 60 + a[2] }
                              printf "%d", t }')
  rm -f "$f"
}
# The uninstrumented libraries come from the ordinary build in build/ (scripts/build.sh, or
# scripts/test.sh as .ci/run runs it first); PREBUILT_DIR= (empty) compiles them here instead.
prebuilt_dir=${PREBUILT_DIR-build}
prebuilt_args=(-DLUCID_PREBUILT= -DLUCID_PREBUILT_DIR=)
if [ -n "$prebuilt_dir" ]; then
  if [ ! -f "$prebuilt_dir/CMakeCache.txt" ]; then
    echo "sanitize $kind: $prebuilt_dir/ is not a build directory (run scripts/build.sh, or set" \
      "PREBUILT_DIR= to compile everything here)" >&2
    exit 2
  fi
  libs=()
  for m in "${prebuilt[@]}"; do libs+=("lucid_$m"); done
  cmake --build "$prebuilt_dir" -j "$jobs" --target "${libs[@]}"
  prebuilt_args=(-DLUCID_PREBUILT="$(IFS=';'; echo "${prebuilt[*]}")"
    -DLUCID_PREBUILT_DIR="$(cd "$prebuilt_dir" && pwd)")
  echo "sanitize $kind: not instrumented, from $prebuilt_dir/: ${prebuilt[*]}"
fi
start=$(date +%s)
cpu_now
base_cpu=$cpu
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DLUCID_SANITIZE="$san" \
  -DLUCID_BUILD_BENCHMARKS=OFF "${prebuilt_args[@]}" "${launcher[@]}" "$@" >/dev/null
export LUCID_SOURCE_DIR="$root"
# allocator_may_return_null: the allocator tests ask for sizes no machine has and expect an error.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:allocator_may_return_null=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$root/scripts/tsan.supp"
if [ "$kind" = tsan ]; then export OMP_NUM_THREADS=1; fi

# Each test binary is built, then run, before the next one is built: the first findings come
# early. CPU seconds are summed per phase (build / tests).
failed=()
build_cpu=0
test_cpu=0
build() {  # targets...
  local before
  cpu_now
  before=$cpu
  cmake --build "$dir" -j "$jobs" --target "$@"
  cpu_now
  build_cpu=$((build_cpu + cpu - before))
}
run() {  # name, command...
  local name=$1 t0 rc=0 before
  shift
  t0=$(date +%s)
  cpu_now
  before=$cpu
  echo "== sanitize $kind: $name"
  "$@" || rc=$?
  cpu_now
  test_cpu=$((test_cpu + cpu - before))
  echo "== sanitize $kind: $name: exit $rc, $(($(date +%s) - t0)) s, CPU $((cpu - before)) s"
  if [ "$rc" -ne 0 ]; then failed+=("$name"); fi
}
for m in "${unit[@]}"; do
  build "lucid_${m}_tests"
  bin=$(find "$dir" -name "lucid_${m}_tests" -type f -perm -u+x | head -1)
  run "lucid_${m}_tests" "$bin" --gtest_brief=1
done
if [ "${#extra_targets[@]}" -gt 0 ]; then
  build "${extra_targets[@]}"
  run lucid_e2e_tests "$dir/tests/e2e/lucid_e2e_tests" --gtest_brief=1
  if [ -x .venv-e2e/bin/python ]; then
    for suite in serve_errors serve_threads; do
      run "e2e_$suite" env LUCID_BINARY="$root/$dir/lucid" .venv-e2e/bin/python -B \
        "tests/e2e/test_$suite.py"
    done
  else
    echo "sanitize $kind: no .venv-e2e (scripts/setup.sh makes it): the Python e2e suites skipped"
  fi
fi
echo "sanitize $kind: $(($(date +%s) - start)) s; CPU: build ${build_cpu} s, tests ${test_cpu} s"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "sanitize $kind: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "sanitize $kind: clean"
