#!/usr/bin/env bash
# Configures and builds Tessera into build/ (Release, ccache, Ninja).
set -euo pipefail
cd "$(dirname "$0")/.."
# Paths relative to the checkout in ccache's hashes, so a fresh clone elsewhere reuses the cache.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
BUILD_DIR=${BUILD_DIR:-build}
BUILD_TYPE=${BUILD_TYPE:-Release}
JOBS=${JOBS:-$(nproc)}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="$BUILD_TYPE" \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DTESSERA_WERROR=ON
fi
cmake --build "$BUILD_DIR" -j "$JOBS" "$@"
