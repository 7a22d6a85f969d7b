#include "agent/partitions.h"

#include <algorithm>

#include "partition/catalog.h"

namespace tessera::agent {

Result<std::string> Partitions::Acquire(const std::string& job, int index, const std::string& slot) {
  if (index < 0 || index >= static_cast<int>(inventory_.devices.size())) {
    return Status::InvalidArgument("device " + std::to_string(index) + " does not exist");
  }
  const DiscoveredDevice& d = inventory_.devices[index];
  const size_t at = slot.rfind('@');
  if (at == std::string::npos) {
    if (slot.find('#') != std::string::npos && d.simulated) return std::string();  // AMD: by index
    return Status::InvalidArgument("partition '" + slot + "' is not a MIG instance (profile@start)");
  }
  const partition::GpuModel* model = partition::Catalog::BuiltIn().Find(d.model);
  if (model == nullptr || !model->is_mig()) {
    return Status::InvalidArgument(d.model + " has no MIG instances");
  }
  auto parsed = partition::Instance::Parse(slot);
  if (!parsed.ok()) return parsed.status();
  partition::Instance in = *parsed;
  if (!d.simulated) return AcquireNvml(job, index, *model, in);
  partition::Layout& layout = layouts_[index];
  Status st = partition::CreateInstance(*model, &layout, in);
  if (!st.ok()) return Status::FailedPrecondition("MIG instance " + slot + " on " + d.uuid + ": " + st.message());
  by_job_.insert({job, {index, layout.instances.back(), {}}});
  std::string tail = d.uuid.rfind("GPU-", 0) == 0 ? d.uuid.substr(4) : d.uuid;
  return "MIG-" + tail + "-" + layout.instances.back().profile + "-" + std::to_string(in.start);
}

Result<std::string> Partitions::AcquireNvml(const std::string& job, int index, const partition::GpuModel& model,
                                            const partition::Instance& in) {
  const DiscoveredDevice& d = inventory_.devices[index];
  const partition::MigProfile* p = model.mig.FindProfile(in.profile);
  if (p == nullptr || !p->nvidia_smi_profile_id) {
    return Status::InvalidArgument("MIG profile " + in.profile + " of " + model.name + " has no NVML profile id");
  }
  if (nvml_ == nullptr) {
    auto opened = NvmlMig::Open(nvml_library_);
    if (!opened.ok()) return opened.status();
    nvml_ = std::move(*opened);
  }
  auto made = nvml_->Create(d.uuid, *p->nvidia_smi_profile_id, in.start, p->memory_slices);
  if (!made.ok()) return made.status();
  by_job_.insert({job, {index, in, *made}});
  return made->uuid;
}

void Partitions::Release(const std::string& job) {
  auto [lo, hi] = by_job_.equal_range(job);
  for (auto it = lo; it != hi; ++it) {
    if (it->second.nvml.gpu_instance != nullptr) {
      (void)nvml_->Destroy(it->second.nvml);  // a failure leaves an instance the next layout replaces
      continue;
    }
    auto& v = layouts_[it->second.index].instances;
    auto f = std::find(v.begin(), v.end(), it->second.instance);
    if (f != v.end()) v.erase(f);
  }
  by_job_.erase(lo, hi);
}

std::string Partitions::Layout(int index) const {
  auto it = layouts_.find(index);
  return it == layouts_.end() || it->second.empty() ? "" : it->second.ToString();
}

}  // namespace tessera::agent
