#include "partition/amd.h"

#include <algorithm>
#include <tuple>

#include "model/quantity.h"

namespace tessera::partition {
namespace {

std::string ComputeModeNames(const GpuModel& model) { return JoinedNames(model.amd.compute_modes); }

std::string MemoryModeNames(const GpuModel& model) { return JoinedNames(model.amd.memory_modes); }

Status UnknownComputeMode(const GpuModel& model, std::string_view name) {
  return Status::InvalidArgument("unknown compute mode '" + std::string(name) + "' on " +
                                 model.name + "; compute modes: " + ComputeModeNames(model));
}

Status UnknownMemoryMode(const GpuModel& model, std::string_view name) {
  return Status::InvalidArgument("unknown memory mode '" + std::string(name) + "' on " +
                                 model.name + "; memory modes: " + MemoryModeNames(model));
}

Status NotAmd(const GpuModel& model) {
  return Status::InvalidArgument(model.name + " is not an AMD partitionable device");
}

bool IsLegal(const GpuModel& model, std::string_view compute, std::string_view memory) {
  for (const auto& [c, m] : model.amd.legal_pairs) {
    if (EqualsIgnoreCase(c, compute) && EqualsIgnoreCase(m, memory)) return true;
  }
  return false;
}

// Memory modes legal with `compute`, "NPS1 or NPS4".
std::string MemoryModesFor(const GpuModel& model, std::string_view compute) {
  std::vector<std::string> names;
  for (const auto& [c, m] : model.amd.legal_pairs) {
    if (EqualsIgnoreCase(c, compute)) names.push_back(m);
  }
  if (names.empty()) return "no memory mode";
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    out += (i == 0 ? "" : (i + 1 == names.size() ? " or " : ", ")) + names[i];
  }
  return out;
}

}  // namespace

std::vector<AmdPair> LegalPairs(const GpuModel& model) {
  std::vector<AmdPair> out;
  for (const auto& [c, m] : model.amd.legal_pairs) out.push_back({c, m});
  return out;
}

Result<AmdPair> ParsePair(const GpuModel& model, std::string_view text) {
  if (!model.is_amd()) return NotAmd(model);
  size_t plus = text.find('+');
  if (plus == std::string_view::npos || text.find('+', plus + 1) != std::string_view::npos) {
    return Status::InvalidArgument("'" + std::string(text) + "' is not a mode pair like CPX+NPS4");
  }
  std::string_view compute = text.substr(0, plus);
  std::string_view memory = text.substr(plus + 1);
  const AmdComputeMode* c = model.amd.FindComputeMode(compute);
  if (c == nullptr) return UnknownComputeMode(model, compute);
  const AmdMemoryMode* m = model.amd.FindMemoryMode(memory);
  if (m == nullptr) return UnknownMemoryMode(model, memory);
  return AmdPair{c->name, m->name};
}

Result<AmdPartitioning> Partition(const GpuModel& model, const AmdPair& pair) {
  if (!model.is_amd()) return NotAmd(model);
  const AmdComputeMode* c = model.amd.FindComputeMode(pair.compute);
  const AmdMemoryMode* m = model.amd.FindMemoryMode(pair.memory);
  const std::string name = pair.ToString();
  if (c == nullptr) {
    return Status::InvalidArgument(name + " is not a legal pair on " + model.name +
                                   ": unknown compute mode " + pair.compute +
                                   " (modes: " + ComputeModeNames(model) + ")");
  }
  if (m == nullptr) {
    return Status::InvalidArgument(name + " is not a legal pair on " + model.name +
                                   ": unknown memory mode " + pair.memory +
                                   " (modes: " + MemoryModeNames(model) + ")");
  }
  const std::string canonical = c->name + "+" + m->name;
  if (m->domains > c->partitions) {
    return Status::InvalidArgument(canonical + " is not a legal pair on " + model.name +
                                   ": memory partitions (" + std::to_string(m->domains) +
                                   ") exceed compute partitions (" + std::to_string(c->partitions) +
                                   ")");
  }
  if (!IsLegal(model, c->name, m->name)) {
    return Status::InvalidArgument(canonical + " is not a legal pair on " + model.name + ": " +
                                   c->name + " pairs with " + MemoryModesFor(model, c->name) +
                                   " only");
  }
  AmdPartitioning out;
  out.pair = {c->name, m->name};
  out.partitions = c->partitions;
  out.memory_per_partition_mib = model.memory_mib / c->partitions;
  out.xcds_per_partition = c->xcds_per_partition;
  out.cus_per_partition = c->cus_per_partition;
  out.memory_domains = m->domains;
  for (const std::string& v : model.amd.validated_pairs) {
    out.validated = out.validated || EqualsIgnoreCase(v, canonical);
  }
  return out;
}

std::vector<AmdPartitioning> AllPartitionings(const GpuModel& model) {
  std::vector<AmdPartitioning> out;
  for (const AmdPair& p : LegalPairs(model)) {
    Result<AmdPartitioning> r = Partition(model, p);
    if (r.ok()) out.push_back(*r);
  }
  return out;
}

Status CheckComputeModeChange(const GpuModel& model, const AmdDevice& device,
                              std::string_view new_compute) {
  if (!model.is_amd()) return NotAmd(model);
  const AmdComputeMode* c = model.amd.FindComputeMode(new_compute);
  if (c == nullptr) return UnknownComputeMode(model, new_compute);
  if (device.busy) {
    return Status::FailedPrecondition("cannot change " + device.id + " to " + c->name +
                                      ": the device is busy; a compute-mode change needs "
                                      "every partition of the device idle");
  }
  if (!IsLegal(model, c->name, device.mode.memory)) {
    return Status::FailedPrecondition("cannot change " + device.id + " to " + c->name + ": " +
                                      c->name + "+" + device.mode.memory +
                                      " is not a legal pair on " + model.name + " (" + c->name +
                                      " pairs with " + MemoryModesFor(model, c->name) + ")");
  }
  return Status::Ok();
}

Result<MemoryModeChange> CheckMemoryModeChange(const GpuModel& model,
                                               const std::vector<AmdDevice>& node,
                                               std::string_view new_memory) {
  if (!model.is_amd()) return NotAmd(model);
  const AmdMemoryMode* m = model.amd.FindMemoryMode(new_memory);
  if (m == nullptr) return UnknownMemoryMode(model, new_memory);
  std::string busy;
  for (const AmdDevice& d : node) {
    if (d.busy) busy += (busy.empty() ? "" : ", ") + d.id;
  }
  if (!busy.empty()) {
    return Status::FailedPrecondition("cannot set " + m->name +
                                      ": a memory-mode change applies to every GPU in the hive "
                                      "and needs them all idle; busy: " +
                                      busy);
  }
  // The compute mode a device lands in when its own is not legal with the new memory mode.
  const AmdComputeMode* fallback = nullptr;
  for (const AmdComputeMode& c : model.amd.compute_modes) {
    if (IsLegal(model, c.name, m->name) &&
        (fallback == nullptr || c.partitions > fallback->partitions)) {
      fallback = &c;
    }
  }
  if (fallback == nullptr) {
    return Status::InvalidArgument(m->name + " pairs with no compute mode on " + model.name);
  }
  MemoryModeChange out;
  for (const AmdDevice& d : node) {
    out.affected.push_back(d.id);
    if (IsLegal(model, d.mode.compute, m->name)) {
      const AmdComputeMode* c = model.amd.FindComputeMode(d.mode.compute);
      out.resulting.push_back({c->name, m->name});
    } else {
      out.resulting.push_back({fallback->name, m->name});
    }
  }
  return out;
}

Result<AmdPartitioning> PlanAmd(const GpuModel& model, const std::vector<MiB>& wants_mib) {
  if (!model.is_amd()) return NotAmd(model);
  if (wants_mib.empty()) return Status::InvalidArgument("no partition sizes wanted");
  for (MiB w : wants_mib) {
    if (w <= 0) {
      return Status::InvalidArgument("wanted partition size must be positive, got " + FormatMiB(w));
    }
  }
  const MiB largest = *std::max_element(wants_mib.begin(), wants_mib.end());
  const int count = static_cast<int>(wants_mib.size());
  const AmdPartitioning* best = nullptr;
  std::vector<AmdPartitioning> all = AllPartitionings(model);
  for (const AmdPartitioning& p : all) {
    if (p.partitions < count || p.memory_per_partition_mib < largest) continue;
    if (best == nullptr || std::tie(p.memory_per_partition_mib, p.memory_domains) <
                               std::tie(best->memory_per_partition_mib, best->memory_domains)) {
      best = &p;
    }
  }
  if (best == nullptr) {
    std::string shapes;
    for (const AmdPartitioning& p : all) {
      shapes += (shapes.empty() ? "" : ", ") + p.pair.ToString() + " " +
                std::to_string(p.partitions) + " x " + FormatMiB(p.memory_per_partition_mib);
    }
    return Status::ResourceExhausted("no legal pair on " + model.name + " gives " +
                                     std::to_string(count) + " partition" +
                                     (count == 1 ? "" : "s") + " of at least " +
                                     FormatMiB(largest) + " (pairs: " + shapes + ")");
  }
  return *best;
}

}  // namespace tessera::partition
