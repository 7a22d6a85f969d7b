#include "agent/partitions.h"

#include <algorithm>

#include "model/quantity.h"
#include "partition/catalog.h"

namespace tessera::agent {

Partitions::Partitions(const Inventory& inventory, std::string nvml_library,
                       std::string amdsmi_library)
    : inventory_(inventory),
      nvml_library_(std::move(nvml_library)),
      amdsmi_library_(std::move(amdsmi_library)) {
  // Real AMD devices start in the modes discovery found.
  for (const DiscoveredDevice& d : inventory_.devices) {
    const partition::GpuModel* m = partition::Catalog::BuiltIn().Find(d.model);
    if (d.simulated || d.amd_mode.empty() || m == nullptr || !m->is_amd()) continue;
    auto pair = partition::ParsePair(*m, d.amd_mode);
    if (pair.ok()) amd_[d.index].pair = *pair;
  }
}

Partitions::~Partitions() = default;

Result<Partitions::Granted> Partitions::Acquire(const std::string& job, int index,
                                                const std::string& slot,
                                                const std::string& amd_mode) {
  if (index < 0 || index >= static_cast<int>(inventory_.devices.size())) {
    return Status::InvalidArgument("device " + std::to_string(index) + " does not exist");
  }
  const DiscoveredDevice& d = inventory_.devices[index];
  const partition::GpuModel* model = partition::Catalog::BuiltIn().Find(d.model);
  if (slot.rfind('@') == std::string::npos) {
    if (slot.find('#') == std::string::npos) {
      return Status::InvalidArgument("partition '" + slot +
                                     "' is neither a MIG instance (profile@start) nor an "
                                     "AMD partition (MODE#index)");
    }
    if (model == nullptr || !model->is_amd())
      return Status::InvalidArgument(d.model + " has no AMD partitions");
    return AcquireAmd(job, index, *model, slot, amd_mode);
  }
  if (model == nullptr || !model->is_mig()) {
    return Status::InvalidArgument(d.model + " has no MIG instances");
  }
  auto parsed = partition::Instance::Parse(slot);
  if (!parsed.ok()) return parsed.status();
  partition::Instance in = *parsed;
  Granted g;
  if (!d.simulated) {
    auto made = AcquireNvml(job, index, *model, in);
    if (!made.ok()) return made.status();
    g.mig = *made;
    return g;
  }
  partition::Layout& layout = layouts_[index];
  Status st = partition::CreateInstance(*model, &layout, in);
  if (!st.ok())
    return Status::FailedPrecondition("MIG instance " + slot + " on " + d.uuid + ": " +
                                      st.message());
  by_job_.insert({job, {index, layout.instances.back(), {}}});
  std::string tail = d.uuid.rfind("GPU-", 0) == 0 ? d.uuid.substr(4) : d.uuid;
  g.mig = "MIG-" + tail + "-" + layout.instances.back().profile + "-" + std::to_string(in.start);
  return g;
}

Result<std::string> Partitions::AcquireNvml(const std::string& job, int index,
                                            const partition::GpuModel& model,
                                            const partition::Instance& in) {
  const DiscoveredDevice& d = inventory_.devices[index];
  const partition::MigProfile* p = model.mig.FindProfile(in.profile);
  if (p == nullptr || !p->nvidia_smi_profile_id) {
    return Status::InvalidArgument("MIG profile " + in.profile + " of " + model.name +
                                   " has no NVML profile id");
  }
  if (nvml_ == nullptr) {
    auto opened = NvmlMig::Open(nvml_library_);
    if (!opened.ok()) return opened.status();
    nvml_ = std::move(*opened);
  }
  RetryDestroys();  // an instance left in use may sit where this one goes
  auto made = nvml_->Create(d.uuid, *p->nvidia_smi_profile_id, in.start, p->memory_slices);
  if (!made.ok()) return made.status();
  by_job_.insert({job, {index, in, *made}});
  return made->uuid;
}

Result<Partitions::Granted> Partitions::AcquireAmd(const std::string& job, int index,
                                                   const partition::GpuModel& model,
                                                   const std::string& slot,
                                                   const std::string& mode) {
  const DiscoveredDevice& d = inventory_.devices[index];
  const size_t hash = slot.rfind('#');
  auto slot_mode = partition::ParsePair(model, slot.substr(0, hash) + "+NPS1");
  auto part = ParseNonNegativeInt(slot.substr(hash + 1));
  if (!slot_mode.ok() || !part.ok()) {
    return Status::InvalidArgument("AMD partition '" + slot +
                                   "' is not MODE#index (for example CPX#2)");
  }
  if (Status st = ReadAmd(index); !st.ok())
    return Status::FailedPrecondition("AMD partition " + slot + " on " + d.uuid + ": " +
                                      st.message());
  Amd& dev = amd_[index];
  partition::AmdPair want{slot_mode->compute, dev.pair.memory};
  if (!mode.empty()) {
    auto parsed = partition::ParsePair(model, mode);
    if (!parsed.ok()) return parsed.status();
    if (parsed->compute != want.compute) {
      return Status::InvalidArgument("AMD partition " + slot + " is not a partition of mode " +
                                     mode);
    }
    want = *parsed;
  }
  auto shape = partition::Partition(model, want);
  if (!shape.ok()) return shape.status();
  if (*part >= shape->partitions) {
    return Status::InvalidArgument("AMD partition " + slot + ": " + want.ToString() + " has " +
                                   std::to_string(shape->partitions) + " partition(s)");
  }
  if (!(want == dev.pair)) {
    Status st = SwitchAmd(index, model, want);
    if (!st.ok())
      return Status::FailedPrecondition("AMD partition " + slot + " on " + d.uuid + ": " +
                                        st.message());
  }
  auto [it, inserted] = dev.held.try_emplace(static_cast<int>(*part), job);
  if (!inserted) {
    return Status::FailedPrecondition("AMD partition " + slot + " on " + d.uuid +
                                      " is in use by job " + it->second);
  }
  Granted g;
  g.amd_index = static_cast<int>(*part);
  for (int i = 0; i < index; ++i) g.amd_index += LogicalGpus(i);
  return g;
}

Status Partitions::SwitchAmd(int index, const partition::GpuModel& model,
                             const partition::AmdPair& want) {
  Amd& dev = amd_[index];
  if (want.memory != dev.pair.memory) {
    // Hive-wide: every AMD device of the node of this model.
    std::vector<partition::AmdDevice> node;
    std::vector<int> indices;
    for (int i = 0; i < static_cast<int>(inventory_.devices.size()); ++i) {
      if (inventory_.devices[i].model != model.name) continue;
      if (Status st = ReadAmd(i); !st.ok()) return st;
      node.push_back({"device " + std::to_string(i), amd_[i].pair, Busy(i)});
      indices.push_back(i);
    }
    auto change = partition::CheckMemoryModeChange(model, node, want.memory);
    if (!change.ok()) return change.status();
    if (!inventory_.devices[index].simulated) {
      if (Status st = SetAmdMemory(indices, want.memory, change->resulting); !st.ok()) return st;
    } else {
      for (size_t k = 0; k < indices.size(); ++k) amd_[indices[k]].pair = change->resulting[k];
    }
  }
  if (want.compute != dev.pair.compute) {
    Status st = partition::CheckComputeModeChange(
        model, {"device " + std::to_string(index), dev.pair, Busy(index)}, want.compute);
    if (!st.ok()) return st;
    if (!inventory_.devices[index].simulated) return SetAmdCompute(index, want.compute);
    dev.pair.compute = want.compute;
  }
  return Status::Ok();
}

Result<AmdSmi*> Partitions::Smi() {
  if (amdsmi_ == nullptr) {
    auto opened = AmdSmi::Open(amdsmi_library_);
    if (!opened.ok()) return opened.status();
    amdsmi_ = std::move(*opened);
  }
  return amdsmi_.get();
}

Status Partitions::ReadAmd(int index) {
  const DiscoveredDevice& d = inventory_.devices[index];
  if (d.simulated) return Status::Ok();
  auto smi = Smi();
  if (!smi.ok()) return smi.status();
  auto modes = (*smi)->Modes(d.uuid);
  if (!modes.ok()) return modes.status();
  const partition::GpuModel* model = partition::Catalog::BuiltIn().Find(d.model);
  if (model == nullptr || !model->is_amd())
    return Status::InvalidArgument(d.model + " has no AMD modes");
  auto pair = partition::ParsePair(*model, modes->ToString());
  if (!pair.ok())
    return Status::FailedPrecondition("device " + d.uuid + " reports modes '" + modes->ToString() +
                                      "' through AMD SMI: " + pair.status().message());
  amd_[index].pair = *pair;
  return Status::Ok();
}

Status Partitions::SetAmdMemory(const std::vector<int>& indices, const std::string& memory,
                                const std::vector<partition::AmdPair>& resulting) {
  auto smi = Smi();
  if (!smi.ok()) return smi.status();
  // The driver applies a memory mode to the whole hive (and reloads): set it where a device
  // does not report it yet, reading anew before each, since an earlier call may have done it.
  for (int i : indices) {
    const std::string& uuid = inventory_.devices[i].uuid;
    auto now = (*smi)->Modes(uuid);
    if (!now.ok()) return now.status();
    if (now->memory == memory) continue;
    if (Status st = (*smi)->SetMemory(uuid, memory); !st.ok()) return st;
  }
  // Then every device in the memory mode, and in the compute mode the partition engine says it
  // ends in (the driver moves a compute mode not legal with the new memory mode).
  for (size_t k = 0; k < indices.size(); ++k) {
    const int i = indices[k];
    const std::string& uuid = inventory_.devices[i].uuid;
    auto now = (*smi)->Modes(uuid);
    if (!now.ok()) return now.status();
    if (now->memory != memory) {
      return Status::FailedPrecondition("device " + uuid + ": amdsmi_set_gpu_memory_partition(" +
                                        memory + ") did not take: it reports " + now->memory);
    }
    if (now->compute != resulting[k].compute) {
      if (Status st = SetAmdCompute(i, resulting[k].compute); !st.ok()) return st;
    } else if (Status st = ReadAmd(i); !st.ok()) {
      return st;
    }
  }
  return Status::Ok();
}

Status Partitions::SetAmdCompute(int index, const std::string& compute) {
  auto smi = Smi();
  if (!smi.ok()) return smi.status();
  const std::string& uuid = inventory_.devices[index].uuid;
  if (Status st = (*smi)->SetCompute(uuid, compute); !st.ok()) return st;
  auto now = (*smi)->Modes(uuid);
  if (!now.ok()) return now.status();
  if (now->compute != compute) {
    return Status::FailedPrecondition("device " + uuid + ": amdsmi_set_gpu_compute_partition(" +
                                      compute + ") did not take: it reports " +
                                      (now->compute.empty() ? "no mode" : now->compute));
  }
  return ReadAmd(index);
}

bool Partitions::Busy(int index) const {
  auto it = amd_.find(index);
  if (it != amd_.end() && !it->second.held.empty()) return true;
  for (const auto& [job, i] : used_) {
    if (i == index) return true;
  }
  return false;
}

int Partitions::LogicalGpus(int index) const {
  auto it = amd_.find(index);
  if (it == amd_.end()) return 1;
  const partition::GpuModel* model =
      partition::Catalog::BuiltIn().Find(inventory_.devices[index].model);
  if (model == nullptr) return 1;
  auto shape = partition::Partition(*model, it->second.pair);
  return shape.ok() ? shape->partitions : 1;
}

Result<std::string> Partitions::Use(const std::string& job, int index,
                                    const std::string& amd_mode) {
  std::string left;
  if (!amd_mode.empty() && index >= 0 && index < static_cast<int>(inventory_.devices.size())) {
    const DiscoveredDevice& d = inventory_.devices[index];
    const partition::GpuModel* model = partition::Catalog::BuiltIn().Find(d.model);
    if (model == nullptr || !model->is_amd())
      return Status::InvalidArgument(d.model + " has no AMD modes");
    if (Status st = ReadAmd(index); !st.ok())
      return Status::FailedPrecondition("device " + d.uuid + " to " + amd_mode + ": " +
                                        st.message());
    auto want = partition::ParsePair(*model, amd_mode);
    if (!want.ok()) return want.status();
    const partition::AmdPair was = amd_[index].pair;
    if (!(*want == was)) {
      Status st = SwitchAmd(index, *model, *want);
      if (!st.ok())
        return Status::FailedPrecondition("device " + d.uuid + " to " + amd_mode + ": " +
                                          st.message());
      left = was.ToString();
    }
  }
  used_.insert({job, index});
  return left;
}

size_t Partitions::RetryDestroys() {
  if (nvml_ == nullptr) return 0;
  std::erase_if(undestroyed_, [this](NvmlMig::Instance& i) { return nvml_->Destroy(i).ok(); });
  return undestroyed_.size();
}

void Partitions::Release(const std::string& job) {
  auto [lo, hi] = by_job_.equal_range(job);
  for (auto it = lo; it != hi; ++it) {
    if (it->second.nvml.gpu_instance != nullptr) {
      // The job's processes may still be exiting (it was just killed) and hold the instance:
      // tried again by RetryDestroys, and before the next instance is made.
      if (!nvml_->Destroy(it->second.nvml).ok()) undestroyed_.push_back(it->second.nvml);
      continue;
    }
    auto& v = layouts_[it->second.index].instances;
    auto f = std::find(v.begin(), v.end(), it->second.instance);
    if (f != v.end()) v.erase(f);
  }
  by_job_.erase(lo, hi);
  used_.erase(job);
  for (auto& [index, dev] : amd_) {
    for (auto it = dev.held.begin(); it != dev.held.end();)
      it = it->second == job ? dev.held.erase(it) : std::next(it);
  }
}

std::string Partitions::Layout(int index) const {
  auto amd = amd_.find(index);
  if (amd != amd_.end()) {
    if (LogicalGpus(index) <= 1) return "";
    std::string out = amd->second.pair.ToString() + ":";
    for (const auto& [part, job] : amd->second.held) out += " #" + std::to_string(part);
    return out;
  }
  auto it = layouts_.find(index);
  return it == layouts_.end() || it->second.empty() ? "" : it->second.ToString();
}

}  // namespace tessera::agent
