#!/usr/bin/env bash
# The main demo: installs what is missing, builds, and runs the tiled matmul example on the
# simulator (checked against a reference).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
BUILD="${NEURON_BUILD_DIR:-build}"
"$BUILD/examples/matmul"
