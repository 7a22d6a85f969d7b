#!/usr/bin/env bash
# Transparent swap on a real NVIDIA GPU (src/capgpu/swap.h). Not run by CTest: needs a card.
#
#   bash tests/gpu/swap_roundtrip.sh [BUILD_DIR] [SIZE_GIB] [ROUNDS]   (defaults: build/, 4, 3)
#
# Builds tests/capgpu/swap_probe.cc against the real libcuda.so.1, runs it under the cap library
# in a region with swapping on, allocates SIZE_GIB GiB with cuMemAlloc_v2, fills it with a
# pattern, then ROUNDS times: swaps it out (the process keeps running; its driver calls would
# wait), reads the card's used memory (it must drop), swaps it in, and verifies every byte.
# Prints swap-out and swap-in GB/s (the library's own timings, from the region) beside the card's
# pinned-memory copy bandwidth measured in the same run (cuMemHostAlloc + cuMemcpyDtoH/HtoD
# over the same bytes); the goal is swap-in at 80% or more of the pinned host-to-device figure.
# Reads the card only: never changes settings (no MIG, persistence, clocks or resets).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${1:-build}
SIZE_GIB=${2:-4}
ROUNDS=${3:-3}
LIB="$PWD/$BUILD_DIR/src/capgpu/libtessera_capgpu.so"
TOOL="$PWD/$BUILD_DIR/src/capgpu/tessera-capgpu-region"
[ -f "$LIB" ] && [ -x "$TOOL" ] || { echo "build first: $LIB, $TOOL" >&2; exit 2; }
LIBCUDA=$(ldconfig -p | awk '/libcuda\.so\.1 /{print $NF; exit}')
[ -n "$LIBCUDA" ] || { echo "SKIP: no libcuda.so.1 (no NVIDIA driver)" >&2; exit 77; }
command -v nvidia-smi >/dev/null || { echo "SKIP: no nvidia-smi" >&2; exit 77; }

WORK=$(mktemp -d)
REGION=/dev/shm/tessera-capgpu-swaptest-$$
trap 'exec 3>&- 4<&- 2>/dev/null; kill "$PID" 2>/dev/null || true; rm -rf "$WORK" "$REGION"' EXIT
g++ -O2 -std=c++20 -I src tests/capgpu/swap_probe.cc "$LIBCUDA" -lpthread -o "$WORK/probe"
"$TOOL" create "$REGION" --limit $((SIZE_GIB + 2))GiB --swap

mkfifo "$WORK/in" "$WORK/out"
LD_PRELOAD="$LIB" TESSERA_CAPGPU_REGION="$REGION" "$WORK/probe" <"$WORK/in" >"$WORK/out" &
PID=$!
exec 3>"$WORK/in" 4<"$WORK/out"
ask() { echo "$1" >&3; read -r -t 600 line <&4; echo "$line"; }
used_mib() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 | head -1; }
field() { "$TOOL" show "$REGION" | sed -n "s/.*last \([0-9]*\)\/\([0-9]*\) us.*/\\$1/p" | head -1; }

fail=0
[ "$(ask "alloc a ${SIZE_GIB}GiB")" = "alloc a 0" ] || { echo "FAIL: allocation" >&2; exit 1; }
[ "$(ask "fill a 7")" = "fill a 0" ] || { echo "FAIL: fill" >&2; exit 1; }
read -r _ _ D2H H2D <<<"$(ask "bw a")"
[ "$(ask "fill a 7")" = "fill a 0" ] || { echo "FAIL: fill" >&2; exit 1; }  # bw overwrote it
BYTES=$((SIZE_GIB << 30))
echo "card: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader -i 0 | head -1)"
echo "pinned copy over ${SIZE_GIB} GiB: device-to-host ${D2H} GB/s, host-to-device ${H2D} GB/s"
for round in $(seq 1 "$ROUNDS"); do
  before=$(used_mib)
  "$TOOL" swap-out "$REGION" --hold --wait 120000 >/dev/null || { echo "FAIL: swap-out did not settle" >&2; fail=1; }
  during=$(used_mib)
  out_us=$(field 1)
  "$TOOL" swap-in "$REGION" --wait 120000 >/dev/null || { echo "FAIL: swap-in did not settle" >&2; fail=1; }
  in_us=$(field 2)
  check=$(ask "check a 7")
  [ "$check" = "check a ok" ] || { echo "FAIL: round $round: $check" >&2; fail=1; }
  freed=$((before - during))
  [ "$freed" -ge $((SIZE_GIB * 1024 * 9 / 10)) ] || { echo "FAIL: round $round freed only ${freed} MiB" >&2; fail=1; }
  awk -v b="$BYTES" -v o="$out_us" -v i="$in_us" -v h="$H2D" -v r="$round" -v f="$freed" -v c="$check" 'BEGIN {
    out = b / 1e9 / (o / 1e6); in_ = b / 1e9 / (i / 1e6);
    printf "round %d: freed %d MiB on the card; swap-out %.2f GB/s, swap-in %.2f GB/s (%.0f%% of pinned host-to-device; goal >= 80%%); %s\n", r, f, out, in_, 100 * in_ / h, c }'
done
ask quit >/dev/null || true
exit $fail
