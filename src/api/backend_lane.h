// BackendLane: one external backend's own pass lock and clocks (Engine::BackendPass), so that one
// backend's pass never waits for another's.
#pragma once

#include <cstdint>
#include <mutex>

namespace tessera::api {

struct BackendLane {
  std::mutex pass;                // serializes its passes (held without mu_ while commands run)
  int64_t last_poll_ms = 0;       // under mu_
  int64_t last_capacity_ms = -1;  // under mu_
  bool reconciled = false;        // under mu_: its scheduler's jobs were matched after open
  // Under mu_: its last command was answered. Not answering, it gets no new work; on its first
  // answer after that it is reconciled again (issue 39: its jobs adopted or removed).
  bool answering = true;
  bool several = false;  // fixed after Open: a queue over several backends lists it
};

}  // namespace tessera::api
