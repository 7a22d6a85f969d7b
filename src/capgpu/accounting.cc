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
  for (uint32_t i = 0; i < kMaxSlots; ++i) {
    const Slot& s = data.slots[i];
    if (s.pid == 0) continue;
    ++in_use;
    for (uint32_t d = 0; d < kMaxDevices; ++d) data.used[d] += s.charged[d];
  }
  data.slots_in_use = in_use;
}

uint64_t FreeBytes(const RegionData& data, uint32_t device) {
  if (device >= kMaxDevices) return 0;
  const uint64_t limit = data.limit[device];
  const uint64_t used = data.used[device];
  return used >= limit ? 0 : limit - used;
}

}  // namespace tessera::capgpu
