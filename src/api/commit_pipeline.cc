// The commit pipeline: changes are queued under the engine's mutex (QueueLocked) and written
// in order by one writer thread (WriterLoop) that holds only its own mutex, several batches per
// transaction when they queue up; callers wait for their batch (CommitLocked) or are called back
// once it is written (WhenDurable: submissions and heartbeats, no thread waiting). A failed write
// drops what was queued on the memory that ran ahead of it and rebuilds memory from the store
// (CatchUpLocked, ReloadLocked in engine.cc). Ended jobs leave memory here once durable.
#include <algorithm>
#include <iterator>
#include <set>

#include "api/engine.h"

namespace tessera::api {

namespace {

Json DrainJson(const quota::QuotaEngine::Drain& d) {
  return {{"node", d.node},
          {"device", d.device},
          {"job", d.job},
          {"evict", d.evict},
          {"add", d.add},
          {"enable_mig", d.enable_mig},
          {"amd_pair", d.amd_pair},
          {"node_wide", d.node_wide},
          {"why", d.why}};
}

}  // namespace

Status Engine::Sync() {
  std::unique_lock<std::mutex> lock(mu_);
  Batch none;
  return CommitLocked(none, lock);
}

int64_t Engine::QueueLocked(Batch& b) {
  view_version_.fetch_add(1);  // memory changed (every change queues its batch, even an empty one)
  // Drains in progress ride with the decisions that started or ended them, so that a restart
  // finds every drain it must finish (device.drains: the whole set, when it changed).
  if (qe_->MayHaveDrains() || !drains_.empty()) {
    std::vector<quota::QuotaEngine::Drain> now = qe_->Drains();
    if (now != drains_) {
      Json list = Json::array();
      for (const auto& d : now) list.push_back(DrainJson(d));
      b.Add(MakeEvent("engine", "device.drains", "cluster",
                      std::to_string(now.size()) + " drain(s) in progress", {{"drains", list}}),
            nullptr);
      drains_ = std::move(now);
    }
  }
  for (Job* j : b.jobs) {
    if (j->counted_live && Ended(*j)) {
      j->counted_live = false;
      if (--live_by_identity_[j->rec.identity] <= 0) live_by_identity_.erase(j->rec.identity);
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
  const bool watched = watching_.load(std::memory_order_relaxed) > 0;
  auto about = [&](const std::string& node) {
    node_seq_[node] = q.seq;
    if (node == b.from_node) return;  // the node's own heartbeat: nothing new for its agent
    order_seq_[node] = q.seq;
    if (watched) q.watched.push_back(node);
  };
  for (Job* j : b.jobs) {
    j->last_seq = q.seq;
    q.records.push_back(RecordOf(*j));
    q.jobs.push_back(j->rec.id);
    for (const auto& g : j->grants) about(g.node);
  }
  for (const std::string& n : b.nodes) about(n);
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
    result = FailureUpToLocked(target);
  }
  lock.lock();
  CatchUpLocked();
  return result;
}

void Engine::Quiesce() {
  int64_t target = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    target = queued_seq_;
  }
  std::unique_lock<std::mutex> w(wmu_);
  durable_cv_.wait(w, [&] { return written_seq_ >= target && !replying_; });
}

Status Engine::FailureUpToLocked(int64_t target) const {
  for (const CommitFailure& f : commit_failures_) {
    if (f.first <= target && target <= f.last) return f.why;
  }
  return Status::Ok();
}

void Engine::WhenDurable(int64_t target, std::function<void(Status)> done) {
  Status now;
  {
    std::lock_guard<std::mutex> w(wmu_);
    if (written_seq_ < target) {
      durable_waiters_.emplace(target, std::move(done));
      return;
    }
    now = FailureUpToLocked(target);
  }
  done(now);
}

void Engine::AnswerWhenDurable(Result<std::pair<Json, int64_t>> queued,
                               std::function<void(Result<Json>)> done) {
  if (!queued.ok()) return done(queued.status());
  auto& [reply, target] = *queued;
  if (target == 0) return done(std::move(reply));
  WhenDurable(target, [done = std::move(done), reply = std::move(reply)](Status st) mutable {
    if (!st.ok()) return done(st);
    done(std::move(reply));
  });
}

Status Engine::RenderDurable(const std::function<Status()>& render) {
  for (int attempt = 0;; ++attempt) {
    int64_t epoch_before = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (attempt > 0) CatchUpLocked();  // reload after the failed write the last one saw
      epoch_before = epoch_;
    }
    if (Status st = render(); !st.ok()) return st;
    int64_t target = 0, epoch_after = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      target = queued_seq_;  // every batch whose change the rendering may show
      epoch_after = epoch_;
    }
    Status failure;
    bool doomed = epoch_after != epoch_before;  // reloaded while rendering
    if (!doomed) {
      std::unique_lock<std::mutex> w(wmu_);
      durable_cv_.wait(w, [&] { return written_seq_ >= target || stop_writer_; });
      // A failed write drops its epoch's batches: the memory rendered is not what is durable.
      doomed = dropped_epoch_ >= epoch_after;
      failure = last_failure_;
    }
    if (!doomed) return Status::Ok();
    if (attempt > 0) {
      return Status::Internal("the store is failing writes (" + failure.message() +
                              "): nothing to show that is durable");
    }
  }
}

void Engine::CatchUpLocked() {
  view_version_.fetch_add(1);
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
  for (auto& [node, ids] : node_jobs_)
    ids.erase(std::remove_if(ids.begin(), ids.end(), out), ids.end());
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
    std::vector<std::pair<std::string, int64_t>> news;  // watched nodes with new orders
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
          for (std::string& n : q.watched) news.emplace_back(std::move(n), q.seq);
        }
      } else {
        dropped_epoch_ = group.back().epoch;
        last_failure_ = st;
        commit_failures_.push_back({group.front().seq, group.back().seq, st});
      }
    }
    // Replies whose batches were written, with their outcome (before older failures are let go).
    std::vector<std::pair<std::function<void(Status)>, Status>> replies;
    for (auto it = durable_waiters_.begin();
         it != durable_waiters_.end() && it->first <= written_seq_;) {
      replies.emplace_back(std::move(it->second), FailureUpToLocked(it->first));
      it = durable_waiters_.erase(it);
    }
    while (commit_failures_.size() > 64) commit_failures_.pop_front();
    durable_cv_.notify_all();
    if (!news.empty() || !replies.empty()) {
      replying_ = true;
      w.unlock();
      for (auto& [reply, st] : replies) reply(st);
      replies.clear();
      if (!news.empty()) FireWatches(news);
      w.lock();
      replying_ = false;
      durable_cv_.notify_all();
    }
  }
}

void Engine::FireWatches(const std::vector<std::pair<std::string, int64_t>>& touched) {
  std::lock_guard<std::mutex> g(watch_mu_);
  for (const auto& [node, seq] : touched) {
    auto it = watches_.find(node);
    if (it == watches_.end() || seq <= it->second.after) continue;
    it->second.wake(seq);
    watches_.erase(it);
    --watching_;
  }
}

Result<uint64_t> Engine::WatchOrders(const Identity& who, const std::string& node, int64_t after,
                                     std::function<void(int64_t)> wake) {
  if (who.role != Role::kAgent && who.role != Role::kAdmin)
    return Status::PermissionDenied("only agents watch for orders");
  if (Status st = SpeaksFor(who, node, "watch for orders"); !st.ok()) return st;
  std::lock_guard<std::mutex> lock(mu_);
  if (!broken_.ok()) return broken_;
  if (nodes_.count(node) == 0) return Status::NotFound("node '" + node + "' is not registered");
  auto os = order_seq_.find(node);
  const int64_t news = os == order_seq_.end() ? 0 : os->second;
  std::lock_guard<std::mutex> g(watch_mu_);
  // Registered before the durable mark is read: a write that lands after this read fires it.
  OrderWatch& w = watches_[node];
  if (w.wake) {
    w.wake(0);  // replaced by a newer watch (the agent reconnected)
  } else {
    ++watching_;
  }
  w = OrderWatch{++next_ticket_, after, std::move(wake)};
  if (news > after && news <= DurableSeq()) {
    w.wake(news);
    watches_.erase(node);
    --watching_;
    return uint64_t{0};
  }
  return w.ticket;
}

void Engine::UnwatchOrders(const std::string& node, uint64_t ticket) {
  std::lock_guard<std::mutex> g(watch_mu_);
  auto it = watches_.find(node);
  if (it == watches_.end() || it->second.ticket != ticket) return;
  watches_.erase(it);
  --watching_;
}

void Engine::UnwatchAll() {
  std::lock_guard<std::mutex> g(watch_mu_);
  for (auto& [node, w] : watches_) w.wake(0);
  watches_.clear();
  watching_ = 0;
}

void Engine::AuditLocked(const std::string& actor, const std::string& kind,
                         const std::string& subject, const std::string& reason, Json data) {
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

void Engine::AuditAuthFailure(const std::string& method, const std::string& path,
                              const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  AuditLocked("-", "auth.failed", path, why, {{"method", method}});
}

}  // namespace tessera::api
