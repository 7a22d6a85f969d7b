#!/usr/bin/env bash
# Builds the Debian package: bash scripts/package.sh [BUILD_DIR]   (default build/)
# Configures and builds what the package holds (scripts/build.sh: Release, Ninja, ccache), then
# `cpack -G DEB` writes BUILD_DIR/tessera_<version>_<arch>.deb. What goes in it and the
# package's metadata: cmake/Packaging.cmake. Install it with `sudo apt install ./BUILD_DIR/tessera_*.deb`.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-${BUILD_DIR:-build}}
for c in cmake cpack dpkg-deb dpkg-shlibdeps; do
  command -v "$c" >/dev/null || { echo "package: '$c' is missing (bash scripts/setup.sh installs it)" >&2; exit 1; }
done
BUILD_DIR=$BUILD_DIR bash scripts/build.sh --target tessera tessera_capgpu tessera-capgpu-region
rm -f "$BUILD_DIR"/tessera_*.deb
(cd "$BUILD_DIR" && cpack -G DEB --config CPackConfig.cmake -B "$PWD")
deb=$(ls "$BUILD_DIR"/tessera_*.deb)
echo "package: $deb"
dpkg-deb --field "$deb" Package Version Architecture Depends
