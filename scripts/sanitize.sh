#!/usr/bin/env bash
# Pre-release check: builds the toolkit with sanitizers and runs the C++ test tiers and the
# examples (docs/reliability.md). Too slow for every CI run on a 2-core machine.
#
#   scripts/sanitize.sh                 # ASan + UBSan (+ LeakSanitizer): all C++ tiers + e2e
#   scripts/sanitize.sh -L exec      # extra ctest arguments
#   scripts/sanitize.sh --thread        # ThreadSanitizer: the runtime tier (threads, processes,
#                                       # the compile cache) in build-tsan/
#   BUILD_DIR=/tmp/asan JOBS=2 scripts/sanitize.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
JOBS=${JOBS:-2}
args=("$@")
if (( ${#args[@]} > 0 )) && [[ ${args[0]} == --thread ]]; then
  args=("${args[@]:1}")
  BUILD_DIR=${BUILD_DIR:-$ROOT/build-tsan}
  FLAGS="-fsanitize=thread -fno-omit-frame-pointer"
  default_labels="runtime"
  export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
else
  BUILD_DIR=${BUILD_DIR:-$ROOT/build-asan}
  FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
  default_labels="ir|passes|errors|exec|runtime|e2e"
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
fi
start=$(date +%s)
cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DNEURON_BUILD_BENCH=OFF -DNEURON_BUILD_PYTHON=OFF \
  "-DCMAKE_CXX_FLAGS=$FLAGS" "-DCMAKE_EXE_LINKER_FLAGS=${FLAGS%% -fno*}" >/dev/null
ninja -C "$BUILD_DIR" -j"$JOBS"
built=$(date +%s)
if (( ${#args[@]} == 0 )); then args=(-L "$default_labels"); fi
status=0
(cd "$BUILD_DIR" && ctest --output-on-failure -j1 "${args[@]}") || status=$?
end=$(date +%s)
echo "sanitize: build $((built - start)) s, tests $((end - built)) s, status $status"
exit $status
