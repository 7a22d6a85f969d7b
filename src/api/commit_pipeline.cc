// The commit pipeline: changes are queued under the engine's mutex (QueueLocked) and handed to
// the CommitWriter (commit_writer.h), whose thread writes them in order, several batches per
// transaction when they queue up; callers wait for their batch (CommitLocked) or are called back
// once it is written (AnswerWhenDurable: submissions and heartbeats, no thread waiting). A failed
// write drops what was queued on the memory that ran ahead of it and rebuilds memory from the
// store (CatchUpLocked, ReloadLocked in engine_load.cc). Ended jobs leave memory here once durable.
#include <algorithm>
#include <iterator>
#include <set>

#include "api/engine.h"

namespace tessera::api {

Status Engine::Sync() {
  std::unique_lock<std::mutex> lock(mu_);
  Batch none;
  return CommitLocked(none, lock);
}

int64_t Engine::QueueLocked(Batch& b) {
  version_.fetch_add(1);  // memory changed (every change queues its batch, even an empty one)
  // Drains in progress ride with the decisions that started or ended them, so that a restart
  // finds every drain it must finish (device.drains: the whole set, when it changed).
  if (qe_->MayHaveDrains() || !drains_.empty()) {
    std::vector<quota::QuotaEngine::Drain> now = qe_->Drains();
    if (now != drains_) {
      Json list = now;  // api/records.h's mapping
      b.Add(EventAt(clock_(), "engine", "device.drains", "cluster",
                    std::to_string(now.size()) + " drain(s) in progress", {{"drains", list}}),
            nullptr);
      drains_ = std::move(now);
    }
  }
  for (const Job* j : b.jobs) jobs_.CountOut(jobs_.Own(*j));
  if (b.empty()) {
    b = {};
    return 0;
  }
  CommitWriter::Batch q;
  q.seq = seq_.Next();
  q.epoch = seq_.epoch();
  q.events = std::move(b.events);
  q.records.reserve(b.jobs.size());
  const bool watched = watches_.Any();
  auto about = [&](const std::string& node) {
    // The node's own heartbeat: nothing new for its agent.
    const bool news = node != b.from_node;
    seq_.About(node, q.seq, news);
    if (news && watched) q.watched.push_back(node);
  };
  for (const Job* jp : b.jobs) {
    Job& j = jobs_.Own(*jp);
    j.last_seq = q.seq;
    q.records.push_back(RecordOf(j));
    // Its later records need not carry the spec (the store updates the columns that change
    // instead of rewriting every column and index): the writer writes batches in order, and a
    // failed write drops every batch of its epoch behind it, this job's later ones too, and
    // memory is rebuilt from the store.
    j.stored = true;
    // A job's grants on one node come together (eight for a whole 8-card job): each node once.
    for (size_t k = 0; k < j.grants.size(); ++k) {
      if (k == 0 || j.grants[k].node != j.grants[k - 1].node) about(j.grants[k].node);
    }
  }
  for (const std::string& n : b.nodes) about(n);
  b = {};
  writer_.Push(std::move(q));
  return seq_.last();
}

Status Engine::CommitLocked(Batch& b, std::unique_lock<std::mutex>& lock, const std::string* node) {
  const int64_t settled = seq_.epoch_began();  // what came before was settled by a reload
  const int64_t seq = QueueLocked(b);
  int64_t target = seq_.last();
  if (node != nullptr && seq == 0) target = seq_.LastAbout(*node);
  lock.unlock();
  Status result = writer_.Await(target);
  lock.lock();
  CatchUpLocked();
  // A commit that queued nothing waits for what came before it, but the failure of a batch that
  // memory had already been rebuilt without when it began is not its own (a quiet server's every
  // Tick would report it until something new was queued).
  if (seq == 0 && target < settled && broken_.ok()) return Status::Ok();
  return result;
}

void Engine::Quiesce() {
  int64_t target = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    target = seq_.last();
  }
  writer_.AwaitQuiet(target);
}

void Engine::AnswerWhenDurable(Result<std::pair<Json, int64_t>> queued,
                               std::function<void(Result<Json>)> done) {
  if (!queued.ok()) return done(queued.status());
  auto& [reply, target] = *queued;
  if (target == 0) return done(std::move(reply));
  writer_.WhenDurable(target,
                      [done = std::move(done), reply = std::move(reply)](Status st) mutable {
                        if (!st.ok()) return done(st);
                        done(std::move(reply));
                      });
}

Status Engine::ReadDurable(const std::function<Status(const ReadModel&)>& read) {
  for (int attempt = 0;; ++attempt) {
    int64_t target = 0, epoch = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (attempt > 0) CatchUpLocked();  // reload after the failed write the last one saw
      SettleCountsLocked();              // the decisions counted are the durable ones
      if (Status st = read(ModelLocked()); !st.ok()) return st;
      target = seq_.last();  // every batch whose change the reading may show
      epoch = seq_.epoch();
    }
    Status failure;
    // A failed write drops its epoch's batches: the memory read is not what is durable.
    const bool doomed = writer_.AwaitDropped(target, epoch, &failure);
    if (!doomed) return Status::Ok();
    if (attempt > 0) {
      return Status::Internal("the store is failing writes (" + failure.message() +
                              "): nothing to show that is durable");
    }
  }
}

void Engine::Read(const std::function<void(const ReadModel&)>& read) {
  std::lock_guard<std::mutex> lock(mu_);
  read(ModelLocked());
}

bool Engine::TryRead(const std::function<void(const ReadModel&)>& read) {
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  read(ModelLocked());
  return true;
}

ReadModel Engine::ModelLocked() {
  return ReadModel{config_, *qe_,      jobs_,   agents_.NodesLocked(),
                   admin_,  counters_, broken_, seq_.last() - writer_.Written()};
}

void Engine::CatchUpLocked() {
  version_.fetch_add(1);
  CommitWriter::Progress p = writer_.TakeProgress(seq_.epoch());
  // Memory ran ahead of the store by a failed write and whatever was queued after it.
  if (p.reload) {
    (void)ReloadLocked(p.cause);
    return;
  }
  // The oldest ended jobs leave memory once durable, a thousand or more at a time; the views
  // read them from the store.
  const size_t keep = static_cast<size_t>(config_.limits.ended_jobs_in_memory);
  if (jobs_.EndedWaiting() > 2 * keep) jobs_.EvictEnded(keep, p.written);
}

void Engine::SettleCountsLocked() {
  counters_.Settle([this](int64_t seq) { return writer_.OutcomeOf(seq); });
}

}  // namespace tessera::api
