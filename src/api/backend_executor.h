// BackendExecutor: the external backends (Slurm, PBS, Kubernetes), one BackendLane each, and the
// pass that enacts the cycle's decisions there and reports what the schedulers say: submit the
// admitted jobs, follow them, suspend and resume the ones a backend keeps, cancel, and reconcile
// after a restart or an absence. Each backend's pass runs on its own thread (api/executors.h)
// under its own pass lock; commands run without the engine's lock, and what they report becomes
// job changes through the LedgerPort (api/ledger_port.h), committed before anyone acts on them.
//
// Reconciliation rule (first pass after open): scheduler jobs named after this cluster whose
// Tessera job is unknown or already ended are cancelled; an unsubmitted Tessera job whose
// scheduler job exists is adopted (never submitted twice); a second scheduler job for the same
// Tessera job is cancelled; a submitted job the scheduler no longer knows (3 polls running) is
// marked lost. Submission failures leave the job placed-but-unsubmitted with the reason on it,
// retried with backoff (1s doubling to 60s).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "api/backend_lane.h"
#include "api/config.h"
#include "api/ledger_port.h"
#include "api/records.h"
#include "backends/backend.h"
#include "common/status.h"

namespace tessera::api {

class BackendExecutor {
 public:
  BackendExecutor(std::unique_ptr<LedgerPort> ledger, const EngineConfig& config,
                  std::string data_dir);

  // One lane per backend the queues name (one instance per name, however many queues).
  Status Open();
  // A lane for `backend` under `name` (Open makes one per name the queues use; a test, its fake).
  // `several`: a queue over several backends lists it, so it gets no new work while it is not
  // answering.
  void AddLane(const std::string& name, std::unique_ptr<backends::Backend> backend, bool several);
  std::vector<std::string> Names() const;
  // One pass of one backend: safe from any thread; a pass of a backend already running makes
  // this one a no-op.
  Status Pass(const std::string& name);

  // Under the engine's lock. A reload: every backend is asked its capacity again and reconciled.
  void ResetLocked();
  // Under the engine's lock: the job's object in its backend is deleted by the next pass.
  void QueueDeleteLocked(const Job& j);

 private:
  struct SubmitWork {
    std::string id;
    backends::Backend* b;
    backends::JobRequest req;
    bool lookup;
  };
  struct SubmitDone {
    std::string id;
    std::string external_id;
    Status status;
    bool permanent = false;  // the job cannot be rendered: it fails rather than retries
    bool adopted = false;
  };
  struct SuspendWork {  // suspend (or resume) a job the backend keeps
    std::string id;
    backends::Backend* b;
    std::string external_id;
    bool suspend;
    backends::JobRequest req;  // resume: the queue's scheduling directives
    Status status;
  };
  struct BackendWork {
    std::vector<SubmitWork> submits;
    std::vector<SuspendWork> suspends;
    bool stops = false;  // a kept job preempted before it was submitted (StopUnsubmittedLocked)
    std::map<std::string, std::vector<std::string>> polls;  // backend -> external ids
    std::vector<std::pair<backends::Backend*, std::string>> cancels;
  };
  using Polled = std::map<std::string, Result<std::map<std::string, backends::ExternalJob>>>;
  using Commands = std::vector<std::pair<backends::Backend*, std::string>>;

  Status Reconcile(const std::string& name);
  Status RefreshCapacity(const std::string& name);
  Status NoteAnswering(const std::string& name, const Status& heard);
  void CollectLocked(const std::string& name, BackendWork* w);
  static SubmitDone SubmitOne(const SubmitWork& w);
  void RecordSubmissionsLocked(const std::vector<SubmitDone>& done, Commands* late_cancels,
                               Batch* batch);
  void RecordPollsLocked(const std::map<std::string, std::vector<std::string>>& polls,
                         Polled& polled, Commands* forget, Batch* batch);
  void RecordSuspendsLocked(const std::vector<SuspendWork>& done, Batch* batch);
  void StopUnsubmittedLocked(const std::string& name, Batch* batch);
  bool FollowSuspendLocked(const Job& j, const backends::ExternalJob& x, backends::ExternalState xs,
                           Batch* batch);
  backends::JobRequest RequestFor(const Job& j) const;
  std::string ExternalName(const std::string& id) const {
    return "tessera-" + config_.cluster + "-" + id;
  }
  store::Event Event(const std::string& actor, const std::string& kind, const std::string& subject,
                     const std::string& reason, const Json& data = Json::object()) const {
    return EventAt(ledger_->NowMs(), actor, kind, subject, reason, data);
  }

  std::unique_ptr<LedgerPort> ledger_;
  const EngineConfig& config_;
  const std::string data_dir_;
  std::map<std::string, std::unique_ptr<BackendLane>> lanes_;  // fixed after Open
};

}  // namespace tessera::api
