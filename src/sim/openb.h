// Readers for the Alibaba openb trace files (cluster-trace-gpu-v2023), as used by the FGD paper.
//
//   nodes: sn,cpu_milli,memory_mib,gpu,model
//   pods:  name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,qos,pod_phase,creation_time,
//          deletion_time,scheduled_time]
//
// Errors name the file, the line and the column: a malformed or truncated row is refused, never
// guessed at.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "model/cluster.h"

namespace tessera::sim {

struct TracePod {
  std::string name;
  MilliCpu cpu_milli = 0;
  MiB memory_mib = 0;
  int num_gpu = 0;
  MilliGpu gpu_milli = 0;             // per GPU
  std::vector<std::string> gpu_spec;  // allowed models; empty = any
  // Times in seconds from the trace; -1 when the file has no such column (multigpu files) or
  // the cell is empty (scheduled_time of a pod that never ran).
  int64_t creation_time = -1;
  int64_t deletion_time = -1;
};

Result<std::vector<Node>> ReadOpenbNodes(const std::string& path);
Result<std::vector<TracePod>> ReadOpenbPods(const std::string& path);

// The same, from text already in memory (`path` is only used in messages).
Result<std::vector<Node>> ParseOpenbNodes(const std::string& text, const std::string& path);
Result<std::vector<TracePod>> ParseOpenbPods(const std::string& text, const std::string& path);

}  // namespace tessera::sim
