// Engine: the control plane, a durable shell around the one scheduling cycle (sched/quota).
//
//   requests ─► validate ─► commit "submitted" ─► cycle(now) ─► decisions ─► commit ─► enact
//   observations (started, exited, lost) ─► commit ─► the cycle sees them
//
// The quota engine (quota::QuotaEngine, the same one `tessera sim scenario` drives) decides
// everything: ordering, admission as guaranteed or borrowed against each group's and its
// ancestors' limits, reclaim, priority preemption, gangs, backfill, the class-to-form policy and
// repartitioning. This class keeps what a served system adds around it: identities, the durable
// store, node agents (registry, heartbeats, start and stop orders), external backends (Slurm,
// PBS) and job output. It is split by job over several files:
//
//   engine.cc         open, job records and state changes, Tick, invariants
//   job_table.h       the jobs in memory and their indexes (JobTable; records.h: Job, NodeInfo)
//   engine_load.cc    memory from the store (Recover, recovery.h) installed: on open and after a
//                     failed write (reload)
//   commit_pipeline.cc  queueing changes, the writer thread, failed writes, evicting ended jobs
//   submit_request.cc request validation (PrepareSubmit: pure, no engine state)
//   submit.cc         submissions through the commit pipeline; cancel
//   node_admin.cc     cordon, drain, uncordon; which devices may take new work (Schedulable)
//
// Its parts: the scheduling cycle and what its decisions become is api::CycleDriver
// (cycle_driver.h); the node agents are served by api::AgentExecutor (agent_executor.h;
// agent_gateway.cc, agent_reports.cc, node_liveness.cc), the external backends by
// api::BackendExecutor (backend_executor.h); refusals and sign-ins are the AuditTrail's
// (audit_trail.h). All of them reach the engine through a port (ledger_port.h), not its fields.
// The history's chores (samples, retention, fair-share history) are Housekeeping's
// (housekeeping.h), through LedgerReads like the views.
// What people and Prometheus read is not the engine's: api::Views (views.h; views.cc, history.cc,
// whatif.cc, metrics.cc) renders a const ReadModel of memory that the engine hands it through
// LedgerReads (read_model.h) only once what it shows is durable.
//
// Durability. A decision is committed before anyone acts on it: placements are in the store
// before an agent hears of them; a preemption is committed before its SIGTERM is ordered. If a
// commit fails, the memory state is rebuilt from the store (Reload), so memory never runs ahead
// of what is durable; views and /metrics wait for what they render to be written (ReadDurable),
// so they never show what a failed write then takes back. On open, every job is re-entered into a
// new quota engine: held ones with their grants (partitions re-created), pending in submit order.
//
// Job states (model/job_state.h, one typed table of what may follow what and why): pending ->
// placed (admitted, holding its grants) -> starting (the agent or backend has it) -> running ->
// succeeded | failed | cancelled | lost; a preempted job is "preempting" until its processes are
// gone (SIGTERM, SIGKILL after the policy's grace), then pending again with its submit time and a
// count of preemptions. Every change goes through TransitionLocked, which refuses (and logs at
// error level) one the table does not hold. A pending job carries the step and reason that hold
// it ("Admission: group vision at its gpu limit ...").
//
// Thread-safety: all public methods may be called from any thread (one internal mutex). Store
// writes (the commit pipeline: one transaction for all queued) and backend commands run outside.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "api/agent_executor.h"
#include "api/audit_trail.h"
#include "api/backend_executor.h"
#include "api/batch_sequence.h"
#include "api/commit_writer.h"
#include "api/config.h"
#include "api/cycle_driver.h"
#include "api/decision_counters.h"
#include "api/housekeeping.h"
#include "api/job_table.h"
#include "api/json_text.h"
#include "api/node_admin_table.h"
#include "api/order_watches.h"
#include "api/read_model.h"
#include "api/records.h"
#include "api/view_cache.h"
#include "api/views.h"
#include "backends/backend.h"
#include "common/status.h"
#include "model/job_state.h"
#include "sched/quota/engine.h"
#include "store/store.h"

namespace tessera::api {

using Json = nlohmann::json;
using Clock = std::function<int64_t()>;  // milliseconds since the epoch

class Engine final : public LedgerReads {
 public:
  // REQUIRES: store is open. `data_dir` holds job output files.
  static Result<std::unique_ptr<Engine>> Open(EngineConfig config,
                                              std::unique_ptr<store::Store> store,
                                              std::string data_dir, Clock clock);
  ~Engine() override;  // writes what is queued, then stops the writer
  // Returns once everything queued so far is written and every reply waiting on it was called
  // (a server calls it before its connections go: no answer arrives after them).
  void Quiesce();

  // Users.
  // With an `idempotency_key` (the Idempotency-Key header): a key this identity already used
  // within kIdempotencyWindowMs returns that job, durable, and sets *replayed, instead of
  // making a second one.
  Result<Json> Submit(const Identity& who, const Json& body,
                      const std::string& idempotency_key = "", bool* replayed = nullptr);
  // The same, answered through `done` (the job, or why not; whether it was a replay) once the
  // job and the decisions of the cycle it ran are durable: from the commit writer's thread, so
  // that no caller's thread waits for the store (at once, on the caller's thread, when refused
  // or already durable). `done` must take no engine lock.
  using SubmitReply = std::function<void(Result<Json>, bool replayed)>;
  void SubmitAsync(const Identity& who, const Json& body, const std::string& idempotency_key,
                   SubmitReply done);
  Result<Json> Cancel(const Identity& who, const std::string& id);
  // What people, dashboards and Prometheus read (api/views.h): jobs, queues, groups, nodes, the
  // summary, events, health, history, usage, what-if and /metrics.
  Views& views() { return views_; }
  // Node administration (node_admin.cc), admins only: `action` "cordon" (no new work), "drain"
  // (no new work, and its jobs are preempted through the policy's grace and requeued to run
  // elsewhere) or "uncordon" (takes work again), of the whole node or, given `device` >= 0, of
  // that device alone. Durable (the store's settings), an event (node.cordoned, node.drained,
  // node.uncordoned) names who; the answer is the node as GET /v1/nodes shows it.
  Result<Json> AdminNode(const Identity& who, const std::string& node, const std::string& action,
                         int device = -1);
  // For tests: holds the engine's lock (as a long cycle does) until the lock is let go.
  std::unique_lock<std::mutex> HoldForTest() { return std::unique_lock<std::mutex>(mu_); }
  // The HTTP layer's request latency, by route pattern (never the raw path) and status code.
  // Takes only its own small lock.
  void ObserveRequest(const std::string& method, const std::string& route, int code,
                      int64_t duration_us) {
    counters_.ObserveRequest(method, route, code, duration_us);
  }

  // Refusals and sign-ins as events (api/audit_trail.h): auth.failed, auth.refused, auth.signin.
  AuditTrail& audit() { return audit_; }
  // The engine's clock (milliseconds since the epoch): tokens' expiry is checked against it.
  int64_t NowMs() const override { return clock_(); }

  // LedgerReads (api/read_model.h): how the views read memory.
  Status ReadDurable(const std::function<Status(const ReadModel&)>& read) override;
  void Read(const std::function<void(const ReadModel&)>& read) override;
  bool TryRead(const std::function<void(const ReadModel&)>& read) override;
  int64_t MemoryVersion() const override { return version_.load(); }
  store::StoreReader& DurableStore() override { return *store_; }

  // The node agents' side (api/agent_executor.h): registration, heartbeats and their orders,
  // order watches, job output, what agents report, node loss.
  AgentExecutor& agents() { return agents_; }

  // Housekeeping, called periodically: marks silent nodes lost, runs the cycle when due, samples
  // the utilization history and prunes. It never runs a backend's command (backends().Pass does).
  Status Tick();
  // The external backends (slurm, pbs, kubernetes) the queues use, and their passes: one pass of
  // a backend runs outside the engine's lock while its commands run, and passes of different
  // backends run side by side. The server runs each backend's passes on a thread of its own
  // (api/executors.h), so a scheduler whose commands hang delays its own jobs only: never the
  // cycle, node loss or another backend.
  BackendExecutor& backends() { return backends_; }
  // Runs one scheduling cycle now and commits its decisions.
  Status RunCycle();
  // Waits until everything queued so far is written (or, after a failed write, memory is
  // rebuilt from the store); its error is that failure.
  Status Sync();

  // The quota engine's invariants (capacity, limits, attribution) and the agreement of the job
  // records with its grants.
  Status CheckInvariants();

  const EngineConfig& config() const { return config_; }

 private:
  Engine(EngineConfig config, std::unique_ptr<store::Store> store, std::string data_dir,
         Clock clock);

  // Memory as the views read it. REQUIRES: mu_ held.
  ReadModel ModelLocked();
  // Bumped by every change to memory (QueueLocked, reloads): the views' renderings are kept
  // with the version they show.
  std::atomic<int64_t> version_{0};

  // --- engine_load.cc: memory as the store says it is (Recover), installed once it is whole.
  Status Load();
  int64_t NowS() const { return clock_() / 1000; }
  // Queues a batch for the store and waits, with `lock` released while the store writes, until it
  // and every batch queued before it is durable: a caller replies (and anyone acts) only on
  // durable decisions, and no fsync happens under the engine's mutex. Batches are written in
  // the order they were queued, several in one transaction when they queue up behind a write.
  // When a write fails, memory is rebuilt from the store, everything queued since is dropped
  // with it, and each caller whose batch was among them gets the error. An empty batch waits
  // for what is queued (its reply may rest on it), or, given `node`, only for what was queued
  // about that node's jobs: a heartbeat that changes nothing, about a node whose orders are
  // durable, does not wait at all.
  Status CommitLocked(Batch& b, std::unique_lock<std::mutex>& lock,
                      const std::string* node = nullptr);
  // The first half of CommitLocked: queues `b` for the writer (and empties it) without waiting.
  // Returns its sequence number, 0 when it was empty.
  int64_t QueueLocked(Batch& b);
  // Answers `done` with a queued call's reply once the batch it rests on is durable (its
  // sequence; 0: now), with the write's error if that failed, or at once with the call's own.
  void AnswerWhenDurable(Result<std::pair<Json, int64_t>> queued,
                         std::function<void(Result<Json>)> done);
  // Rebuilds memory from the store after a failed write; lets the oldest ended jobs leave memory
  // once durable.
  void CatchUpLocked();
  Status ReloadLocked(const Status& cause);
  // The one way a job's state changes: to `to` for `cause` when the job state table holds that
  // change (its update time set), else refused, logged at error level, and false: the caller
  // then leaves the job as it was.
  [[nodiscard]] bool TransitionLocked(Job& j, JobState to, JobCause cause);
  // Ends a held or pending job in the quota engine and in its record (`state` terminal); false
  // when the job state table refuses the change (nothing changed).
  [[nodiscard]] bool EndLocked(Job& j, JobState state, JobCause cause, const std::string& reason);

  // --- submit.cc
  // Submit's work under mu_: its reply, and the last batch the reply rests on (0: durable now).
  Result<std::pair<Json, int64_t>> SubmitQueued(const Identity& who, const Json& body,
                                                const std::string& idempotency_key, bool* replayed);

  // The store's fencing epoch when this engine opened (its lease's): in every reply to agents,
  // which ignore replies from an older one (a deposed leader's).
  int64_t leader_epoch_ = 0;

  // --- node_admin.cc: cordon, drain, uncordon; and the one check of what may take new work.
  NodeAdminTable admin_;  // cordons and drains, by node (a setting each)

  // Decision counts (moved to /metrics with their batch: SettleCountsLocked), the cycle's and
  // the requests' latencies.
  DecisionCounters counters_;
  void SettleCountsLocked();

  EngineConfig config_;
  std::unique_ptr<store::Store> store_;
  std::string data_dir_;
  Clock clock_;

  std::mutex mu_;
  std::unique_ptr<quota::QuotaEngine> qe_;
  // The jobs in memory and their indexes (scoped idempotency keys are "identity\nkey"; evicted
  // jobs are found in the store).
  JobTable jobs_;
  // The job a repeated key names, durable, or nullopt when the key is new; refused (409) when
  // that job's request was another: its queue, group or spec (as PrepareSubmit makes them)
  // differ from `asked`'s.
  Result<std::optional<Json>> RepeatedLocked(const Identity& who, const std::string& scoped,
                                             const Job& asked, std::unique_lock<std::mutex>& lock);
  // Jobs Load ended (no longer schedulable under the policy): written by the next Tick.
  std::vector<std::string> failed_on_load_;
  std::vector<quota::QuotaEngine::Drain> drains_;  // as last committed ("device.drains")
  Status broken_;  // set when a reload after a failed commit failed too: nothing is served
  // The commit pipeline. Batches are queued under mu_ (QueueLocked) and written in order by the
  // writer's thread (CommitWriter), which takes no engine lock, so the cycle can go on deciding
  // while its first decisions are written.
  // Under mu_:
  BatchSequence seq_;  // batch numbers, epochs, the last batch about and for each node
  OrderWatches watches_;
  CommitWriter writer_;  // last of what the writer's callbacks use: started last, stopped first
  // What the executors may ask of the engine (engine.cc, api/ledger_port.h): mu_, the jobs, the
  // quota engine, the nodes, transitions and the commit pipeline.
  class Port;
  BackendExecutor backends_;  // the external backends, one lane each (fixed after Open)
  AgentExecutor agents_;      // the node agents
  CycleDriver cycle_;         // the scheduling cycle and what its decisions become; its pacer
  AuditTrail audit_;          // refusals and sign-ins
  Housekeeping chores_;       // history samples, retention, fair-share history (through reads)
  Views views_;               // the read side: last, it reads the rest
};

}  // namespace tessera::api
