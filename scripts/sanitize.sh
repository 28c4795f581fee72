#!/usr/bin/env bash
# Sanitizer runs, each in its own build directory (git-ignored), -O1 -g (CMake LUCID_SANITIZE):
#
#   scripts/sanitize.sh asan   AddressSanitizer + UndefinedBehaviorSanitizer, build-asan/:
#       the unit tests of core, formats, tokenizer, config, runtime and server, the C++ e2e tests
#       (lucid_e2e_tests: the real `lucid` binary, instrumented) and the e2e suites serve_errors
#       and serve_threads (the instrumented `lucid serve` under the openai client, when
#       .venv-e2e exists). Leak checking is on.
#   scripts/sanitize.sh tsan   ThreadSanitizer, build-tsan/: the runtime and server unit tests
#       (engine thread, HTTP threads, aborts, shutdown). libgomp is not instrumented, so these run
#       with OMP_NUM_THREADS=1: TSAN sees the engine's and the server's own threads, not the
#       kernels' OpenMP teams.
#
# Left out to fit CI's hour on 2 cores (.ci/run runs scripts/test.sh first, ~23 min): the models,
# backends_cpu, ops, grammar and bench unit tests (kernel arithmetic, covered by the ordinary
# build's conformance suites and the fuzzers' ASan+UBSan builds), the LUCID_CPU_ISA cap reruns
# (each binary runs at this machine's best level only) and the e2e suites serve_api, serve_agent,
# serve_tools, serve_structured. Each run prints its build and test times; they are not yet
# measured to completion on the 2-core box, so .ci/run does not call this yet.
# Environment: JOBS (build parallelism, default nproc); ccache is used when installed.
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
    unit=(formats tokenizer core server runtime)
    extra_targets=()
    prebuilt=(xgrammar)
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
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1"
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
