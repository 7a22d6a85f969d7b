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
// AMD devices (MI300X-class) are cut by a compute mode and a memory mode (partition/amd.h). A
// grant's slot names one logical GPU ("CPX#2") and the start order carries the device's pair
// ("CPX+NPS4"); the agent switches modes under the partition engine's rules: a compute mode
// only on an idle device, a memory mode only when every device of the node (the hive) is idle.
// The partition is exposed by its logical GPU index (ROCR_VISIBLE_DEVICES): the partitions of
// the devices before it, then its own index. On a simulated device the modes are kept here; on
// a real one (found through AMD SMI) they are read from the device before each decision, set
// through AMD SMI (agent/amd_smi.h: amdsmi_set_gpu_memory_partition on the hive, then
// amdsmi_set_gpu_compute_partition) under the same rules, and read back: a change that did not
// take, like a call that failed, refuses the job with the device, the call and AMD SMI's status.
//
// Thread-safety: none; the agent's loop owns it.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "agent/amd_smi.h"
#include "agent/discovery.h"
#include "agent/nvml_mig.h"
#include "common/status.h"
#include "partition/amd.h"
#include "partition/mig.h"

namespace tessera::agent {

class Partitions {
 public:
  Partitions(const Inventory& inventory, std::string nvml_library,
             std::string amdsmi_library = "libamd_smi.so");
  ~Partitions();

  // What a job is given for one partition.
  struct Granted {
    std::string mig;     // MIG: the instance's UUID ("MIG-...")
    int amd_index = -1;  // AMD: the logical GPU index
  };
  // The partition `slot` on device `index` for `job`: created (simulated MIG, NVML) or switched
  // to (AMD, `amd_mode` the device's pair; "" keeps its memory mode), or refused with the reason.
  Result<Granted> Acquire(const std::string& job, int index, const std::string& slot,
                          const std::string& amd_mode = "");
  // Marks device `index` in use by `job` without a partition (a whole card, a share): an AMD
  // device in use cannot change mode. `amd_mode` is the device's pair in the order: a simulated
  // AMD device in another one is switched to it first (a card the cycle returned to SPX+NPS1
  // after partitions), or refused with the reason. Returns the pair it left ("" if unchanged).
  Result<std::string> Use(const std::string& job, int index, const std::string& amd_mode = "");
  // Removes what `job` held.
  void Release(const std::string& job);
  // MIG instances whose destroy failed at Release (their processes still exiting) are tried
  // again; returns how many are left. The agent calls it every loop while any are.
  size_t RetryDestroys();
  // "1g.10gb@6, 3g.40gb@0" for device `index`; "CPX+NPS1: #0 #3" for an AMD device in a split
  // mode; "" when it has none.
  std::string Layout(int index) const;

 private:
  struct Held {
    int index = 0;
    partition::Instance instance;
    NvmlMig::Instance nvml;  // on NVML devices
  };
  struct Amd {
    partition::AmdPair pair{"SPX", "NPS1"};
    std::map<int, std::string> held;  // partition index -> job
  };
  Result<std::string> AcquireNvml(const std::string& job, int index,
                                  const partition::GpuModel& model, const partition::Instance& in);
  Result<Granted> AcquireAmd(const std::string& job, int index, const partition::GpuModel& model,
                             const std::string& slot, const std::string& mode);
  Status SwitchAmd(int index, const partition::GpuModel& model, const partition::AmdPair& want);
  // Real AMD devices: reads device `index`'s modes into amd_; sets and verifies them.
  Status ReadAmd(int index);
  Status SetAmdMemory(const std::vector<int>& indices, const std::string& memory,
                      const std::vector<partition::AmdPair>& resulting);
  Status SetAmdCompute(int index, const std::string& compute);
  Result<AmdSmi*> Smi();
  bool Busy(int index) const;
  int LogicalGpus(int index) const;  // logical GPUs of device `index` now (1 for a non-AMD one)
  const Inventory& inventory_;
  std::string nvml_library_;
  std::string amdsmi_library_;
  std::unique_ptr<NvmlMig> nvml_;   // opened at the first NVML partition
  std::unique_ptr<AmdSmi> amdsmi_;  // opened at the first real AMD device's mode
  std::vector<NvmlMig::Instance> undestroyed_;
  std::map<int, partition::Layout> layouts_;  // by device index
  std::multimap<std::string, Held> by_job_;
  std::map<int, Amd> amd_;                // by device index
  std::multimap<std::string, int> used_;  // whole devices in use, by job
};

}  // namespace tessera::agent
