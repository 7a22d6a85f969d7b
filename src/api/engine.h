// Engine: the control plane's state machine. Jobs arrive through queues under identities, are
// admitted against their group's limit, placed by the placement core (policy "tessera"), handed
// to the node agent that heartbeats for their node, and followed to their end.
//
// Every change is appended to the store as an event plus the job's new record, durably, before
// anyone is told of it: a submission is acknowledged only once committed; a placement is
// committed before the agent is told to start the job. On open the engine rebuilds its state
// from the store (jobs, and the nodes it knew) and re-reserves every held placement, so a crash
// between any two steps neither loses an acknowledged job nor allocates a device twice.
//
// Queues whose `backend` is not "local" hand their jobs to an external scheduler (Slurm, PBS; see
// backends/backend.h) instead of placing them on agent nodes: admission against the group's
// limit is the same; an admitted job is "placed" (holding its group's quota) until it has been
// submitted, "starting" once the scheduler has it (its id recorded in the job's placement),
// "running" when the scheduler runs it, and ends as the scheduler says. Submission failures leave
// the job placed-but-unsubmitted with the reason on it, retried with backoff (1s doubling to 60s).
// Reconciliation rule (first backend pass after open): scheduler jobs named after this cluster
// whose Tessera job is unknown or already ended are cancelled; an unsubmitted Tessera job whose
// scheduler job exists is adopted (never submitted twice); a second scheduler job for the same
// Tessera job is cancelled; a submitted job the scheduler no longer knows (3 polls running) is
// marked lost.
//
// Thread-safety: all public methods may be called from any thread (one internal mutex).
//
// Group commit: concurrent submissions share one store transaction. A submission is prepared
// under the mutex (validated, numbered, admitted against its group's limit with its usage counted
// tentatively) and queued; the first waiter with no commit in flight becomes the leader, takes the
// whole queue and commits it in one transaction without holding the mutex, while later
// submissions queue for the next one. Only after that commit are the jobs made visible and their
// submitters acknowledged; if it fails, every submission in it gets the error and its tentative
// usage is undone, so nothing is half-applied.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "api/config.h"
#include "backends/backend.h"
#include "common/status.h"
#include "sched/scheduler.h"
#include "store/store.h"

namespace tessera::api {

using Json = nlohmann::json;
using Clock = std::function<int64_t()>;  // milliseconds since the epoch

class Engine {
 public:
  // REQUIRES: store is open. `data_dir` holds job output files.
  static Result<std::unique_ptr<Engine>> Open(EngineConfig config, std::unique_ptr<store::Store> store,
                                              std::string data_dir, Clock clock);

  // Users.
  Result<Json> Submit(const Identity& who, const Json& body);
  Result<Json> ListJobs(const Identity& who, const std::string& state_filter, int limit);
  Result<Json> GetJob(const Identity& who, const std::string& id);
  Result<Json> Cancel(const Identity& who, const std::string& id);
  Result<std::string> JobOutput(const Identity& who, const std::string& id);
  Result<Json> Queues(const Identity& who);
  Result<Json> Groups(const Identity& who);
  Result<Json> Nodes(const Identity& who);
  Result<Json> Summary(const Identity& who);
  // The cluster's utilization over time: one sample every `utilization_sample` (the last 24h at
  // the default 10s), newer than `since_ms`. Samples live in memory: a restart starts afresh.
  Result<Json> Utilization(const Identity& who, int64_t since_ms);
  Result<Json> Events(const Identity& who, int64_t after, int limit, const store::EventFilter& f);
  Result<int64_t> LastEventSeq() { return store_->LastSeq(); }

  // Agents.
  Result<Json> RegisterNode(const Identity& who, const Json& body);
  Result<Json> Heartbeat(const Identity& who, const Json& body);
  Status WriteOutput(const Identity& who, const std::string& job, int64_t offset, const std::string& bytes);

  // Housekeeping: marks silent nodes lost, places what can be placed, and (outside the engine's
  // lock) submits, follows and cancels the jobs of external backends. Called periodically.
  Status Tick();

  // Checks that no device holds more than its capacity and no group more than its limit.
  Status CheckInvariants();

  const EngineConfig& config() const { return config_; }

 private:
  struct DeviceInfo {
    int index = 0;
    std::string model;
    MiB memory_mib = 0;
    std::string uuid;
    bool simulated = false;
  };
  struct NodeInfo {
    std::string name;
    MilliCpu cpu_milli = 0;
    MiB memory_mib = 0;
    bool simulated = false;
    std::vector<DeviceInfo> devices;
    int64_t last_heartbeat_ms = 0;
    bool lost = false;
  };
  struct Job {
    store::JobRecord rec;
    Json spec;
    // What the job holds while placed/starting/running.
    std::string node;
    std::vector<int> devices;
    MilliGpu gpu_milli = 0;      // per device
    MiB gpu_memory_mib = 0;      // per device (a share's cap)
    MilliCpu cpu_milli = 0;
    MiB memory_mib = 0;
    std::string form;            // whole / share
    bool cancel_requested = false;
    int64_t pid = 0;
    // External backend (empty: local agents).
    std::string backend;
    std::string external_id;      // the scheduler's job id once submitted
    std::string external_node;    // where the scheduler runs it
    std::string gres;             // the scheduler's allocation text
    std::string native_state;
    int submit_attempts = 0;
    int64_t next_submit_ms = 0;
    bool lookup_first = false;    // a submission may have happened: look before submitting
    bool cancel_sent = false;
    int unknown_polls = 0;
  };
  // A prepared submission waiting for its group commit.
  struct PendingSubmit {
    Job job;
    std::vector<store::Event> events;
    bool done = false;
    Status status;
    Json reply;
  };

  Engine(EngineConfig config, std::unique_ptr<store::Store> store, std::string data_dir, Clock clock);
  Status Load();
  Status RebuildScheduler();
  Status Commit(std::vector<store::Event> events, const std::vector<const Job*>& jobs);
  store::Event MakeEvent(const std::string& actor, const std::string& kind, const std::string& subject,
                         const std::string& reason, Json data = Json::object()) const;
  // Tries to place pending jobs: all of them (in order) when capacity changed, or only the new
  // submissions in `only`. The placements of one call are committed together.
  Status ScheduleLocked() { return ScheduleLocked(nullptr); }
  Status ScheduleLocked(const std::vector<Job*>* only);
  Status MarkLostLocked();
  void ReleaseLocked(Job& j);
  void AddUsageLocked(const Job& j, int sign);
  Resources GroupUsageLocked(const std::string& group) const;
  bool CanSee(const Identity& who, const Job& j) const;
  Json JobJson(const Job& j) const;
  bool Holds(const Job& j) const;
  // What a held job holds, as the placement core's Placement on scheduler node `node_index`.
  static sched::Placement PlacementOf(const Job& j, int node_index);
  std::string OutputPath(const std::string& job) const;
  Status BackendTick();
  sched::PlacementRequest RequestOf(const Job& j) const;
  // Empty when `j` fits its group's limit; otherwise what exceeds it.
  std::string OverLimitLocked(const Job& j, const sched::PlacementRequest& r) const;
  void AdmitExternalLocked(Job& j, const QueueConfig& q, const sched::PlacementRequest& r);
  backends::JobRequest RequestFor(const Job& j) const;
  std::string ExternalName(const std::string& id) const { return "tessera-" + config_.cluster + "-" + id; }

  EngineConfig config_;
  std::unique_ptr<store::Store> store_;
  std::string data_dir_;
  Clock clock_;

  std::mutex mu_;
  std::map<std::string, Job> jobs_;          // by id
  std::vector<std::string> order_;           // job ids in submit order
  // Ids of the jobs not yet ended, in submit order: what every per-heartbeat, per-tick and
  // per-pass scan walks, so their cost follows the live jobs, not all jobs ever submitted. Ended
  // jobs never return to life; they are dropped from here lazily, by the next scan.
  std::vector<std::string> live_;
  // The live jobs' ids in submit order, after dropping those that have ended (a copy: the caller
  // may end jobs while walking it).
  std::vector<std::string> LiveIdsLocked() {
    live_.erase(std::remove_if(live_.begin(), live_.end(), [&](const std::string& id) { return Ended(jobs_[id]); }),
                live_.end());
    return live_;
  }
  template <typename F>
  void ForLiveLocked(F&& f) {
    for (const std::string& id : LiveIdsLocked()) f(jobs_[id]);
  }
  static bool Ended(const Job& j) {
    return j.rec.state == "succeeded" || j.rec.state == "failed" || j.rec.state == "cancelled" || j.rec.state == "lost";
  }
  std::map<std::string, NodeInfo> nodes_;    // by name
  int64_t next_job_ = 1;
  std::vector<std::shared_ptr<PendingSubmit>> submit_batch_;  // prepared, waiting for a commit
  std::vector<std::shared_ptr<PendingSubmit>> committing_batch_;  // being committed by the leader
  bool committing_ = false;                                    // a leader is committing a batch
  std::condition_variable commit_cv_;                          // a batch commit has ended
  std::unique_ptr<sched::Scheduler> sched_;
  std::vector<std::string> sched_nodes_;     // node index in the scheduler -> name
  bool sched_dirty_ = true;
  bool capacity_changed_ = true;
  std::map<std::string, std::unique_ptr<backends::Backend>> backends_;  // by name
  std::mutex backend_mu_;   // serializes backend passes (held without mu_ while commands run)
  int64_t last_poll_ms_ = 0;
  bool reconciled_ = false;
  struct UtilizationSample {
    int64_t time_ms = 0;
    MilliGpu gpu_total = 0, gpu_allocated = 0;
    MilliCpu cpu_total = 0, cpu_allocated = 0;
    int64_t workers = 0, pending = 0;
  };
  void SampleUtilizationLocked();
  std::deque<UtilizationSample> utilization_;
  int64_t last_sample_ms_ = 0;
  static constexpr size_t kMaxSamples = 8640;
  std::map<std::string, Resources> group_usage_;  // what each group holds, kept incrementally  // something was freed or added since the last full pass
};

}  // namespace tessera::api
