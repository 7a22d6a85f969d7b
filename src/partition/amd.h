// AMD Instinct partition engine: compute modes, memory (NPS) modes and their legal pairs.
//
// An MI300X-class device is cut by two independent settings:
//   * a compute mode: SPX (1 logical GPU of 8 XCDs), DPX (2 x 4), QPX (4 x 2), CPX (8 x 1);
//   * a memory mode: NPS1 (one memory domain), NPS2, NPS4 (four domains).
// Only some pairs are legal on bare metal (catalog `legal_pairs`); memory partitions never
// exceed compute partitions, so SPX+NPS4 is illegal. Each logical GPU gets an even share of
// the device memory: MI300X (192 GiB) in CPX has 8 partitions of 24 GiB, in NPS1 or NPS4.
//
// Changing modes:
//   * compute mode: the device must be idle (no work on any of its partitions) and the new
//     compute mode must be legal with the current memory mode;
//   * memory mode: applies to every GPU in the XGMI hive (here: the node) after a driver
//     reload, so every device on the node must be idle; devices whose compute mode is not
//     legal with the new memory mode switch to the legal compute mode with the most
//     partitions (MI300X: SPX -> CPX when NPS4 is set, as AMD documents).
//
// Thread-safety: stateless functions over value types.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "partition/catalog.h"

namespace tessera::partition {

// A (compute mode, memory mode) pair, canonical names, e.g. {"CPX", "NPS4"}.
struct AmdPair {
  std::string compute;
  std::string memory;

  friend bool operator==(const AmdPair&, const AmdPair&) = default;
  // "CPX+NPS4"
  std::string ToString() const { return compute + "+" + memory; }
};

// The shape of a device in one legal pair.
struct AmdPartitioning {
  AmdPair pair;
  int partitions = 0;                // logical GPUs
  MiB memory_per_partition_mib = 0;  // model memory / partitions, rounded down
  int xcds_per_partition = 0;
  int cus_per_partition = 0;
  int memory_domains = 0;
  bool validated = false;  // AMD itself validated this pair
};

// Legal pairs of the model, in catalog order. REQUIRES: model.is_amd().
std::vector<AmdPair> LegalPairs(const GpuModel& model);

// Parses "CPX+NPS4" (case-insensitive) into canonical mode names of `model`; an unknown mode
// is kInvalidArgument naming the model's modes. Does not check legality.
Result<AmdPair> ParsePair(const GpuModel& model, std::string_view text);

// The partitioning for a pair; kInvalidArgument naming the pair and why it is illegal, e.g.
// "SPX+NPS4 is not a legal pair on MI300X: memory partitions (4) exceed compute partitions (1)".
Result<AmdPartitioning> Partition(const GpuModel& model, const AmdPair& pair);

// Every legal pair's partitioning, in catalog order.
std::vector<AmdPartitioning> AllPartitionings(const GpuModel& model);

// One device of a node, as the mode-change checks see it.
struct AmdDevice {
  std::string id;  // e.g. "gpu3"
  AmdPair mode;
  bool busy = false;  // some partition runs work
};

// OK when `device` may switch to compute mode `new_compute`; kFailedPrecondition when it is
// busy or the new mode is not legal with its current memory mode; kInvalidArgument for an
// unknown mode.
Status CheckComputeModeChange(const GpuModel& model, const AmdDevice& device,
                              std::string_view new_compute);

struct MemoryModeChange {
  std::vector<std::string> affected;  // every device on the node (the change is hive-wide)
  std::vector<AmdPair> resulting;     // each device's pair afterwards, same order
};

// Checks a hive-wide memory-mode change to `new_memory`: kFailedPrecondition naming the busy
// devices when any device of the node is busy; kInvalidArgument for an unknown or unusable
// mode. REQUIRES: every device in `node` is a `model`.
Result<MemoryModeChange> CheckMemoryModeChange(const GpuModel& model,
                                               const std::vector<AmdDevice>& node,
                                               std::string_view new_memory);

// Chooses the legal pair with the smallest partitions that still hold the largest want, with
// at least as many partitions as wants. Ties go to fewer memory domains (no hive-wide NPS
// change from the NPS1 default). kResourceExhausted when no pair fits; kInvalidArgument when
// `wants_mib` is empty or holds a non-positive size.
Result<AmdPartitioning> PlanAmd(const GpuModel& model, const std::vector<MiB>& wants_mib);

}  // namespace tessera::partition
