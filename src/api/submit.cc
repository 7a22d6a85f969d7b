// Submissions: the group commit that makes them durable before they are acknowledged, with
// replies for repeated Idempotency-Keys, and cancellation. The request itself is checked by
// PrepareSubmit (api/submit_request.h).
#include <future>
#include <thread>
#include <tuple>

#include "api/engine.h"
#include "api/submit_request.h"
#include "model/quantity.h"

namespace tessera::api {

namespace {

// A key names one request: the same key with another is a mistake to name, not a replay.
Status KeyReused(const std::string& scoped, const std::string& id) {
  return Status::FailedPrecondition("Idempotency-Key '" + scoped.substr(scoped.find('\n') + 1) +
                                    "' was used for job " + id +
                                    " with a different request: a new request needs a new key");
}

}  // namespace

Result<std::optional<Json>> Engine::RepeatedLocked(const Identity& who, const std::string& scoped,
                                                   const Job& asked,
                                                   std::unique_lock<std::mutex>& lock) {
  const auto same = [&](const std::string& queue, const std::string& group,
                        const std::string& spec_text) {
    return queue == asked.rec.queue && group == asked.rec.group && spec_text == asked.spec_text;
  };
  if (const std::string* named = jobs_.IdempotentJob(scoped)) {
    // Possibly still on its way to the store: answered once it is durable, like the first time.
    const std::string id = *named;
    Batch none;
    Status st = CommitLocked(none, lock);
    Job* again = jobs_.Find(id);
    if (again != nullptr && again->rec.idempotency_key == scoped) {
      if (!same(again->rec.queue, again->rec.group, again->spec_text)) return KeyReused(scoped, id);
      return std::optional<Json>(JobJson(*again, *qe_, agents_.NodesLocked()));
    }
    if (!st.ok() && jobs_.IdempotentJob(scoped) == nullptr)
      return std::optional<Json>();  // its write failed: a new one
  }
  // Not in memory: ended and evicted, or submitted before a restart or to another server.
  lock.unlock();
  auto stored = store_->FindByIdempotencyKey(scoped, clock_() - kIdempotencyWindowMs);
  std::optional<Json> out;
  if (stored.ok() && stored->has_value()) {
    if (!same((*stored)->queue, (*stored)->group, (*stored)->spec)) {
      lock.lock();
      return KeyReused(scoped, (*stored)->id);
    }
    auto job = StoredJobJson(*this, who, (*stored)->id);
    if (!job.ok()) {
      lock.lock();
      return job.status();
    }
    out = std::move(*job);
  }
  lock.lock();
  if (!stored.ok()) return stored.status();
  return out;
}

Result<Json> Engine::Submit(const Identity& who, const Json& body,
                            const std::string& idempotency_key, bool* replayed) {
  std::promise<std::pair<Result<Json>, bool>> answered;
  SubmitAsync(who, body, idempotency_key, [&answered](Result<Json> r, bool again) {
    answered.set_value({std::move(r), again});
  });
  auto [result, again] = answered.get_future().get();
  if (replayed != nullptr) *replayed = again;
  if (!result.ok()) (void)Sync();  // a failed write: memory is rebuilt before the caller looks
  return std::move(result);
}

void Engine::SubmitAsync(const Identity& who, const Json& body, const std::string& idempotency_key,
                         SubmitReply done) {
  bool replayed = false;
  auto queued = SubmitQueued(who, body, idempotency_key, &replayed);
  // A failed write: not recorded, and a retry with the same key makes the job once.
  AnswerWhenDurable(std::move(queued), [done = std::move(done), replayed](Result<Json> r) {
    done(std::move(r), replayed);
  });
}

Result<std::pair<Json, int64_t>> Engine::SubmitQueued(const Identity& who, const Json& body,
                                                      const std::string& idempotency_key,
                                                      bool* replayed) {
  std::string scoped;
  if (!idempotency_key.empty()) {
    if (Status st = ValidIdempotencyKey(idempotency_key); !st.ok()) return st;
    scoped = who.name + "\n" + idempotency_key;
  }
  auto prepared = PrepareSubmit(config_, who, body);
  if (!prepared.ok()) return prepared.status();
  std::unique_lock<std::mutex> lock(mu_);
  if (!broken_.ok()) return broken_;
  if (!scoped.empty()) {
    auto repeated = RepeatedLocked(who, scoped, prepared->job, lock);
    if (!repeated.ok()) return repeated.status();
    // A twin that raced in while the store was asked (the lock was let go) is found here.
    if (!repeated->has_value() && jobs_.IdempotentJob(scoped) != nullptr)
      repeated = RepeatedLocked(who, scoped, prepared->job, lock);
    if (!repeated.ok()) return repeated.status();
    if (repeated->has_value()) {
      *replayed = true;
      return std::pair<Json, int64_t>{std::move(**repeated), 0};
    }
    if (!broken_.ok()) return broken_;
  }
  // What the cycle would refuse outright (a form the policy forbids, a request no device could
  // ever hold) is refused now, before anything is written.
  Status check = qe_->Check(prepared->qspec);
  if (!check.ok()) return Status::InvalidArgument(check.message());
  if (jobs_.LiveOf(who.name) >= config_.limits.max_jobs_per_identity) {
    return Status::ResourceExhausted(
        "'" + who.name + "' has " + std::to_string(config_.limits.max_jobs_per_identity) +
        " jobs not yet ended (max_jobs_per_identity): submit more as some end");
  }
  const int64_t bytes = CommandBytes(prepared->job.spec);
  if (jobs_.LiveBytesOf(who.name) + bytes > config_.limits.max_command_bytes_per_identity) {
    return Status::ResourceExhausted(
        "'" + who.name + "' has jobs not yet ended holding " +
        std::to_string(jobs_.LiveBytesOf(who.name)) +
        " bytes of command and environment; this one (" + std::to_string(bytes) +
        " bytes) would take it past max_command_bytes_per_identity (" +
        FormatMiB(config_.limits.max_command_bytes_per_identity >> 20) +
        "): submit more as some end");
  }
  const std::string id = prepared->qspec.id = jobs_.NewId();
  prepared->job.rec.id = id;
  prepared->job.rec.idempotency_key = scoped;
  Job& j = jobs_.Insert(std::move(prepared->job));
  j.rec.submit_ms = j.rec.update_ms = clock_();
  j.rec.reason = "Queued: waiting for the next scheduling cycle";
  auto h = qe_->Submit(prepared->qspec, j.rec.submit_ms / 1000);
  if (!h.ok()) {
    jobs_.Erase(id);
    return Status::InvalidArgument(h.status().message());
  }
  j.handle = *h;
  jobs_.Enter(j);
  cycle_.pacer().Want();
  // Like every change, the submission goes through the commit pipeline: queued now, written
  // with whatever else is queued (other submissions, heartbeats) in one transaction.
  Batch b;
  b.Add(EventAt(clock_(), who.name, "job.submitted", id, "",
                {{"queue", j.rec.queue}, {"group", j.rec.group}}),
        &j);
  QueueLocked(b);
  const int64_t mine = cycle_.pacer().Submitted();
  if (config_.schedule_on_submit) {
    // Scheduled at once, by one cycle for every submission queued before it started: submitters
    // waiting for the mutex get to queue theirs first. Its decisions are queued behind the
    // submissions, and the reply waits until all of it is durable: one wait, not two.
    lock.unlock();
    std::this_thread::yield();
    lock.lock();
    if (cycle_.pacer().SubmissionRuns(mine, CycleBudget::NowUs())) {
      Batch decisions;
      cycle_.RunLocked(decisions);
      QueueLocked(decisions);
    }
  }
  // Answered once all of it is durable (by id: a reload may have run while the lock was let go).
  Job* it = jobs_.Find(id);
  if (it == nullptr)
    return Status::Internal("job '" + id + "' was not recorded: a write failed meanwhile");
  return std::pair<Json, int64_t>{JobJson(*it, *qe_, agents_.NodesLocked()), seq_.last()};
}

Result<Json> Engine::Cancel(const Identity& who, const std::string& id) {
  if (who.role == Role::kAgent) return Status::PermissionDenied("agents cannot cancel jobs");
  std::unique_lock<std::mutex> lock(mu_);
  if (!broken_.ok()) return broken_;
  Job* it = jobs_.Find(id);
  if (it == nullptr) {
    // Ended and out of memory (only unfinished jobs are loaded at start): it says so as before.
    lock.unlock();
    auto stored = StoredJob(*store_, who, id);
    if (!stored.ok()) return stored.status();
    if (!Ended(*stored))
      return Status::Internal("job '" + id + "' is stored unfinished but not loaded");
    return Status::FailedPrecondition("job '" + id + "' has already ended (" +
                                      JobStateName(stored->state) + ")");
  }
  if (!CanSee(who, *it)) return Status::NotFound("no job '" + id + "'");
  Job& j = *it;
  const quota::GroupSpec* group = config_.FindGroup(j.rec.group);
  if (who.role != Role::kAdmin && who.name != j.rec.identity &&
      !(group != nullptr && group->members_cancel)) {
    return Status::PermissionDenied(
        "job '" + id + "' is " + j.rec.identity +
        "'s: only its owner or an admin cancels it (or any member, where its group says "
        "members_cancel)");
  }
  if (Ended(j))
    return Status::FailedPrecondition("job '" + id + "' has already ended (" +
                                      JobStateName(j.state) + ")");
  Batch b;
  if (j.state == JobState::kPending || j.state == JobState::kPlaced) {
    if (!EndLocked(j, JobState::kCancelled, JobCause::kCancelled, "cancelled by " + who.name))
      return Status::Internal("job '" + id + "' cannot be cancelled from " + JobStateName(j.state) +
                              " (logged)");
    if (!j.ext.backend.empty() && !j.ext.id.empty()) backends_.QueueDeleteLocked(j);
    b.Touch(NodesOf(j));
    j.grants.clear();
    j.node.clear();
    b.Add(EventAt(clock_(), who.name, "job.cancelled", id, "by " + who.name), &j);
    cycle_.pacer().Want();
  } else {
    j.cancel_requested = true;
    j.rec.reason = "cancel requested";
    j.rec.update_ms = clock_();
    b.Add(EventAt(clock_(), who.name, "job.cancel_requested", id, "by " + who.name), &j);
  }
  Status st = CommitLocked(b, lock);
  if (!st.ok()) return st;
  Job* again = jobs_.Find(id);
  if (again != nullptr) return Redacted(who, JobJson(*again, *qe_, agents_.NodesLocked()));
  lock.unlock();
  return StoredJobJson(*this, who, id);  // ended, durable and already out of memory
}

}  // namespace tessera::api
