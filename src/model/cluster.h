// The domain model: devices, nodes, pools, job requests and allocations.
//
// Plain value types shared by the placement core, the simulator and (later) the store and API.
// All capacities are integers in fixed units (see resources.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/resources.h"

namespace tessera {

// The form in which a job holds GPU capacity.
enum class AllocationForm {
  kWhole,      // one or more entire devices
  kPartition,  // a hardware slice: a MIG GPU instance or an AMD compute partition
  kShare,      // a memory-capped slice of a device or partition, compute time-sliced
};
const char* AllocationFormName(AllocationForm form);

// One physical accelerator on a node.
struct Device {
  int index = 0;       // position on its node, 0-based
  std::string model;   // a key into the partition catalog, or an opaque trace model ("G2")
  MiB memory_mib = 0;  // 0 when unknown (trace models)
};

struct Node {
  std::string name;
  std::string pool;  // empty: the default pool
  MilliCpu cpu_milli = 0;
  MiB memory_mib = 0;
  std::vector<Device> devices;

  // GPU model of the node's devices, or "" for a CPU-only node. Nodes are homogeneous.
  const std::string& gpu_model() const;
};

struct Pool {
  std::string name;
  std::vector<AllocationForm> forms;  // what this pool may grant
};

// What a job asks for. A job either needs no GPU (gpu_count == 0), a fraction of one device
// (gpu_count == 1, gpu_milli_per_device < 1000), or whole devices (gpu_milli_per_device == 1000).
struct JobRequest {
  std::string id;
  MilliCpu cpu_milli = 0;
  MiB memory_mib = 0;
  int gpu_count = 0;
  MilliGpu gpu_milli_per_device = 0;
  MiB gpu_memory_mib_per_device = 0;    // 0: no GPU-memory constraint
  std::vector<std::string> gpu_models;  // empty: any model

  // Total GPU demand in milli-GPU.
  MilliGpu total_gpu_milli() const { return gpu_count * gpu_milli_per_device; }
};

// What a job holds on one device.
struct DeviceGrant {
  int device_index = 0;
  MilliGpu gpu_milli = 0;
  MiB gpu_memory_mib = 0;
};

struct Allocation {
  std::string job_id;
  std::string node;
  AllocationForm form = AllocationForm::kShare;
  MilliCpu cpu_milli = 0;
  MiB memory_mib = 0;
  std::vector<DeviceGrant> devices;
};

// A node's name, as an agent sends it and as every view and terminal shows it: 1 to 253
// printable ASCII characters, without spaces or '/'. The one rule, for the agent (at its start)
// and the server (at every registration, heartbeat and order poll).
Status ValidateNodeName(const std::string& node);

}  // namespace tessera
