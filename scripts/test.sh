#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every test tier.
# Exits non-zero when any test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
BUILD="${NEURON_BUILD_DIR:-build}"
ctest --test-dir "$BUILD" --output-on-failure
