// Small clusters and requests for the placement-core tests.
#pragma once

#include <string>
#include <vector>

#include "sched/cluster_state.h"

namespace tessera::sched::testing {

inline Node MakeNode(const std::string& name, int gpus, MilliCpu cpu, MiB mem,
                     const std::string& model = "G2", MiB gpu_mem = 0) {
  Node n;
  n.name = name;
  n.cpu_milli = cpu;
  n.memory_mib = mem;
  for (int i = 0; i < gpus; ++i) n.devices.push_back(Device{i, model, gpu_mem});
  return n;
}

inline PlacementRequest Job(MilliCpu cpu, int gpus, MilliGpu milli, MiB mem = 1024) {
  PlacementRequest r;
  r.cpu_milli = cpu;
  r.memory_mib = mem;
  r.gpu_count = gpus;
  r.gpu_milli = gpus > 0 ? milli : 0;
  return r;
}

}  // namespace tessera::sched::testing
