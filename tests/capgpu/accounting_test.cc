#include "capgpu/accounting.h"

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>

#include "capgpu/alloc_table.h"
#include "capgpu/sizes.h"

namespace tessera::capgpu {
namespace {

constexpr uint64_t kGiB = 1ULL << 30;

std::unique_ptr<RegionData> Fresh(std::initializer_list<uint64_t> limits) {
  auto d = std::make_unique<RegionData>();
  std::vector<uint64_t> v(limits);
  InitRegionData(*d, v.data(), static_cast<uint32_t>(v.size()));
  return d;
}

// Liveness from a set of dead pids.
bool AliveUnlessListed(ProcessId p, void* context) {
  return static_cast<std::set<int32_t>*>(context)->count(p.pid) == 0;
}

TEST(Accounting, OneLimitCapsEveryDevice) {
  auto d = Fresh({4 * kGiB});
  EXPECT_EQ(LimitFor(*d, 0), 4 * kGiB);
  EXPECT_EQ(LimitFor(*d, 15), 4 * kGiB);
  EXPECT_EQ(LimitFor(*d, 16), kNoLimit);
}

TEST(Accounting, ListCapsListedDevicesOnly) {
  auto d = Fresh({4 * kGiB, 2 * kGiB});
  EXPECT_EQ(LimitFor(*d, 0), 4 * kGiB);
  EXPECT_EQ(LimitFor(*d, 1), 2 * kGiB);
  EXPECT_EQ(LimitFor(*d, 2), kNoLimit);
}

TEST(Accounting, ChargeIsAllOrNothingAtTheCap) {
  auto d = Fresh({4 * kGiB});
  int s = ClaimSlot(*d, {100, 7});
  ASSERT_GE(s, 0);
  EXPECT_EQ(TryCharge(*d, s, 0, 3 * kGiB), ChargeResult::kCharged);
  EXPECT_EQ(TryCharge(*d, s, 0, kGiB + 1), ChargeResult::kOverCap);
  EXPECT_EQ(d->used[0], 3 * kGiB);
  EXPECT_EQ(TryCharge(*d, s, 0, kGiB), ChargeResult::kCharged);
  EXPECT_EQ(FreeBytes(*d, 0), 0u);
  EXPECT_EQ(TryCharge(*d, s, 0, 1), ChargeResult::kOverCap);
  EXPECT_EQ(TryCharge(*d, s, 0, UINT64_MAX), ChargeResult::kOverCap);
}

TEST(Accounting, CreditNeverGoesBelowWhatTheSlotHolds) {
  auto d = Fresh({4 * kGiB});
  int a = ClaimSlot(*d, {100, 7});
  int b = ClaimSlot(*d, {200, 7});
  ASSERT_EQ(TryCharge(*d, a, 0, kGiB), ChargeResult::kCharged);
  ASSERT_EQ(TryCharge(*d, b, 0, kGiB), ChargeResult::kCharged);
  Credit(*d, a, 0, 3 * kGiB);  // more than a holds: only a's 1 GiB comes back
  EXPECT_EQ(d->used[0], kGiB);
  EXPECT_EQ(d->slots[b].charged[0], kGiB);
}

TEST(Accounting, UncappedDeviceIsTrackedButNeverRefused) {
  auto d = Fresh({4 * kGiB, 4 * kGiB});
  int s = ClaimSlot(*d, {100, 7});
  EXPECT_EQ(TryCharge(*d, s, 5, 100 * kGiB), ChargeResult::kCharged);
  EXPECT_EQ(d->used[5], 100 * kGiB);
}

TEST(Accounting, BadArgumentsAreRejected) {
  auto d = Fresh({4 * kGiB});
  EXPECT_EQ(TryCharge(*d, -1, 0, 1), ChargeResult::kBadArgument);
  EXPECT_EQ(TryCharge(*d, 3, 0, 1), ChargeResult::kBadArgument);  // free slot
  int s = ClaimSlot(*d, {100, 7});
  EXPECT_EQ(TryCharge(*d, s, kMaxDevices, 1), ChargeResult::kBadArgument);
}

TEST(Accounting, DeadProcessesAreReapedAndTheirChargeComesBack) {
  auto d = Fresh({4 * kGiB});
  int dead = ClaimSlot(*d, {100, 7});
  int live = ClaimSlot(*d, {200, 7});
  ASSERT_EQ(TryCharge(*d, dead, 0, 3 * kGiB), ChargeResult::kCharged);
  ASSERT_EQ(TryCharge(*d, live, 0, kGiB / 2), ChargeResult::kCharged);
  std::set<int32_t> dead_pids{100};
  EXPECT_EQ(TryCharge(*d, live, 0, 2 * kGiB), ChargeResult::kOverCap);
  EXPECT_EQ(ReapDead(*d, AliveUnlessListed, &dead_pids, live), 1);
  EXPECT_EQ(d->used[0], kGiB / 2);
  EXPECT_EQ(d->slots_in_use, 1u);
  EXPECT_EQ(d->reaped_processes, 1u);
  EXPECT_EQ(TryCharge(*d, live, 0, 2 * kGiB), ChargeResult::kCharged);
}

TEST(Accounting, ReapSparesTheCallersOwnSlot) {
  auto d = Fresh({4 * kGiB});
  int mine = ClaimSlot(*d, {100, 7});
  std::set<int32_t> dead_pids{100};
  EXPECT_EQ(ReapDead(*d, AliveUnlessListed, &dead_pids, mine), 0);
  EXPECT_EQ(d->slots[mine].pid, 100);
}

TEST(Accounting, ClaimAfterExecReusesTheSameProcessSlot) {
  auto d = Fresh({4 * kGiB});
  int before = ClaimSlot(*d, {100, 7});
  ASSERT_EQ(TryCharge(*d, before, 0, 3 * kGiB), ChargeResult::kCharged);
  int after = ClaimSlot(*d, {100, 7});  // same pid and start time: the process exec'd
  EXPECT_EQ(after, before);
  EXPECT_EQ(d->used[0], 0u);
  EXPECT_EQ(d->slots_in_use, 1u);
  // A reused pid (other start time) is a different process.
  int other = ClaimSlot(*d, {100, 8});
  EXPECT_NE(other, after);
}

TEST(Accounting, FullRegionRefusesAClaim) {
  auto d = Fresh({4 * kGiB});
  for (uint32_t i = 0; i < kMaxSlots; ++i) ASSERT_GE(ClaimSlot(*d, {int32_t(i + 1), 1}), 0);
  EXPECT_EQ(ClaimSlot(*d, {99999, 1}), -1);
  ReleaseSlot(*d, 10);
  EXPECT_EQ(ClaimSlot(*d, {99999, 1}), 10);
}

TEST(Accounting, RepairRecomputesTotalsFromSlots) {
  auto d = Fresh({4 * kGiB});
  int a = ClaimSlot(*d, {100, 7});
  ASSERT_EQ(TryCharge(*d, a, 0, kGiB), ChargeResult::kCharged);
  // A process died between writing its slot and the total.
  d->slots[a].charged[0] += kGiB;
  d->slots_in_use = 5;
  Repair(*d);
  EXPECT_EQ(d->used[0], 2 * kGiB);
  EXPECT_EQ(d->slots_in_use, 1u);
}

TEST(Accounting, ReleaseSlotIsIdempotent) {
  auto d = Fresh({4 * kGiB});
  int a = ClaimSlot(*d, {100, 7});
  ASSERT_EQ(TryCharge(*d, a, 0, kGiB), ChargeResult::kCharged);
  ReleaseSlot(*d, a);
  ReleaseSlot(*d, a);
  EXPECT_EQ(d->used[0], 0u);
  EXPECT_EQ(d->slots_in_use, 0u);
}

TEST(Sizes, ArraysAndPitch) {
  EXPECT_EQ(ArrayBytes(1024, 0, 0, CU_AD_FORMAT_FLOAT, 4, 0), 1024u * 16);
  EXPECT_EQ(ArrayBytes(64, 64, 8, CU_AD_FORMAT_HALF, 2, 0), 64u * 64 * 8 * 4);
  EXPECT_EQ(ArrayBytes(64, 64, 0, CU_AD_FORMAT_UNSIGNED_INT8, 1, CUDA_ARRAY3D_CUBEMAP),
            64u * 64 * 6);
  EXPECT_EQ(ArrayBytes(UINT64_MAX, 2, 0, CU_AD_FORMAT_FLOAT, 1, 0), UINT64_MAX);
  EXPECT_EQ(PitchedBytesEstimate(100, 10), 5120u);
  EXPECT_EQ(PitchedBytesEstimate(512, 2), 1024u);
  EXPECT_EQ(PitchedBytesEstimate(UINT64_MAX, 2), UINT64_MAX);
}

TEST(AllocationTable, InsertRemoveAndKindsAreSeparate) {
  AllocationTable t;
  EXPECT_TRUE(t.Insert(AllocKind::kDevicePointer, 0x1000, 64, 0));
  EXPECT_TRUE(t.Insert(AllocKind::kMemHandle, 0x1000, 128, 1));
  uint64_t bytes = 0;
  uint32_t device = 9;
  EXPECT_TRUE(t.Remove(AllocKind::kMemHandle, 0x1000, &bytes, &device));
  EXPECT_EQ(bytes, 128u);
  EXPECT_EQ(device, 1u);
  EXPECT_FALSE(t.Remove(AllocKind::kMemHandle, 0x1000, &bytes, &device));
  EXPECT_TRUE(t.Remove(AllocKind::kDevicePointer, 0x1000, &bytes, &device));
  EXPECT_EQ(bytes, 64u);
  EXPECT_EQ(t.size(), 0u);
}

TEST(AllocationTable, GrowsAndSurvivesChurn) {
  AllocationTable t;
  for (uint64_t round = 0; round < 3; ++round) {
    for (uint64_t i = 0; i < 10000; ++i) {
      ASSERT_TRUE(t.Insert(AllocKind::kDevicePointer, (i + 1) << 21, i, 0));
    }
    EXPECT_EQ(t.size(), 10000u);
    for (uint64_t i = 0; i < 10000; ++i) {
      uint64_t bytes = 0;
      uint32_t device = 0;
      ASSERT_TRUE(t.Remove(AllocKind::kDevicePointer, (i + 1) << 21, &bytes, &device));
      ASSERT_EQ(bytes, i);
    }
    EXPECT_EQ(t.size(), 0u);
  }
}

// Swapping's bookkeeping: the host RAM budget is shared by the share's processes, released with
// a dead process's slot, and rebuilt by Repair; the summary tells the agent when a target is met.
TEST(SwapAccounting, HostRamBudgetIsSharedAndReclaimedWithTheSlot) {
  auto d = Fresh({4 * kGiB});
  ASSERT_TRUE(ConfigureSwap(*d, 3 * kGiB, "/var/lib/tessera/swap"));
  EXPECT_EQ(d->swap_enabled, 1u);
  EXPECT_STREQ(d->swap_dir, "/var/lib/tessera/swap");
  const int a = ClaimSlot(*d, {100, 1});
  const int b = ClaimSlot(*d, {200, 1});
  EXPECT_TRUE(ChargeHost(*d, a, 2 * kGiB));
  EXPECT_FALSE(ChargeHost(*d, b, 2 * kGiB)) << "all or nothing past the budget";
  EXPECT_TRUE(ChargeHost(*d, b, 1 * kGiB));
  EXPECT_EQ(d->host_used, 3 * kGiB);
  CreditHost(*d, b, 5 * kGiB);  // never more than the slot holds
  EXPECT_EQ(d->host_used, 2 * kGiB);
  ReleaseSlot(*d, a);
  EXPECT_EQ(d->host_used, 0u);
  EXPECT_TRUE(ChargeHost(*d, b, 3 * kGiB));
  d->host_used = 12345;  // a process died inside the lock
  Repair(*d);
  EXPECT_EQ(d->host_used, 3 * kGiB);
  std::string long_dir(300, 'x');
  EXPECT_FALSE(ConfigureSwap(*d, 0, long_dir.c_str()));
}

TEST(SwapAccounting, TargetsBumpTheSequenceAndTheSummarySaysWhenSettled) {
  auto d = Fresh({4 * kGiB});
  ASSERT_TRUE(ConfigureSwap(*d, kNoLimit, ""));
  const int a = ClaimSlot(*d, {100, 1});
  const int b = ClaimSlot(*d, {200, 1});
  const uint32_t seq = d->swap_seq;
  SetSwapTarget(*d, SwapTarget::kOut);
  EXPECT_EQ(d->swap_seq, seq + 1);
  SwapSummary s = SummarizeSwap(*d);
  EXPECT_EQ(s.processes, 2u);
  EXPECT_FALSE(s.SettledFor(SwapTarget::kOut));
  EXPECT_TRUE(s.SettledFor(SwapTarget::kResident));
  d->slots[a].swap_state = static_cast<uint32_t>(SwapState::kSwapped);
  d->slots[a].host_bytes = 7;
  d->slots[b].swap_state = static_cast<uint32_t>(SwapState::kUnswappable);
  d->slots[b].unswappable = static_cast<uint32_t>(Unswappable::kArray);
  s = SummarizeSwap(*d);
  EXPECT_TRUE(s.SettledFor(SwapTarget::kOut)) << "an unswappable process will not move: settled";
  EXPECT_FALSE(s.SettledFor(SwapTarget::kResident));
  EXPECT_EQ(s.first_reason, static_cast<uint32_t>(Unswappable::kArray));
  EXPECT_EQ(s.host_bytes, 7u);
  EXPECT_NE(std::string(UnswappableReason(s.first_reason)).find("arrays"), std::string::npos);
  d->slots[a].swap_state = static_cast<uint32_t>(SwapState::kSwappingIn);
  EXPECT_FALSE(SummarizeSwap(*d).SettledFor(SwapTarget::kResident));
  EXPECT_STREQ(SwapStateName(d->slots[a].swap_state), "resuming");
}

// The names the region tool and the agent show, one per value; a value from a newer writer is
// "unknown" rather than a read past the table.
TEST(SwapAccounting, EveryStateAndReasonHasItsNameAndStrangersAreUnknown) {
  EXPECT_STREQ(SwapStateName(static_cast<uint32_t>(SwapState::kResident)), "resident");
  EXPECT_STREQ(SwapStateName(static_cast<uint32_t>(SwapState::kSwappingOut)), "swapping-out");
  EXPECT_STREQ(SwapStateName(static_cast<uint32_t>(SwapState::kSwapped)), "swapped");
  EXPECT_STREQ(SwapStateName(static_cast<uint32_t>(SwapState::kUnswappable)), "unswappable");
  EXPECT_STREQ(SwapStateName(5), "unknown");
  EXPECT_STREQ(UnswappableReason(static_cast<uint32_t>(Unswappable::kNone)), "");
  EXPECT_NE(std::string(UnswappableReason(static_cast<uint32_t>(Unswappable::kExported)))
                .find("exported"),
            std::string::npos);
  EXPECT_NE(std::string(UnswappableReason(static_cast<uint32_t>(Unswappable::kBusy)))
                .find("did not return"),
            std::string::npos);
  EXPECT_STREQ(UnswappableReason(8), "unknown");
  EXPECT_STREQ(UnswappableReason(0xFFFFFFFFu), "unknown");
}

}  // namespace
}  // namespace tessera::capgpu
