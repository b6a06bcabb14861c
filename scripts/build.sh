#!/usr/bin/env bash
# Configures and builds everything into ./build (or $NEURON_BUILD_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${NEURON_BUILD_DIR:-build}"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$BUILD"
