// The one loader of the queue and quota policy. `tessera serve --config` and a scenario
// (`tessera sim scenario`) declare groups, pools, profiles, queues and the class-to-form table
// with the same keys, read here into quota::PolicySpec and checked by quota::Validate:
//
//   grace: 30s                # a preempted job keeps its slot this long (SIGTERM, then SIGKILL)
//   fair_share_half_life: 1h
//   repartition: true         # may the cycle change partition layouts
//   repartition_horizon: 1h
//   pools:    [{name, forms: [whole|partition|share]}]
//   groups:   [{name, parent, reservation: {gpu, gpu_memory, cpu, memory}, limit: {...}, weight,
//               users: {IDENTITY: {weight, limit: {...}}}}]   # fair share inside the group
//   profiles: [{name, gpus, gpu_fraction, gpu_memory, cpu, memory, max_gpus, max_gpu_memory,
//               forms, pools}]      # amounts per device; cpu and memory per device for GPU jobs
//   queues:   [{name, profile, groups, priority, preemptible, class, max_runtime, min_runtime,
//               preemption_delay, idle_timeout, idle_action: requeue|stop}]
//   class_forms: {training: [whole], inference: [partition], ...}
//
// A limit component not given is unlimited; one given as 0 is zero. The caller names the other
// keys its file may have (the server's identities and backends, a scenario's nodes and
// workload) and reads them itself; any other key is an error naming it.
//
// Thread-safety: pure functions.
#pragma once

#include <yaml-cpp/yaml.h>

#include <set>
#include <string>

#include "common/status.h"
#include "sched/quota/policy_model.h"

namespace tessera::policy {

struct PolicyKeys {
  std::set<std::string> extra_root;   // other top-level keys of the file
  std::set<std::string> extra_queue;  // other keys of a queue entry
  bool require_queues = false;        // at least one queue (the server); a scenario may have none
};

// The top-level keys ParsePolicy reads (a scenario's and the server config's shared part).
const std::set<std::string>& PolicyRootKeys();

// Reads the policy keys of `root` (a map). The caller validates (quota::Validate) once it has
// settled the pools (a scenario without pools takes them from its nodes).
Result<quota::PolicySpec> ParsePolicy(const YAML::Node& root, const PolicyKeys& keys);

// {training: [whole], ...} over `base`.
Result<quota::ClassForms> GetClassForms(const YAML::Node& n, const std::string& field,
                                        quota::ClassForms base);

}  // namespace tessera::policy
