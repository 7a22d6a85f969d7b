#include "api/decision_counters.h"

#include <algorithm>

namespace tessera::api {

void DecisionCounters::Counts::Add(const Counts& o) {
  for (const auto& [k, v] : o.admissions) admissions[k] += v;
  for (const auto& [k, v] : o.preemptions) preemptions[k] += v;
  for (const auto& [k, v] : o.repartitions) repartitions[k] += v;
}

void DecisionCounters::Count(int64_t seq, const quota::Event& e,
                             const std::optional<Placed>& placed) {
  Counts& c = pending_[seq];
  switch (e.kind) {
    case quota::EventKind::kPlaced:
      if (placed)
        ++c.admissions[{placed->queue, placed->group,
                        placed->borrowed ? "borrowed" : "guaranteed"}];
      break;
    case quota::EventKind::kPreempted: {
      const std::string& d = e.detail;
      const char* why = d.rfind("reclaim", 0) == 0                       ? "reclaim"
                        : d.rfind("priority", 0) == 0                    ? "priority"
                        : d.find("for repartition") != std::string::npos ? "repartition"
                                                                         : "other";
      ++c.preemptions[why];
      break;
    }
    case quota::EventKind::kSwappedOut:  // held swapped out: a preemption that lost no work
      if (!e.for_job.empty()) ++c.preemptions["held_swapped"];
      break;
    case quota::EventKind::kRepartitioned: {
      // "NODE/gpuN: what changed"
      const std::string device = e.detail.substr(0, e.detail.find(':'));
      ++c.repartitions[device.substr(0, device.rfind('/'))];
      break;
    }
    default:
      break;
  }
}

void DecisionCounters::Settle(const Outcome& outcome) {
  for (auto it = pending_.begin(); it != pending_.end();) {
    const std::optional<Status> done = outcome(it->first);
    if (!done) break;  // not written yet, nor any after it
    if (done->ok()) durable_.Add(it->second);
    it = pending_.erase(it);
  }
}

void DecisionCounters::ObserveRequest(const std::string& method, const std::string& route, int code,
                                      int64_t duration_us) {
  std::lock_guard<std::mutex> l(http_mu_);
  http_[{method, route, code}].Observe(duration_us);
}

std::map<std::tuple<std::string, std::string, int>, LatencyHistogram>
DecisionCounters::RequestLatencies() const {
  std::lock_guard<std::mutex> l(http_mu_);
  return http_;
}

void LatencyHistogram::Observe(int64_t us) {
  us = std::max<int64_t>(us, 0);
  if (counts.empty()) counts.assign(kBoundsUs.size() + 1, 0);  // LatencyHistogram::kBoundsUs
  const size_t i = static_cast<size_t>(std::lower_bound(kBoundsUs.begin(), kBoundsUs.end(), us) -
                                       kBoundsUs.begin());
  ++counts[i];  // the first bucket whose bound is >= us (le: less than or equal)
  ++count;
  sum_us += us;
}

}  // namespace tessera::api
