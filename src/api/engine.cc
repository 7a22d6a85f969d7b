// The engine's core: open, job records and state changes, the scheduling cycle and the
// translation of its decisions into job records, invariants (loading: engine_load.cc).
#include "api/engine.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "api/json_text.h"
#include "api/recovery.h"
#include "common/log.h"
#include "common/text.h"
#include "model/quantity.h"

namespace tessera::api {

// The executors' way into the engine (api/ledger_port.h): each call is the engine's own, made
// under its mutex unless the port says otherwise.
class Engine::Port final : public AgentPort, public CyclePort {
 public:
  explicit Port(Engine& e) : e_(e) {}
  std::unique_lock<std::mutex> Lock() override { return std::unique_lock<std::mutex>(e_.mu_); }
  JobTable& JobsToChange() override { return e_.jobs_; }
  quota::QuotaEngine& QuotaToChange() override { return *e_.qe_; }
  bool Transition(const Job& j, JobState to, JobCause cause) override {
    return e_.TransitionLocked(e_.jobs_.Own(j), to, cause);
  }
  bool End(const Job& j, JobState state, JobCause cause, const std::string& reason) override {
    return e_.EndLocked(e_.jobs_.Own(j), state, cause, reason);
  }
  void Translate(size_t mark, Batch& b) override { e_.cycle_.TranslateLocked(mark, b); }
  void WantCycle() override { e_.cycle_.pacer().Want(); }
  Status Commit(Batch& b, std::unique_lock<std::mutex>& lock) override {
    return e_.CommitLocked(b, lock);
  }
  int64_t NowMs() const override { return e_.clock_(); }

  void SetSchedulable(const NodeInfo& n) override { ApplySchedulable(*e_.qe_, n, e_.admin_); }
  int64_t Queue(Batch& b) override { return e_.QueueLocked(b); }
  int64_t LastQueued() override { return e_.seq_.last(); }
  int64_t LastNews(const std::string& node) override { return e_.seq_.LastNews(node); }
  int64_t Durable() override { return e_.writer_.Durable(); }
  void AnswerWhenDurable(Result<std::pair<Json, int64_t>> queued,
                         std::function<void(Result<Json>)> done) override {
    e_.AnswerWhenDurable(std::move(queued), std::move(done));
  }
  Status Sync() override { return e_.Sync(); }
  Status Broken() override { return e_.broken_; }
  Status Reload(const Status& cause) override { return e_.ReloadLocked(cause); }
  Status SaveNode(const std::string& node, const std::string& inventory) override {
    return e_.store_->PutSetting("node/" + node, inventory);
  }
  void Audit(const std::string& actor, const std::string& kind, const std::string& subject,
             const std::string& reason, Json data) override {
    e_.audit_.RecordLocked(actor, kind, subject, reason, std::move(data));
  }
  int64_t Epoch() override { return e_.leader_epoch_; }
  OrderWatches& Watches() override { return e_.watches_; }

 private:
  Engine& e_;
};

Engine::Engine(EngineConfig config, std::unique_ptr<store::Store> store, std::string data_dir,
               Clock clock)
    : config_(std::move(config)),
      store_(std::move(store)),
      data_dir_(std::move(data_dir)),
      clock_(std::move(clock)),
      writer_(
          [this](const std::vector<store::Event>& events,
                 const std::vector<store::JobRecord>& records) {
            return store_->Commit(events, records, nullptr);
          },
          [this](const std::vector<std::pair<std::string, int64_t>>& touched) {
            watches_.Fire(touched);
          },
          [this] { return store_->Tidy(); }),
      backends_(std::make_unique<Port>(*this), config_, data_dir_),
      agents_(std::make_unique<Port>(*this), config_, data_dir_),
      cycle_(std::make_unique<Port>(*this), config_, counters_,
             [this](const Job& j) { backends_.QueueDeleteLocked(j); }),
      audit_(std::make_unique<Port>(*this)),
      chores_(*this, *store_, config_),
      views_(*this, config_, data_dir_) {}

Engine::~Engine() {
  if (broken_.ok()) (void)chores_.SaveFairShare(true);  // a clean stop loses no fair-share history
  writer_.Stop();
}

Result<std::unique_ptr<Engine>> Engine::Open(EngineConfig config,
                                             std::unique_ptr<store::Store> store,
                                             std::string data_dir, Clock clock) {
  std::error_code ec;
  std::filesystem::create_directories(data_dir + "/output", ec);
  if (ec)
    return Status::FailedPrecondition("cannot create '" + data_dir + "/output': " + ec.message());
  std::unique_ptr<Engine> e(
      new Engine(std::move(config), std::move(store), std::move(data_dir), std::move(clock)));
  // The lease's epoch (taken before the engine opens): agents ignore replies from an older one.
  if (auto l = e->store_->Leader(); l.ok()) e->leader_epoch_ = l->epoch;
  if (Status st = e->backends_.Open(); !st.ok()) return st;
  std::lock_guard<std::mutex> lock(e->mu_);
  Status st = e->Load();
  if (!st.ok()) return st;
  return e;
}

bool Engine::TransitionLocked(Job& j, JobState to, JobCause cause) {
  if (Status st = CheckJobTransition(j.state, to, cause); !st.ok()) {
    // A broken invariant of the control plane, not an outside failure: the job keeps its state
    // (its record and the cycle's view stay as they were) and the line says which change it was.
    static const log::Logger kLog("engine");
    kLog.Error("refused a job state change", {{"job", j.rec.id},
                                              {"from", JobStateName(j.state)},
                                              {"to", JobStateName(to)},
                                              {"cause", JobCauseName(cause)},
                                              {"error", st.message()}});
    return false;
  }
  j.state = to;
  j.rec.update_ms = clock_();
  if (to == JobState::kRunning && j.start_ms == 0) {
    j.start_ms = j.rec.update_ms;
    // Runtime guards count from here, not from the placement's second rounded down (a 10 s
    // walltime ran 8.8 s): to the second rounded up, so never less than the limit.
    if (j.handle >= 0) qe_->SetRunStart(j.handle, (j.start_ms + 999) / 1000);
  }
  if (to == JobState::kPending) j.start_ms = 0;  // a new run starts again
  return true;
}

bool Engine::EndLocked(Job& j, JobState state, JobCause cause, const std::string& reason) {
  if (!TransitionLocked(j, state, cause)) return false;
  jobs_.NoteEnded(j.rec.id);
  if (j.handle >= 0) {
    qe_->Cancel(j.handle, NowS(),
                JobStateName(state) + (reason.empty() ? std::string() : ": " + reason));
  }
  j.rec.reason = reason;
  return true;
}

Status Engine::RunCycle() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!broken_.ok()) return broken_;
  Batch b;
  cycle_.RunLocked(b);
  return CommitLocked(b, lock);
}

Status Engine::Tick() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    CatchUpLocked();  // a failed write nobody waited for
    if (!broken_.ok()) {
      Status st = ReloadLocked(broken_);  // try again to come back
      if (!broken_.ok()) return st;
    }
    Batch b;
    for (const std::string& id : failed_on_load_) {
      Job* it = jobs_.Find(id);
      if (it == nullptr) continue;
      jobs_.NoteEnded(id);
      b.Add(EventAt(clock_(), "engine", "job.failed", id, it->rec.reason), &*it);
    }
    failed_on_load_.clear();
    agents_.MarkLostLocked(b);
    agents_.ExpireStartsLocked(b);
    if (cycle_.pacer().Due(clock_(), config_.cycle_ms)) cycle_.RunLocked(b);
    if (Status st = CommitLocked(b, lock); !st.ok()) return st;
  }
  return chores_.Tick();
}

Status Engine::CheckInvariants() {
  std::unique_lock<std::mutex> lock(mu_);
  Status st = qe_->CheckInvariants();
  if (!st.ok()) return st;
  // The records agree with the quota engine: what a job holds there is what its record says.
  for (const std::string& id : jobs_.LiveIds()) {
    const Job& j = jobs_.Get(id);
    if (j.handle < 0) continue;
    quota::JobView v = qe_->job(j.handle);
    const bool held =
        v.state == quota::JobState::kRunning || v.state == quota::JobState::kTerminating;
    if (held != Holds(j)) {
      return Status::Internal("job '" + id + "' is " + JobStateName(j.state) + " but " +
                              quota::JobStateName(v.state) + " in the scheduler");
    }
    if (!held) continue;
    if (v.grants.size() != j.grants.size())
      return Status::Internal("job '" + id + "' grants disagree");
    for (size_t k = 0; k < v.grants.size(); ++k) {
      const auto &a = v.grants[k], &g = j.grants[k];
      if (a.node != g.node || a.device != g.device || a.slot != g.slot || a.memory != g.memory) {
        return Status::Internal("job '" + id + "' grant " + std::to_string(k) +
                                " disagrees with the scheduler");
      }
    }
  }
  return Status::Ok();
}

}  // namespace tessera::api
