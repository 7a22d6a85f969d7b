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

// Swapping (swap.h): the agent sets the share's target; each process moves its swappable device
// memory to match and reports its state in its slot.
enum class SwapTarget : uint32_t {
  kResident = 0,  // device memory stays (or comes back) on the device
  kOut = 1,       // leave the device; a process that calls the driver again brings the share back
  kHold = 2,      // leave the device and stay out: driver calls wait until the target changes
};
enum class SwapState : uint32_t {
  kResident = 0,
  kSwappingOut = 1,
  kSwapped = 2,
  kSwappingIn = 3,
  kUnswappable = 4,  // Slot::unswappable says why
};
// Why a process cannot be swapped (Slot::unswappable).
enum class Unswappable : uint32_t {
  kNone = 0,
  kStreamOrderedPool = 1,  // cuMemAllocAsync / cuMemAllocFromPoolAsync: the pool is the driver's
  kArray = 2,              // CUDA arrays: opaque layout, no address to copy from
  kManaged = 3,            // cuMemAllocManaged: the driver pages it itself
  kNoVmm = 4,              // the driver lacks the virtual memory management API
  kBusy = 5,               // a driver call did not return within the swap's wait (kernel running)
  kFailed = 6,             // a copy, a host allocation or the disk tier failed (nothing moved)
  kExported = 7,           // memory exported to another process (cuMemExportToShareableHandle)
};

struct Slot {
  int32_t pid;  // 0: free
  uint32_t reserved;
  uint64_t start_time;
  uint64_t charged[kMaxDevices];
  // Swap state of this process (written by the process itself, under the lock).
  uint32_t swap_state;      // SwapState
  uint32_t unswappable;     // Unswappable
  uint64_t resident_bytes;  // swappable device memory mapped now
  uint64_t host_bytes;      // swapped-out bytes held in host RAM (counted in RegionData::host_used)
  uint64_t disk_bytes;      // swapped-out bytes held in a file under swap_dir
  uint64_t gate_waits;      // driver calls that waited at the gate
  uint64_t swap_outs;
  uint64_t swap_ins;
  uint64_t last_swap_out_us;  // how long the last swap-out / swap-in took
  uint64_t last_swap_in_us;
  uint64_t room_wanted;  // bytes an allocation is waiting for: the device had no room
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
  // Swapping. swap_enabled is written at creation; swap_target and swap_seq are written under
  // the lock with atomic stores and read without it (swap_seq is a futex word: every change of
  // target bumps it and wakes the processes' watchers).
  uint32_t swap_enabled;
  uint32_t swap_target;  // SwapTarget
  uint32_t swap_seq;
  uint32_t reserved_swap;
  uint64_t swap_ram_limit;  // host RAM the share's swapped bytes may take; the rest goes to disk
  uint64_t host_used;       // == sum over slots of host_bytes
  uint64_t demand_wakes;    // times a process's driver call brought a kOut share back
  char swap_dir[256];       // directory for the disk tier ("" = no disk tier)
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

// ---- Swapping -----------------------------------------------------------------------------------

// Turns swapping on for a fresh region: host RAM budget and disk directory (may be "" for none;
// truncated paths are refused: false).
bool ConfigureSwap(RegionData& data, uint64_t ram_limit, const char* swap_dir);

// Sets the share's target and bumps swap_seq (the caller then wakes the futex).
void SetSwapTarget(RegionData& data, SwapTarget target);

// Charges `bytes` of host RAM to `slot` if the share's budget allows; all or nothing.
bool ChargeHost(RegionData& data, int slot, uint64_t bytes);
// Credits host RAM back, never more than the slot holds.
void CreditHost(RegionData& data, int slot, uint64_t bytes);

// What the live slots report, for the agent and `show`.
struct SwapSummary {
  uint32_t processes = 0;
  uint32_t resident = 0, swapping_out = 0, swapped = 0, swapping_in = 0, unswappable = 0;
  uint32_t first_reason = 0;  // Unswappable of the first unswappable slot
  uint64_t resident_bytes = 0, host_bytes = 0, disk_bytes = 0, gate_waits = 0, room_wanted = 0;
  // True when every process is in the state `target` asks for (kUnswappable counts as settled:
  // it will not move).
  bool SettledFor(SwapTarget target) const;
};
SwapSummary SummarizeSwap(const RegionData& data);

const char* SwapStateName(uint32_t state);
// One word for a whole share: "resuming" if any process waits to come back, "swapping-out",
// "unswappable", "swapped" when every process is out, "resident" when every one is in (or there
// are none), else "mixed".
const char* ShareSwapState(const SwapSummary& summary);
const char* UnswappableReason(uint32_t reason);

}  // namespace tessera::capgpu
