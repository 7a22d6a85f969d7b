#!/usr/bin/env bash
# The memory cap on a real NVIDIA GPU, with PyTorch. Not run by CTest.
#
#   bash tests/gpu/run_torch_cap.sh [BUILD_DIR]     (default build/; needs python3 with torch+CUDA)
#
# Checks that a process capped at 4 GiB (a) sees 4 GiB as the device total through
# torch.cuda.mem_get_info and get_device_properties, (b) can allocate 3 GiB, (c) gets an
# out-of-memory error asking for 2 GiB more, and (d) a second process of the same allocation
# (same region) is refused what the first holds; and that a process without the preload sees
# the whole card. Reads the card only: it never changes settings (no nvidia-smi -mig/-pm/-r/-lgc,
# no persistence or clock changes, no resets).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${1:-build}
LIB="$PWD/$BUILD_DIR/src/capgpu/libtessera_capgpu.so"
TOOL="$PWD/$BUILD_DIR/src/capgpu/tessera-capgpu-region"
[ -f "$LIB" ] && [ -x "$TOOL" ] || { echo "build first: $LIB, $TOOL" >&2; exit 2; }
python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' ||
  { echo "SKIP: no PyTorch with a usable CUDA device" >&2; exit 77; }

REGION=$(mktemp -u /dev/shm/tessera-capgpu-gputest-XXXXXX)
trap 'rm -f "$REGION"' EXIT
"$TOOL" create "$REGION" --limit 4GiB

CAPPED=(env LD_PRELOAD="$LIB" TESSERA_CAPGPU_REGION="$REGION" TESSERA_GPU_MEMORY_LIMIT=4GiB)
GiB=$((1 << 30))
fail=0

echo "== capped process"
"${CAPPED[@]}" python3 - <<'PY' || fail=1
import torch
GiB = 1 << 30
free, total = torch.cuda.mem_get_info()
props_total = torch.cuda.get_device_properties(0).total_memory
print(f"mem_get_info total={total} free={free}; properties total={props_total}")
assert total == 4 * GiB, total
assert props_total == 4 * GiB, props_total
held = torch.empty(3 * GiB, dtype=torch.uint8, device="cuda")
try:
    more = torch.empty(2 * GiB, dtype=torch.uint8, device="cuda")
    raise SystemExit("FAIL: 5 GiB allocated under a 4 GiB cap")
except torch.cuda.OutOfMemoryError as e:
    print("out of memory as expected:", str(e).splitlines()[0])
print("PASS capped")
PY

echo "== second process of the same allocation while the first holds 3 GiB"
"${CAPPED[@]}" python3 - <<'PY' &
import sys, time, torch
held = torch.empty(3 * (1 << 30), dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print("holding", flush=True)
time.sleep(20)
PY
holder=$!
for _ in $(seq 1 100); do "$TOOL" show "$REGION" | grep -q "used 3" && break; sleep 0.2; done
"${CAPPED[@]}" python3 - <<'PY' || fail=1
import torch
try:
    torch.empty(2 * (1 << 30), dtype=torch.uint8, device="cuda")
    raise SystemExit("FAIL: the second process passed the shared cap")
except torch.cuda.OutOfMemoryError:
    print("PASS shared cap")
PY
kill "$holder" 2>/dev/null || true
wait "$holder" 2>/dev/null || true
"$TOOL" show "$REGION"

echo "== uncapped process"
python3 - <<'PY' || fail=1
import torch
free, total = torch.cuda.mem_get_info()
print(f"mem_get_info total={total}")
assert total > 4 * (1 << 30), total
x = torch.empty(5 * (1 << 30), dtype=torch.uint8, device="cuda")
print("PASS uncapped")
PY

[ "$fail" -eq 0 ] && echo "ALL PASS" || { echo "FAILED"; exit 1; }
