// The cap's bookkeeping: the data kept in the shared region and the pure operations on it.
//
// RegionData is a plain struct that lives in a file mapped by every process of one allocation.
// Each process owns one slot recording what it has charged per device; `used` per device is the
// sum of the slots' charges and is what a new charge is checked against:
//
//   limit[0] = 4 GiB; slot 3 (pid 100) charged 3 GiB; slot 7 (pid 200) charged 0
//   TryCharge(slot 7, device 0, 2 GiB) -> kOverCap, nothing changes
//   pid 100 found dead: ReapDead releases slot 3, used[0] = 0
//   TryCharge(slot 7, device 0, 2 GiB) -> kCharged, used[0] = 2 GiB
//
// Nothing here makes a system call: liveness is a callback, so every rule (charging, crediting,
// reclaiming a dead process, repairing after a crash inside the lock) is unit-tested on any
// machine.
//
// Thread-safety: none of its own. REQUIRES: the caller holds the region's lock (region.h) for
// every call that takes a RegionData&, or owns the data exclusively (tests, creation).
#pragma once

#include <cstdint>

namespace tessera::capgpu {

inline constexpr uint32_t kMaxDevices = 16;
inline constexpr uint32_t kMaxSlots = 1024;
inline constexpr uint64_t kNoLimit = UINT64_MAX;

// A process, told apart from a later one that reuses its pid by its start time (clock ticks
// since boot, field 22 of /proc/PID/stat).
struct ProcessId {
  int32_t pid = 0;
  uint64_t start_time = 0;
  friend bool operator==(const ProcessId&, const ProcessId&) = default;
};

struct Slot {
  int32_t pid;  // 0: free
  uint32_t reserved;
  uint64_t start_time;
  uint64_t charged[kMaxDevices];
};

struct RegionData {
  uint32_t device_count;        // devices with a configured limit; others are uncapped
  uint32_t slots_in_use;        // occupied slots (kept for cheap display)
  uint64_t limit[kMaxDevices];  // bytes; kNoLimit for an uncapped device
  uint64_t used[kMaxDevices];   // == sum over slots of charged[d]
  uint64_t reaped_processes;    // dead processes reclaimed so far (for `show`)
  Slot slots[kMaxSlots];
  // Kernel launches by the share's processes so far (cuLaunchKernel*), counted with relaxed
  // atomic increments outside the lock: the agent reads a change as GPU activity.
  uint64_t launches;
};

// Fills `data` for a fresh region. `limits` has `count` entries (count <= kMaxDevices): one
// entry caps every device; several cap devices 0..count-1 and leave the rest uncapped.
void InitRegionData(RegionData& data, const uint64_t* limits, uint32_t count);

// The limit in force for `device` (kNoLimit when uncapped or out of range).
uint64_t LimitFor(const RegionData& data, uint32_t device);

// Claims a slot for `self`. A slot already holding `self` is a leftover of this same process
// before it called exec (pid and start time survive exec): its charges are dropped and it is
// reused. Returns the slot index, or -1 when every slot is occupied.
int ClaimSlot(RegionData& data, ProcessId self);

// Credits all of a slot's charges back and frees it. Idempotent on a free slot.
void ReleaseSlot(RegionData& data, int slot);

enum class ChargeResult { kCharged, kOverCap, kBadArgument };

// Charges `bytes` on `device` to `slot` if the device's used + bytes stays within its limit;
// all or nothing. An uncapped device is still tracked (so `show` tells the truth).
ChargeResult TryCharge(RegionData& data, int slot, uint32_t device, uint64_t bytes);

// Credits `bytes` back, never more than the slot holds on that device.
void Credit(RegionData& data, int slot, uint32_t device, uint64_t bytes);

// Liveness callback: true when the process is still running (same pid AND same start time).
using IsAliveFn = bool (*)(ProcessId process, void* context);

// Releases every occupied slot whose process is dead, except `keep` (the caller's own slot).
// Returns how many were reclaimed.
int ReapDead(RegionData& data, IsAliveFn is_alive, void* context, int keep = -1);

// Restores the invariants after a process died inside the lock (it may have written a slot
// but not `used`, or half a slot claim): recomputes used[] and slots_in_use from the slots.
void Repair(RegionData& data);

// Bytes still free on `device` (0 when over, e.g. after the agent shrank a limit).
uint64_t FreeBytes(const RegionData& data, uint32_t device);

}  // namespace tessera::capgpu
