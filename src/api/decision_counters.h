// DecisionCounters: what /metrics counts of the scheduling cycle's decisions (placements by
// queue, group and kind; preemptions by reason; repartitions by node) and how long the cycles
// and requests took.
//
// A decision is counted with the batch that carries it and moves to the counts /metrics shows
// only once that batch is written; the counts of a batch whose write failed are dropped with
// its decisions, so /metrics never counts what did not happen. Decision counts and the cycle's
// latency are kept under the engine's mutex; request latencies take a small lock of their own.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>

#include "api/cycle_budget.h"
#include "common/status.h"
#include "sched/quota/engine.h"

namespace tessera::api {

class DecisionCounters {
 public:
  struct Counts {
    std::map<std::tuple<std::string, std::string, std::string>, int64_t> admissions;
    std::map<std::string, int64_t> preemptions;
    std::map<std::string, int64_t> repartitions;
    void Add(const Counts& o);
  };
  // What a placement is counted under: its job's queue, group and whether it was borrowed.
  struct Placed {
    std::string queue, group;
    bool borrowed = false;
  };
  // Counts quota engine event `e` (a placement of `placed`'s job, a preemption, a held swap, a
  // repartition; other kinds are not counted) into batch `seq`.
  void Count(int64_t seq, const quota::Event& e, const std::optional<Placed>& placed);
  // Batch seq's outcome: nullopt while it is not written yet, else whether its write succeeded.
  using Outcome = std::function<std::optional<Status>(int64_t seq)>;
  // Moves the counts of batches written, in order, to the durable counts (dropping a failed
  // one's), up to the first not yet written.
  void Settle(const Outcome& outcome);
  void DropUnsettled() { pending_.clear(); }  // their batches were dropped (a reload)
  const Counts& durable() const { return durable_; }

  LatencyHistogram& cycle_latency() { return cycle_; }
  const LatencyHistogram& cycle_latency() const { return cycle_; }

  // Request latency by method, route pattern and status code (any thread).
  void ObserveRequest(const std::string& method, const std::string& route, int code,
                      int64_t duration_us);
  std::map<std::tuple<std::string, std::string, int>, LatencyHistogram> RequestLatencies() const;

 private:
  Counts durable_;
  std::map<int64_t, Counts> pending_;  // by batch
  LatencyHistogram cycle_;
  mutable std::mutex http_mu_;
  std::map<std::tuple<std::string, std::string, int>, LatencyHistogram> http_;  // under http_mu_
};

}  // namespace tessera::api
