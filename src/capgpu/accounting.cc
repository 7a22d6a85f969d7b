#include "capgpu/accounting.h"

#include <cstring>

namespace tessera::capgpu {

void InitRegionData(RegionData& data, const uint64_t* limits, uint32_t count) {
  std::memset(&data, 0, sizeof(data));
  if (count > kMaxDevices) count = kMaxDevices;
  for (uint32_t d = 0; d < kMaxDevices; ++d) {
    if (count == 1) {
      data.limit[d] = limits[0];
    } else {
      data.limit[d] = d < count ? limits[d] : kNoLimit;
    }
  }
  data.device_count = count == 1 ? kMaxDevices : count;
}

uint64_t LimitFor(const RegionData& data, uint32_t device) {
  return device < kMaxDevices ? data.limit[device] : kNoLimit;
}

int ClaimSlot(RegionData& data, ProcessId self) {
  int free_slot = -1;
  for (uint32_t i = 0; i < kMaxSlots; ++i) {
    const Slot& s = data.slots[i];
    if (s.pid == self.pid && s.start_time == self.start_time && s.pid != 0) {
      ReleaseSlot(data, static_cast<int>(i));  // pre-exec leftover of this same process
      free_slot = static_cast<int>(i);
      break;
    }
    if (s.pid == 0 && free_slot < 0) free_slot = static_cast<int>(i);
  }
  if (free_slot < 0) return -1;
  Slot& s = data.slots[free_slot];
  std::memset(&s, 0, sizeof(s));
  // start_time before pid: a crash between the two leaves a slot that still reads as free.
  s.start_time = self.start_time;
  s.pid = self.pid;
  ++data.slots_in_use;
  return free_slot;
}

void ReleaseSlot(RegionData& data, int slot) {
  if (slot < 0 || static_cast<uint32_t>(slot) >= kMaxSlots) return;
  Slot& s = data.slots[slot];
  if (s.pid == 0) return;
  for (uint32_t d = 0; d < kMaxDevices; ++d) {
    uint64_t c = s.charged[d];
    data.used[d] = data.used[d] >= c ? data.used[d] - c : 0;
    s.charged[d] = 0;
  }
  data.host_used = data.host_used >= s.host_bytes ? data.host_used - s.host_bytes : 0;
  s.host_bytes = 0;
  s.disk_bytes = 0;
  s.resident_bytes = 0;
  s.room_wanted = 0;
  s.swap_state = 0;
  s.unswappable = 0;
  s.pid = 0;
  s.start_time = 0;
  if (data.slots_in_use > 0) --data.slots_in_use;
}

ChargeResult TryCharge(RegionData& data, int slot, uint32_t device, uint64_t bytes) {
  if (slot < 0 || static_cast<uint32_t>(slot) >= kMaxSlots || device >= kMaxDevices ||
      data.slots[slot].pid == 0) {
    return ChargeResult::kBadArgument;
  }
  const uint64_t limit = data.limit[device];
  const uint64_t used = data.used[device];
  if (bytes > limit || used > limit - bytes) {
    if (limit != kNoLimit) return ChargeResult::kOverCap;
  }
  // The slot first, then the total: Repair recomputes the total from the slots.
  data.slots[slot].charged[device] += bytes;
  data.used[device] = used + bytes;
  return ChargeResult::kCharged;
}

void Credit(RegionData& data, int slot, uint32_t device, uint64_t bytes) {
  if (slot < 0 || static_cast<uint32_t>(slot) >= kMaxSlots || device >= kMaxDevices) return;
  Slot& s = data.slots[slot];
  if (bytes > s.charged[device]) bytes = s.charged[device];
  s.charged[device] -= bytes;
  data.used[device] = data.used[device] >= bytes ? data.used[device] - bytes : 0;
}

int ReapDead(RegionData& data, IsAliveFn is_alive, void* context, int keep) {
  int reaped = 0;
  for (uint32_t i = 0; i < kMaxSlots; ++i) {
    const Slot& s = data.slots[i];
    if (s.pid == 0 || static_cast<int>(i) == keep) continue;
    if (!is_alive(ProcessId{s.pid, s.start_time}, context)) {
      ReleaseSlot(data, static_cast<int>(i));
      ++data.reaped_processes;
      ++reaped;
    }
  }
  return reaped;
}

void Repair(RegionData& data) {
  uint32_t in_use = 0;
  for (uint32_t d = 0; d < kMaxDevices; ++d) data.used[d] = 0;
  data.host_used = 0;
  for (uint32_t i = 0; i < kMaxSlots; ++i) {
    const Slot& s = data.slots[i];
    if (s.pid == 0) continue;
    ++in_use;
    for (uint32_t d = 0; d < kMaxDevices; ++d) data.used[d] += s.charged[d];
    data.host_used += s.host_bytes;
  }
  data.slots_in_use = in_use;
}

uint64_t FreeBytes(const RegionData& data, uint32_t device) {
  if (device >= kMaxDevices) return 0;
  const uint64_t limit = data.limit[device];
  const uint64_t used = data.used[device];
  return used >= limit ? 0 : limit - used;
}

bool ConfigureSwap(RegionData& data, uint64_t ram_limit, const char* swap_dir) {
  const size_t n = swap_dir == nullptr ? 0 : std::strlen(swap_dir);
  if (n >= sizeof(data.swap_dir)) return false;
  std::memset(data.swap_dir, 0, sizeof(data.swap_dir));
  if (n > 0) std::memcpy(data.swap_dir, swap_dir, n);
  data.swap_ram_limit = ram_limit;
  data.swap_enabled = 1;
  return true;
}

void SetSwapTarget(RegionData& data, SwapTarget target) {
  __atomic_store_n(&data.swap_target, static_cast<uint32_t>(target), __ATOMIC_RELEASE);
  __atomic_add_fetch(&data.swap_seq, 1, __ATOMIC_RELEASE);
}

bool ChargeHost(RegionData& data, int slot, uint64_t bytes) {
  if (slot < 0 || static_cast<uint32_t>(slot) >= kMaxSlots || data.slots[slot].pid == 0) {
    return false;
  }
  const uint64_t limit = data.swap_ram_limit;
  if (bytes > limit || data.host_used > limit - bytes) return false;
  data.slots[slot].host_bytes += bytes;
  data.host_used += bytes;
  return true;
}

void CreditHost(RegionData& data, int slot, uint64_t bytes) {
  if (slot < 0 || static_cast<uint32_t>(slot) >= kMaxSlots) return;
  Slot& s = data.slots[slot];
  if (bytes > s.host_bytes) bytes = s.host_bytes;
  s.host_bytes -= bytes;
  data.host_used = data.host_used >= bytes ? data.host_used - bytes : 0;
}

bool SwapSummary::SettledFor(SwapTarget target) const {
  if (swapping_out > 0 || swapping_in > 0) return false;
  return target == SwapTarget::kResident ? swapped == 0 : resident == 0;
}

SwapSummary SummarizeSwap(const RegionData& data) {
  SwapSummary sum;
  for (uint32_t i = 0; i < kMaxSlots; ++i) {
    const Slot& s = data.slots[i];
    if (s.pid == 0) continue;
    ++sum.processes;
    switch (static_cast<SwapState>(s.swap_state)) {
      case SwapState::kResident:
        ++sum.resident;
        break;
      case SwapState::kSwappingOut:
        ++sum.swapping_out;
        break;
      case SwapState::kSwapped:
        ++sum.swapped;
        break;
      case SwapState::kSwappingIn:
        ++sum.swapping_in;
        break;
      case SwapState::kUnswappable:
        if (sum.unswappable++ == 0) sum.first_reason = s.unswappable;
        break;
    }
    sum.resident_bytes += s.resident_bytes;
    sum.host_bytes += s.host_bytes;
    sum.disk_bytes += s.disk_bytes;
    sum.gate_waits += s.gate_waits;
    sum.room_wanted += s.room_wanted;
  }
  return sum;
}

namespace {

// The name of an enumerator from a table indexed by its value; "unknown" past the table's end.
// Each table's static_assert keeps it as long as its enum (what -Wswitch did for a switch).
template <size_t N>
const char* NameOf(const char* const (&names)[N], uint32_t value) {
  return value < N ? names[value] : "unknown";
}

constexpr const char* kSwapStateNames[] = {"resident", "swapping-out", "swapped", "resuming",
                                           "unswappable"};
static_assert(sizeof(kSwapStateNames) / sizeof(kSwapStateNames[0]) ==
              static_cast<size_t>(SwapState::kUnswappable) + 1);

constexpr const char* kUnswappableReasons[] = {
    "",
    "uses stream-ordered memory pools (cuMemAllocAsync): the pool's memory is the driver's",
    "uses CUDA arrays, which have no address to copy from",
    "uses managed memory (cuMemAllocManaged), which the driver pages itself",
    "the driver lacks the virtual memory management API",
    "a driver call did not return in time (a kernel still running)",
    "a copy, a host allocation or the disk tier failed; nothing moved",
    "exported memory to another process, which maps it too",
};
static_assert(sizeof(kUnswappableReasons) / sizeof(kUnswappableReasons[0]) ==
              static_cast<size_t>(Unswappable::kExported) + 1);

}  // namespace

const char* SwapStateName(uint32_t state) { return NameOf(kSwapStateNames, state); }

const char* ShareSwapState(const SwapSummary& m) {
  if (m.processes == 0) return "resident";
  if (m.swapping_in > 0 || m.room_wanted > 0) return "resuming";
  if (m.swapping_out > 0) return "swapping-out";
  if (m.unswappable > 0) return "unswappable";
  if (m.swapped == m.processes) return "swapped";
  if (m.resident == m.processes) return "resident";
  return "mixed";
}

const char* UnswappableReason(uint32_t reason) { return NameOf(kUnswappableReasons, reason); }

}  // namespace tessera::capgpu
