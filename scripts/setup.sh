#!/usr/bin/env bash
# Installs what is missing on a fresh Debian 12 machine: the C++ toolchain packages and the
# pinned Python packages. Idempotent and quick when everything is already there, so the test
# command runs it every time; the multi-GB torch wheel is downloaded once per machine.
set -euo pipefail
cd "$(dirname "$0")/.."

DEBIAN_PACKAGES=(cmake ninja-build g++ llvm-14-dev clang-14 libclang-14-dev libclang-cpp14-dev
                 pybind11-dev libfmt-dev doctest-dev libbenchmark-dev chromium)

missing=()
for p in "${DEBIAN_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PYTHON="${PYTHON:-python3}"
# pip is only invoked when a pin is not satisfied, so CI never re-downloads torch.
if ! "$PYTHON" scripts/check_requirements.py requirements.txt; then
  echo "setup: installing pinned Python packages from requirements.txt"
  "$PYTHON" -m pip install --quiet --disable-pip-version-check -r requirements.txt
fi
