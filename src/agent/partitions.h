// Hardware partitions on the agent's devices, made when a job granted one starts and removed
// when it ends: what turns a grant's slot ("1g.10gb@6", chosen by the control plane's cycle)
// into the MIG instance the job sees (CUDA_VISIBLE_DEVICES=MIG-<uuid>).
//
// On a simulated inventory the instances are kept here under the partition engine's rules (a
// start slice the model does not allow, or one overlapping a live instance, is refused), so the
// whole path runs on a machine without a GPU. On NVML devices they are made through NVML
// (nvml_mig.h): a GPU instance at that start slice, one compute instance over it; a job whose
// instance cannot be made fails to start with the reason, rather than running on the whole card.
//
// Thread-safety: none; the agent's loop owns it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <memory>

#include "agent/discovery.h"
#include "agent/nvml_mig.h"
#include "common/status.h"
#include "partition/mig.h"

namespace tessera::agent {

class Partitions {
 public:
  Partitions(const Inventory& inventory, std::string nvml_library)
      : inventory_(inventory), nvml_library_(std::move(nvml_library)) {}

  // The instance for `slot` on device `index` for `job`: created (simulated) or refused. Returns
  // the UUID to expose ("MIG-..."), or "" for AMD partitions (exposed by index).
  Result<std::string> Acquire(const std::string& job, int index, const std::string& slot);
  // Removes what `job` held.
  void Release(const std::string& job);
  // "1g.10gb@6, 3g.40gb@0" for device `index`, "" when it has none.
  std::string Layout(int index) const;

 private:
  struct Held {
    int index = 0;
    partition::Instance instance;
    NvmlMig::Instance nvml;  // on NVML devices
  };
  Result<std::string> AcquireNvml(const std::string& job, int index, const partition::GpuModel& model,
                                  const partition::Instance& in);
  const Inventory& inventory_;
  std::string nvml_library_;
  std::unique_ptr<NvmlMig> nvml_;  // opened at the first NVML partition
  std::map<int, partition::Layout> layouts_;       // by device index
  std::multimap<std::string, Held> by_job_;
};

}  // namespace tessera::agent
