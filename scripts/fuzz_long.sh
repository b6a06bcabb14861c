#!/usr/bin/env bash
# Long differential fuzz run (docs/reliability.md): random kernels on the simulator (and the
# native JIT with --native) checked against the NumPy reference tests/fuzz/reference.py.
# Failing kernels are shrunk and saved to tests/fuzz/regressions/ (review, then commit them).
#
#   scripts/fuzz_long.sh [SECONDS] [SEED] [--native]     # default 3600 s, seed from the clock
#   BUILD_DIR=build scripts/fuzz_long.sh 600 12345
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
SECS=${1:-3600}
SEED=${2:-$(( $(date +%s) % 1000000 * 1000 ))}
shift $(( $# < 2 ? $# : 2 ))
ninja -C "$BUILD_DIR" -j"${JOBS:-2}" neuron-fuzz
echo "fuzz_long: seed $SEED, $SECS s (rerun the same seeds with: $0 $SECS $SEED $*)"
exec python3 "$ROOT/tests/fuzz/run_fuzz.py" --fuzz-bin "$BUILD_DIR/neuron-fuzz" \
  --seconds "$SECS" --seed "$SEED" --save-regressions "$@"
