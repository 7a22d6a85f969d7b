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
  if (!d.simulated) {
    return Status::FailedPrecondition("MIG instance " + slot + " on " + d.uuid +
                                      ": this agent does not create MIG instances through NVML yet");
  }
  const partition::GpuModel* model = partition::Catalog::BuiltIn().Find(d.model);
  if (model == nullptr || !model->is_mig()) {
    return Status::InvalidArgument(d.model + " has no MIG instances");
  }
  partition::Instance in{slot.substr(0, at), 0};
  try {
    in.start = std::stoi(slot.substr(at + 1));
  } catch (...) {
    return Status::InvalidArgument("partition '" + slot + "' has no start slice");
  }
  partition::Layout& layout = layouts_[index];
  Status st = partition::CreateInstance(*model, &layout, in);
  if (!st.ok()) return Status::FailedPrecondition("MIG instance " + slot + " on " + d.uuid + ": " + st.message());
  by_job_.insert({job, {index, layout.instances.back()}});
  std::string tail = d.uuid.rfind("GPU-", 0) == 0 ? d.uuid.substr(4) : d.uuid;
  return "MIG-" + tail + "-" + layout.instances.back().profile + "-" + std::to_string(in.start);
}

void Partitions::Release(const std::string& job) {
  auto [lo, hi] = by_job_.equal_range(job);
  for (auto it = lo; it != hi; ++it) {
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
