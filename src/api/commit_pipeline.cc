// The commit pipeline: changes are queued under the engine's mutex (QueueLocked) and written
// in order by one writer thread (WriterLoop) that holds only its own mutex, several batches per
// transaction when they queue up; callers wait for their batch (CommitLocked). A failed write
// drops what was queued on the memory that ran ahead of it and rebuilds memory from the store
// (CatchUpLocked, ReloadLocked in engine.cc). Ended jobs leave memory here once durable.
#include <algorithm>
#include <iterator>
#include <set>

#include "api/engine.h"

namespace tessera::api {

namespace {

Json DrainJson(const quota::QuotaEngine::Drain& d) {
  return {{"node", d.node}, {"device", d.device}, {"job", d.job}, {"evict", d.evict}, {"add", d.add},
          {"enable_mig", d.enable_mig}, {"amd_pair", d.amd_pair}, {"node_wide", d.node_wide}, {"why", d.why}};
}

}  // namespace

Status Engine::Sync() {
  std::unique_lock<std::mutex> lock(mu_);
  Batch none;
  return CommitLocked(none, lock);
}

int64_t Engine::QueueLocked(Batch& b) {
  // Drains in progress ride with the decisions that started or ended them, so that a restart
  // finds every drain it must finish (device.drains: the whole set, when it changed).
  if (qe_->MayHaveDrains() || !drains_.empty()) {
    std::vector<quota::QuotaEngine::Drain> now = qe_->Drains();
    if (now != drains_) {
      Json list = Json::array();
      for (const auto& d : now) list.push_back(DrainJson(d));
      b.Add(MakeEvent("engine", "device.drains", "cluster", std::to_string(now.size()) + " drain(s) in progress",
                      {{"drains", list}}),
            nullptr);
      drains_ = std::move(now);
    }
  }
  if (b.empty()) {
    b = {};
    return 0;
  }
  QueuedCommit q;
  q.seq = ++queued_seq_;
  q.epoch = epoch_;
  q.events = std::move(b.events);
  q.records.reserve(b.jobs.size());
  q.jobs.reserve(b.jobs.size());
  for (Job* j : b.jobs) {
    j->last_seq = q.seq;
    q.records.push_back(RecordOf(*j));
    q.jobs.push_back(j->rec.id);
    for (const auto& g : j->grants) node_seq_[g.node] = q.seq;
  }
  for (const std::string& n : b.nodes) node_seq_[n] = q.seq;
  b = {};
  {
    std::lock_guard<std::mutex> w(wmu_);
    commit_queue_.push_back(std::move(q));
  }
  work_cv_.notify_one();
  return queued_seq_;
}

Status Engine::CommitLocked(Batch& b, std::unique_lock<std::mutex>& lock, const std::string* node) {
  const int64_t seq = QueueLocked(b);
  int64_t target = queued_seq_;
  if (node != nullptr && seq == 0) {
    auto it = node_seq_.find(*node);
    target = it == node_seq_.end() ? 0 : it->second;
  }
  Status result;
  lock.unlock();
  {
    std::unique_lock<std::mutex> w(wmu_);
    durable_cv_.wait(w, [&] { return written_seq_ >= target; });
    for (const CommitFailure& f : commit_failures_) {
      if (f.first <= target && target <= f.last) result = f.why;
    }
  }
  lock.lock();
  CatchUpLocked();
  return result;
}

void Engine::CatchUpLocked() {
  std::vector<std::string> stored;
  bool reload = false;
  Status cause;
  int64_t written = 0;
  {
    std::lock_guard<std::mutex> w(wmu_);
    stored.swap(newly_stored_);
    reload = dropped_epoch_ >= epoch_;
    cause = last_failure_;
    written = written_seq_;
  }
  for (const std::string& id : stored) {
    auto it = jobs_.find(id);
    if (it != jobs_.end()) it->second.stored = true;
  }
  // Memory ran ahead of the store by a failed write and whatever was queued after it.
  if (reload) {
    (void)ReloadLocked(cause);
    return;
  }
  if (ended_.size() > 2 * kEndedKept) EvictEndedLocked(written);
}

void Engine::EvictEndedLocked(int64_t written) {
  // The oldest ended jobs leave memory once their last record is durable; the views read them
  // from the store. One pass over the indexes for a thousand or more at a time.
  std::set<std::string> gone;
  std::deque<std::string> keep;
  while (ended_.size() > kEndedKept) {
    std::string id = std::move(ended_.front());
    ended_.pop_front();
    auto it = jobs_.find(id);
    if (it == jobs_.end() || !Ended(it->second)) continue;  // gone already, or requeued since
    if (it->second.last_seq > written) {
      keep.push_back(std::move(id));
      continue;
    }
    if (it->second.handle >= 0 && it->second.handle < static_cast<int>(by_handle_.size())) {
      by_handle_[it->second.handle] = nullptr;
    }
    if (!it->second.rec.idempotency_key.empty()) idem_.erase(it->second.rec.idempotency_key);
    jobs_.erase(it);
    gone.insert(std::move(id));
  }
  for (auto& id : keep) ended_.push_front(std::move(id));
  if (gone.empty()) return;
  auto out = [&](const std::string& id) { return gone.count(id) != 0; };
  live_.erase(std::remove_if(live_.begin(), live_.end(), out), live_.end());
  order_.erase(std::remove_if(order_.begin(), order_.end(), out), order_.end());
  for (auto& [node, ids] : node_jobs_) ids.erase(std::remove_if(ids.begin(), ids.end(), out), ids.end());
}

void Engine::WriterLoop() {
  std::unique_lock<std::mutex> w(wmu_);
  while (true) {
    work_cv_.wait(w, [&] { return stop_writer_ || !commit_queue_.empty(); });
    if (commit_queue_.empty()) return;  // stopping, and everything queued was written
    std::deque<QueuedCommit> group;
    group.swap(commit_queue_);
    // What was queued before the reload that follows a failed write rests on the memory that
    // ran ahead: dropped (epochs only grow along the queue, so it is a prefix).
    size_t dropped = 0;
    while (dropped < group.size() && group[dropped].epoch <= dropped_epoch_) ++dropped;
    if (dropped > 0) {
      commit_failures_.push_back({group.front().seq, group[dropped - 1].seq,
                                  Status::Internal("not recorded: an earlier commit failed (" +
                                                      last_failure_.message() + ")")});
      written_seq_ = group[dropped - 1].seq;
      group.erase(group.begin(), group.begin() + static_cast<std::ptrdiff_t>(dropped));
    }
    if (!group.empty()) {
      std::vector<store::Event> events;
      std::vector<store::JobRecord> records;
      for (QueuedCommit& q : group) {
        std::move(q.events.begin(), q.events.end(), std::back_inserter(events));
        std::move(q.records.begin(), q.records.end(), std::back_inserter(records));
      }
      w.unlock();
      const Status st = store_->Commit(events, records, nullptr);
      w.lock();
      written_seq_ = group.back().seq;
      if (st.ok()) {
        durable_seq_ = group.back().seq;
        for (QueuedCommit& q : group) {
          std::move(q.jobs.begin(), q.jobs.end(), std::back_inserter(newly_stored_));
        }
      } else {
        dropped_epoch_ = group.back().epoch;
        last_failure_ = st;
        commit_failures_.push_back({group.front().seq, group.back().seq, st});
      }
    }
    while (commit_failures_.size() > 64) commit_failures_.pop_front();
    durable_cv_.notify_all();
  }
}

void Engine::AuditLocked(const std::string& actor, const std::string& kind, const std::string& subject,
                         const std::string& reason, Json data) {
  if (!broken_.ok()) return;
  const int64_t second = clock_() / 1000;
  if (kind == "auth.failed") {
    if (second != audit_second_) {
      audit_second_ = second;
      audit_in_second_ = 0;
    }
    if (++audit_in_second_ > kAuditPerSecond) {
      ++audit_suppressed_;
      return;
    }
    if (audit_suppressed_ > 0) data["suppressed"] = std::exchange(audit_suppressed_, 0);
  }
  Batch b;
  b.Add(MakeEvent(actor, kind, subject, reason, std::move(data)), nullptr);
  QueueLocked(b);
}

void Engine::AuditAuthFailure(const std::string& method, const std::string& path, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  AuditLocked("-", "auth.failed", path, why, {{"method", method}});
}

}  // namespace tessera::api
