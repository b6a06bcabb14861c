#!/usr/bin/env bash
# Builds and runs the libFuzzer target fuzz/fuzz_ir_text.cpp (IR text parser + verifier +
# compile pipeline) with clang-14 and ASan/UBSan, outside the main build (docs/reliability.md).
#
#   scripts/fuzz_libfuzzer.sh [SECONDS]        # default 120; 0 only builds
#   BUILD_DIR=... JOBS=2 scripts/fuzz_libfuzzer.sh 600
#
# New interesting inputs go to $BUILD_DIR/corpus (the seed corpus fuzz/corpus/ir_text is
# read-only input); crashes are written to $BUILD_DIR/crash-* with the input that reproduces them:
#   $BUILD_DIR/fuzz_ir_text $BUILD_DIR/crash-<hash>
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SECONDS_TO_RUN=${1:-120}
BUILD_DIR=${BUILD_DIR:-$ROOT/build-libfuzzer}
JOBS=${JOBS:-2}
CXX=${CXX_FUZZ:-clang++-14}
mkdir -p "$BUILD_DIR/obj" "$BUILD_DIR/corpus"
FLAGS=(-std=c++20 -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined
       -fno-sanitize-recover=undefined -I"$ROOT/dsl/base/include" -I"$ROOT/dsl/include" -I"$ROOT/codegen/include"
       -I"$ROOT/runtime/include")
# Only the front half of the toolkit: IR, text form, passes and the target tables.
SOURCES=$(ls "$ROOT"/dsl/base/src/*.cpp "$ROOT"/dsl/src/ir/*.cpp "$ROOT"/codegen/src/*.cpp)
objs=()
for src in $SOURCES; do
  obj="$BUILD_DIR/obj/$(echo "${src#$ROOT/}" | tr / _).o"
  objs+=("$obj")
  if [[ ! -f "$obj" || "$src" -nt "$obj" ]]; then
    echo "$CXX ${src#$ROOT/}"
    "$CXX" "${FLAGS[@]}" -fsanitize=fuzzer-no-link -c "$src" -o "$obj" &
    while (( $(jobs -r | wc -l) >= JOBS )); do wait -n; done
  fi
done
wait
"$CXX" "${FLAGS[@]}" -fsanitize=fuzzer "$ROOT/fuzz/fuzz_ir_text.cpp" "${objs[@]}" -lfmt \
  -o "$BUILD_DIR/fuzz_ir_text"
echo "built $BUILD_DIR/fuzz_ir_text"
(( SECONDS_TO_RUN > 0 )) || exit 0
cd "$BUILD_DIR"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ./fuzz_ir_text -max_total_time="$SECONDS_TO_RUN" -timeout=10 -rss_limit_mb=2048 \
  -max_len=8192 -dict="$ROOT/fuzz/ir_text.dict" -print_final_stats=1 corpus "$ROOT/fuzz/corpus/ir_text" 2>&1 |
  tail -n 40
