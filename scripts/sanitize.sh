#!/usr/bin/env bash
# Pre-release check: builds the toolkit with AddressSanitizer + UndefinedBehaviorSanitizer
# (+ LeakSanitizer, on by default with ASan on Linux) in build-asan/ and runs the C++ test tiers
# and the examples (docs/reliability.md). Too slow for every CI run on a 2-core machine.
#
#   scripts/sanitize.sh                 # all C++ tiers + e2e
#   scripts/sanitize.sh -L kernels      # extra ctest arguments
#   BUILD_DIR=/tmp/asan JOBS=2 scripts/sanitize.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build-asan}
JOBS=${JOBS:-2}
start=$(date +%s)
cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DNEURON_BUILD_BENCH=OFF \
  "-DCMAKE_CXX_FLAGS=-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
  "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined" >/dev/null
ninja -C "$BUILD_DIR" -j"$JOBS"
built=$(date +%s)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
args=("$@")
if (( ${#args[@]} == 0 )); then args=(-L "ir|passes|errors|kernels|runtime|e2e"); fi
status=0
(cd "$BUILD_DIR" && ctest --output-on-failure -j1 "${args[@]}") || status=$?
end=$(date +%s)
echo "sanitize: build $((built - start)) s, tests $((end - built)) s, status $status"
exit $status
