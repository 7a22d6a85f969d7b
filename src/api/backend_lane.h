// BackendLane: one external backend (Slurm, PBS, Kubernetes) as the engine keeps it: the backend,
// its own pass lock and clocks (BackendExecutor::Pass), so that one backend's pass never waits for
// another's, what it last said it has for Tessera and the deletions its next pass owes.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backends/backend.h"

namespace tessera::api {

struct BackendLane {
  std::unique_ptr<backends::Backend> backend;  // fixed after Open: used without mu_
  std::mutex pass;                // serializes its passes (held without mu_ while commands run)
  int64_t last_poll_ms = 0;       // under mu_
  int64_t last_capacity_ms = -1;  // under mu_
  bool reconciled = false;        // under mu_: its scheduler's jobs were matched after open
  // Under mu_: its last command was answered. Not answering, it gets no new work; on its first
  // answer after that it is reconciled again (issue 39: its jobs adopted or removed).
  bool answering = true;
  bool several = false;  // fixed after Open: a queue over several backends lists it
  // Under mu_: what it last said it has for Tessera's jobs (GpuCapacity), refreshed every 5 polls;
  // the quota engine's external pool follows it. None: not asked since open or a reload.
  std::optional<backends::Capacity> capacity;
  // Under mu_: its jobs to delete whose Tessera job ended without its help (a suspended Kubernetes
  // Job of a job cancelled while pending), as (Tessera job id, external id); drained by its next
  // pass once the decision is durable.
  std::vector<std::pair<std::string, std::string>> deletes;
};

}  // namespace tessera::api
