// One queue over several external backends (issue 39): which backend an admitted job goes to.
// The backends run what they are given; the choice is made here, in the cycle, against the one
// ledger every backend's jobs are charged to (group limits count them all once).
#include "sched/quota/engine_impl.h"

namespace tessera::quota::internal {

void Engine::SetExternalAnswering(const std::string& pool, bool answering) {
  if (answering) {
    ext_down_.erase(pool);
  } else {
    ext_down_.insert(pool);
  }
}

void Engine::SetExternalPool(int handle, const std::string& pool) {
  Job& j = jobs_[handle];
  // Only among its queue's pools: a queue of one backend keeps the pool its config gives.
  if (!j.external || j.state != JobState::kPending) return;
  if (std::find(j.ext_pools.begin(), j.ext_pools.end(), pool) != j.ext_pools.end()) {
    j.ext_pool = pool;
  }
}

// Each pool's predicted start for `need` thousandths of a card: now when it fits beside what
// Tessera holds there, else when enough of those holds end (their start plus walltime), never
// for a pool that is not answering or whose holds declared no end. The earliest wins; the first
// in the queue's order on a tie. A job that starts nowhere now waits here, not in a backend, so
// it is never bound to a backend before it can run there.
bool Engine::ChoosePool(Job& j, int64_t need, std::string* reason) {
  std::map<std::string, std::vector<PoolHold>> holds;
  for (const Job& x : jobs_) {
    if (!x.external || x.ext_pool.empty() || x.charge.gpu_milli <= 0) continue;
    if (x.state == JobState::kRunning) {
      const int64_t end = x.walltime > 0 && x.start >= 0 ? x.start + x.walltime : kForecastNever;
      holds[x.ext_pool].push_back({x.charge.gpu_milli, end});
    } else if (x.state == JobState::kTerminating) {
      holds[x.ext_pool].push_back({x.charge.gpu_milli, std::max(now_, x.grace_end)});
    }
  }
  j.dispatch.clear();
  for (const std::string& pool : j.ext_pools) {
    PoolForecast f{pool, kForecastNever, ""};
    auto cap = ext_cap_.find(pool);
    const int64_t capacity = cap == ext_cap_.end() ? -1 : cap->second;
    if (ext_down_.count(pool)) {
      f.note = "not answering";
    } else {
      f.start = PredictStart(capacity, now_, holds[pool], need);
      if (capacity >= 0 && f.start > now_) {
        f.note = FormatMilli(std::max<int64_t>(0, capacity - ext_used_[pool])) + " of " +
                 FormatMilli(capacity) + " GPU free";
      }
    }
    j.dispatch.push_back(f);
  }
  const int best = ChooseEarliest(j.dispatch);
  if (best < 0 || j.dispatch[best].start > now_) {
    j.ext_pool.clear();
    *reason = "no backend has room now: " + DescribeForecasts(j.dispatch, now_);
    return false;
  }
  j.ext_pool = j.dispatch[best].pool;
  return true;
}

}  // namespace tessera::quota::internal
