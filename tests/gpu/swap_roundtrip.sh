#!/usr/bin/env bash
# Transparent swap on a real NVIDIA GPU (src/capgpu/swap.h). Not run by CTest: needs a card.
#
#   bash tests/gpu/swap_roundtrip.sh [BUILD_DIR] [SIZE_GIB] [ROUNDS]   (defaults: build/, 4, 3)
#
# LIBCUDA=PATH picks the driver library (default: the 64-bit libcuda.so.1 ldconfig knows, else
# the usual driver directories). On a card in MIG mode it runs on the first MIG instance
# `nvidia-smi -L` lists (it creates none). About a minute for 4 GiB x 3 on a PCIe Gen5 card. A dry
# run of the script itself on the stand-in driver, without a card (no figure it prints means
# anything there):
#   PATH=DIR_WITH_A_STUB_nvidia-smi:$PATH LIBCUDA=build/tests/capgpu/fake_driver/libcuda.so.1 \
#   LD_LIBRARY_PATH=build/tests/capgpu/fake_driver bash tests/gpu/swap_roundtrip.sh build 1 2
#
# Builds tests/capgpu/swap_probe.cc against the real libcuda.so.1 (and the cap library and its
# region tool with g++ when BUILD_DIR has none), runs it under the cap library
# in a region with swapping on, allocates SIZE_GIB GiB with cuMemAlloc_v2, fills it with a
# pattern, then ROUNDS times: fills it with a pattern of its own, swaps it out (the process keeps
# running; its driver calls would wait), checks that the region says every byte left the device
# for host memory and that the card's used memory dropped, swaps it in, and verifies every byte.
# Ends with one line, PASS or FAIL.
# Prints swap-out and swap-in GB/s (the library's own timings, from the region) beside the card's
# pinned-memory copy bandwidth measured in the same run (cuMemHostAlloc, then the best of three
# cuMemcpyDtoH/HtoD over the same bytes); the goal is swap-in at 80% or more of the pinned
# host-to-device figure. Swap-out includes pinning its host copies (cuMemHostAlloc); swap-in ends
# when the gate opens (the copies are unpinned after, by the library's watcher).
# Reads the card only: never changes settings (no MIG, persistence, clocks or resets).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${1:-build}
SIZE_GIB=${2:-4}
ROUNDS=${3:-3}
find_libcuda() {
  local l
  for l in ldconfig /sbin/ldconfig /usr/sbin/ldconfig; do
    l=$( ("$l" -p 2>/dev/null || true) | awk '/libcuda\.so\.1 .*x86-64/{p=$NF} END{print p}')
    [ -n "$l" ] && { echo "$l"; return; }
  done
  for l in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/nvidia/lib64 /usr/lib/wsl/lib; do
    [ -e "$l/libcuda.so.1" ] && { echo "$l/libcuda.so.1"; return; }
  done
  return 0  # none found: the caller skips (a failing return would end the script under set -e)
}
LIBCUDA=${LIBCUDA:-$(find_libcuda)}
[ -n "$LIBCUDA" ] || { echo "SKIP: no 64-bit libcuda.so.1 (no NVIDIA driver)" >&2; exit 77; }
# The probe and the cap library's dlopen("libcuda.so.1") must load the same file.
export LD_LIBRARY_PATH="$(dirname "$LIBCUDA")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
command -v nvidia-smi >/dev/null || { echo "SKIP: no nvidia-smi" >&2; exit 77; }
CXX=${CXX:-g++}
command -v "$CXX" >/dev/null || { echo "SKIP: no C++ compiler ($CXX); GCC 10 or newer is needed" >&2; exit 77; }
[ "$("$CXX" -dumpversion | cut -d. -f1)" -ge 10 ] 2>/dev/null || { echo "SKIP: $CXX $("$CXX" -dumpversion) is too old (C++20: GCC 10 or newer)" >&2; exit 77; }
export CUDA_DEVICE_ORDER=PCI_BUS_ID  # CUDA's device 0 is nvidia-smi's -i 0
# MIG mode (read, never changed): CUDA sees no device but MIG instances; use the first one.
MIG=$(nvidia-smi --query-gpu=mig.mode.current --format=csv,noheader -i 0 2>/dev/null | head -1 || true)
if [ "$MIG" = "Enabled" ]; then
  UUID=$(nvidia-smi -L | sed -n 's/.*(UUID: \(MIG-[^)]*\)).*/\1/p' | head -1)
  [ -n "$UUID" ] || { echo "SKIP: the card is in MIG mode with no instance (this script creates none)" >&2; exit 77; }
  export CUDA_VISIBLE_DEVICES=$UUID
  echo "MIG mode: on instance $UUID"
fi

WORK=$(mktemp -d)
REGION=/dev/shm/tessera-capgpu-swaptest-$$
PID=
trap 'exec 3>&- 4<&- 2>/dev/null; if [ -n "${PID:-}" ]; then kill "$PID" 2>/dev/null || true; fi; rm -rf "$WORK" "$REGION"' EXIT

LIB="$PWD/$BUILD_DIR/src/capgpu/libtessera_capgpu.so"
TOOL="$PWD/$BUILD_DIR/src/capgpu/tessera-capgpu-region"
if [ ! -f "$LIB" ] || [ ! -x "$TOOL" ]; then
  # A GPU machine may have no CMake dependencies: the cap library and its tool need only g++ and
  # libc, so build them as src/capgpu/CMakeLists.txt does.
  echo "building the cap library and region tool with g++ into $WORK"
  CORE="accounting alloc_table limits region sizes"
  PRELOAD="hook_table hooks_entry hooks_exec hooks_gate hooks_info hooks_memory hooks_nvml real_driver runtime swap swap_copy swap_tables"
  FREESTANDING="-fno-exceptions -fno-rtti -fno-threadsafe-statics -fvisibility=hidden -fvisibility-inlines-hidden"
  "$CXX" -O2 -std=c++20 -fPIC $FREESTANDING -I src -shared -nodefaultlibs -Wl,--no-undefined -Wl,--as-needed \
    $(for f in $CORE $PRELOAD; do echo "src/capgpu/$f.cc"; done) -ldl -lpthread -lc -o "$WORK/libtessera_capgpu.so"
  "$CXX" -O2 -std=c++20 -I src src/capgpu/region_tool.cc $(for f in $CORE; do echo "src/capgpu/$f.cc"; done) \
    -lpthread -o "$WORK/tessera-capgpu-region"
  LIB="$WORK/libtessera_capgpu.so"
  TOOL="$WORK/tessera-capgpu-region"
fi
"$CXX" -O2 -std=c++20 -I src tests/capgpu/swap_probe.cc "$LIBCUDA" -lpthread -o "$WORK/probe"
"$TOOL" create "$REGION" --limit $((SIZE_GIB + 2))GiB --swap

mkfifo "$WORK/in" "$WORK/out"
LD_PRELOAD="$LIB" TESSERA_CAPGPU_REGION="$REGION" "$WORK/probe" <"$WORK/in" >"$WORK/out" &
PID=$!
exec 3>"$WORK/in" 4<"$WORK/out"
# One command to the probe, its one-line answer ("" if it gave none within 3 minutes).
ask() { local line=""; echo "$1" >&3; read -r -t 180 line <&4 || true; echo "$line"; }
verdict() { if [ "$1" = 0 ]; then echo "PASS: every round trip swapped and verified (the GB/s above are figures, not part of the verdict)"; else echo "FAIL"; "$TOOL" show "$REGION" 2>/dev/null || true; fi; }
# The card's used MiB; empty where it cannot say (MIG mode reads [N/A]).
used_mib() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 | head -1 | grep -E '^[0-9]+$' || true; }
# From the slot: 1 swap-outs, 2 swap-ins, 3 last swap-out us, 4 last swap-in us.
field() { { "$TOOL" show "$REGION" || true; } | sed -n "s/.*swaps out\/in \([0-9]*\)\/\([0-9]*\), last \([0-9]*\)\/\([0-9]*\) us.*/\\$1/p" | head -1; }

fail=0
got=$(ask "alloc a ${SIZE_GIB}GiB")
[ "$got" = "alloc a 0" ] || { echo "FAIL: allocation: '${got}' (see the probe's messages above)" >&2; verdict 1; exit 1; }
read -r _ _ D2H H2D <<<"$(ask "bw a")" || true
case "$H2D" in ''|*[!0-9.]*) echo "FAIL: pinned bandwidth: bw a ${D2H:-} ${H2D:-}" >&2; verdict 1; exit 1 ;; esac
BYTES=$((SIZE_GIB << 30))
echo "card: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader -i 0 | head -1)"
echo "pinned copy over ${SIZE_GIB} GiB: device-to-host ${D2H} GB/s, host-to-device ${H2D} GB/s"
for round in $(seq 1 "$ROUNDS"); do
  seed=$((round * 37))  # a pattern per round: a swap-in that copied nothing back cannot pass
  got=$(ask "fill a $seed")
  [ "$got" = "fill a 0" ] || { echo "FAIL: round $round: fill: '${got}'" >&2; fail=1; break; }
  before=$(used_mib)
  summary=$("$TOOL" swap-out "$REGION" --hold --wait 60000) || { echo "FAIL: swap-out did not settle" >&2; fail=1; }
  during=$(used_mib)
  # Every byte left the device for host memory (the region's own count, MIG or not).
  dev_b=$(sed -n 's/^swap: device \([0-9]*\) bytes, host \([0-9]*\) bytes.*/\1/p' <<<"$summary")
  host_b=$(sed -n 's/^swap: device \([0-9]*\) bytes, host \([0-9]*\) bytes.*/\2/p' <<<"$summary")
  if [ "${dev_b:-1}" != 0 ] || [ "${host_b:-0}" -lt "$BYTES" ]; then
    echo "FAIL: round $round: after swap-out the region says device ${dev_b:-?} bytes, host ${host_b:-?} bytes (want 0 and >= $BYTES)" >&2
    fail=1
  fi
  outs=$(field 1); out_us=$(field 3)
  "$TOOL" swap-in "$REGION" --wait 60000 >/dev/null || { echo "FAIL: swap-in did not settle" >&2; fail=1; }
  ins=$(field 2); in_us=$(field 4)
  check=$(ask "check a $seed")
  [ "$check" = "check a ok" ] || { echo "FAIL: round $round: $check" >&2; fail=1; }
  # Each round must have swapped (an unswappable process also "settles", with nothing moved).
  if [ "${outs:-0}" != "$round" ] || [ "${ins:-0}" != "$round" ] || [ "${out_us:-0}" -le 0 ] || [ "${in_us:-0}" -le 0 ]; then
    echo "FAIL: round $round: swaps out/in ${outs:-?}/${ins:-?}, last ${out_us:-?}/${in_us:-?} us" >&2
    "$TOOL" show "$REGION" >&2
    fail=1
    continue
  fi
  freed="n/a (the card does not report used memory)"
  if [ -n "$before" ] && [ -n "$during" ]; then
    freed=$((before - during))
    [ "$freed" -ge $((SIZE_GIB * 1024 * 9 / 10)) ] || { echo "FAIL: round $round freed only ${freed} MiB" >&2; fail=1; }
    freed="$freed MiB"
  fi
  awk -v b="$BYTES" -v o="$out_us" -v i="$in_us" -v h="${H2D:-0}" -v r="$round" -v f="$freed" -v c="$check" 'BEGIN {
    out = b / 1e9 / (o / 1e6); in_ = b / 1e9 / (i / 1e6);
    share = h > 0 ? sprintf("%.0f%%", 100 * in_ / h) : "?";
    printf "round %d: freed %s on the card; swap-out %.2f GB/s (with pinning its host copies), swap-in %.2f GB/s (%s of pinned host-to-device; goal >= 80%%); %s\n", r, f, out, in_, share, c }'
done
ask quit >/dev/null || true
verdict "$fail"
exit $fail
