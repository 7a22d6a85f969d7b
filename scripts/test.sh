#!/usr/bin/env bash
# Set up, build, and run every test (unit and integration) with CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
cd build
ctest --output-on-failure -j "${JOBS:-$(nproc)}" "$@"
