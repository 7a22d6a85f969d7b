// What the control plane keeps in memory of its nodes and jobs, and the changes one step
// collects for a commit. The engine's parts share these records; each record has one owner
// (jobs: the job table, nodes: the engine under its mutex) that changes it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "api/json_text.h"
#include "common/status.h"
#include "model/job_state.h"
#include "model/resources.h"
#include "sched/quota/engine.h"
#include "store/store.h"

namespace tessera::quota {

// A drain as the store keeps it (the event "device.drains", which a restart reads back): each
// field under its own name, a missing one at its default. One mapping for both ways.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(QuotaEngine::Drain, node, device, job, evict, add,
                                                enable_mig, amd_pair, node_wide, why)

}  // namespace tessera::quota

namespace tessera::api {

using Json = nlohmann::json;

struct DeviceInfo {
  int index = 0;
  std::string model;
  MiB memory_mib = 0;
  std::string uuid;
  bool simulated = false;
  // Telemetry from the agent's heartbeats (NVML, or synthesized on simulated nodes); -1 when
  // never reported.
  int util_pct = -1;         // SM utilization, percent
  MiB memory_used_mib = -1;  // device memory in use
  int64_t telemetry_ms = 0;  // when last reported
  // Health as its agent reports it (agent protocol 3: critical XID events, double-bit ECC
  // errors): an unhealthy device takes no new work (Schedulable) and its jobs are requeued or
  // left to finish (EngineConfig::unhealthy_requeue).
  bool healthy = true;
  std::string health_reason{};
  // Returned by an administrator (ClearHealthLocked): the reason cleared; agent yet to hear.
  std::string health_cleared{};
  bool health_reset = false;
  std::string isolation{};  // its agent's grade (IsolationRank; protocol 3; "": not said)
  bool mps = false;  // offers MPS to sm-sharing shares (protocol 4 "mps"): they get grade mps
};
struct NodeInfo {
  std::string name;
  std::string pool;
  MilliCpu cpu_milli = 0;
  MiB memory_mib = 0;
  MiB swap_mib = 0;  // host RAM + disk for swapped-out share memory (the agent's --swap-*)
  bool simulated = false;
  std::vector<DeviceInfo> devices;
  int64_t last_heartbeat_ms = 0;
  int64_t heard_mono_ms = 0;  // the same on the monotonic clock: silence is judged on it
  bool lost = false;
  bool jobs_released = false;  // lost, and its jobs requeued or ended (see partition_stop)
  std::set<std::string> running_reported;  // the jobs its agent last said it runs
};
struct Job {
  // Its record as stored, but for its state: rec.state is empty in memory (RecordOf writes
  // `state`'s name, JobFromRecord reads it back).
  store::JobRecord rec;
  JobState state = kInitialJobState;  // changed only by TransitionLocked
  Json spec;
  std::string spec_text;  // spec.dump(), kept: the spec never changes
  // Its record is in the store, or queued for it: updates need not rewrite the spec.
  bool stored = false;
  int64_t last_seq = 0;  // the last commit batch that carried its record
  int handle = -1;       // in the quota engine
  // What the job holds while placed/starting/running/preempting.
  std::string form;
  std::vector<quota::GrantView> grants;  // on agent nodes (empty for external backends)
  bool borrowed = false;
  std::string node;  // the first grant's node, or "backend:partition"
  int preemptions = 0;
  // Stopped by its queue's runtime guard (max_runtime): "preempting" until its processes are
  // gone, then ended, not requeued.
  bool guard_stopped = false;
  // When it first ran in this placement (0: not yet); while pending, its place in the order the
  // last cycle considered the waiting jobs (1: first; 0: unknown).
  int64_t start_ms = 0;
  int wait_position = 0;
  bool cancel_requested = false;
  bool counted_live = false;  // in live_by_identity_ (until a batch carries it ended)
  // What the node agents' executor (api/agent_executor.h) keeps of it: its start orders, what
  // its agents report of it, and the swap orders they get. The executor writes it through
  // AgentPort::AgentSideOf (it sees the job itself only const); the cycle sets it afresh for
  // each placement, and orders swaps.
  struct AgentSide {
    // Nodes where a process of an earlier placement may still run (the job was requeued from
    // there while starting, running or preempting): placed there again, its start waits until
    // the agent no longer reports it, and a report of it running is not this placement's.
    std::set<std::string> stale_on;
    int64_t start_sent_ms = 0;        // when its start order last went out (single-node jobs)
    int64_t starting_since_mono = 0;  // when it first went out for this placement (monotonic)
    // Per node of the job: "NODE" once its processes there ended, "sent:NODE" once a gang part
    // was ordered to start there.
    std::set<std::string> parts_done;
    // Preempted before any of its processes was ordered to start (placed, or a gang whose every
    // started part had ended): nothing of it runs, so no exit will end the preemption; the next
    // orders of its node requeue it (OrdersLocked). Stored (the placement's "unstarted") so that
    // a restart does not forget it.
    bool preempted_unstarted = false;
    int64_t pid = 0;
    // Telemetry: the last time its devices or processes showed activity (its start until a
    // report says so), whether it is "held but idle" (no activity for idle_after; a job.idle
    // event marked the change), its measured device memory (-1: unknown).
    struct Activity {
      int64_t last_active_ms = 0;
      bool idle = false;
      MiB gpu_memory_used_mib = -1;
    } activity;
    // A swapping share's memory (not stored but `state`).
    struct Swap {
      std::string state;  // as its agent last reported it ("": none)
      // Preemption by swapping: held swapped out on this node while pending (""), and the swap
      // order its agent gets ("out", "in", "idle"; docs/agent-protocol.md).
      std::string held_on, order;
      MiB swapped_mib = 0;
      // The hold as the engine keeps it (JobView::held_*), stored so a restart keeps it
      // (QuotaEngine::RestoreHold): its card on held_on, its memory, since when, its start and
      // the time held before, in seconds.
      int held_device = -1;
      MiB held_mib = 0;
      int64_t held_since_s = -1, held_start_s = -1, held_paused_s = 0;
    } swap;
  } agent;
  // What an external backend's executor keeps of it (backend empty: local agents). The executor
  // writes it through LedgerPort::ExternalOf; the cycle sets it when it dispatches the job.
  struct External {
    std::string backend;
    Json dispatch;             // a queue of several backends: their forecasts when it went to one
    std::string id;            // the scheduler's job id once submitted
    std::string node;          // where the scheduler runs it
    std::string gres;          // the scheduler's allocation text
    std::vector<int> devices;  // GPU indices the scheduler reports
    std::string native_state;
    int submit_attempts = 0;
    int64_t next_submit_ms = 0;
    bool lookup_first = false;  // a submission may have happened: look before submitting
    bool cancel_sent = false;
    int unknown_polls = 0;
    // Backends that suspend (Kubernetes): the Job's spec.suspend as last seen or set, when the
    // next suspend/resume may be sent, and since when its pod has been unschedulable.
    bool suspended = false;
    int64_t next_suspend_ms = 0;
    int64_t unschedulable_since_ms = 0;
  } ext;
};
// A validated submission, before it has an id.
struct PendingSubmit {
  Job job;
  quota::JobSpec qspec;
};
// Store events and changed records collected by one step, committed together.
struct Batch {
  std::vector<store::Event> events;
  std::vector<const Job*> jobs;    // the ledger's own (JobTable::Own), written with the events
  std::vector<std::string> nodes;  // nodes whose jobs lost their grants in this batch
  // The node whose own heartbeat made this batch: what it changed there is no news to that
  // node's agent (no order watch wakes for it).
  std::string from_node;
  void Add(store::Event e, const Job* j = nullptr) {
    events.push_back(std::move(e));
    if (j) jobs.push_back(j);
  }
  bool empty() const { return events.empty() && jobs.empty(); }
  void Touch(const std::vector<std::string>& n) { nodes.insert(nodes.end(), n.begin(), n.end()); }
};

// The agent nodes of a job's grants, each once, in grant order.
std::vector<std::string> NodesOf(const Job& j);
inline bool Holds(const Job& j) { return HoldsCapacity(j.state); }
inline bool Ended(const Job& j) { return IsTerminal(j.state); }
// What the scheduler knows of a node (records.cc).
quota::NodeSpec SpecOf(const NodeInfo& n);
// A stored record as a Job, not entered into the quota engine (recovery.cc): for loading,
// and for views of jobs no longer in memory.
Result<Job> JobFromRecord(store::JobRecord r);
// An event for the store at `time_ms` (records.cc): what is stored is valid UTF-8 whatever reached
// us (an event once made every page of the log that held it fail to render).
// The texts are taken by value: one moved in is kept as it is when it is valid already.
store::Event EventAt(int64_t time_ms, std::string actor, std::string kind, std::string subject,
                     std::string reason, const Json& data = Json::object());
// The same with data already written as JSON text (the cycle's hot path).
store::Event EventAt(int64_t time_ms, std::string actor, std::string kind, std::string subject,
                     std::string reason, JsonText data);
// A job as its store record: state, spec (unless already stored) and placement (records.cc).
store::JobRecord RecordOf(const Job& j);
// What the quota engine is asked for a job: its spec as a scheduling request (records.cc).
quota::JobSpec QuotaSpecOf(const Job& j);
// A job's grants as a JSON array, for its record and its job.placed event (records.cc).
void WriteGrants(JsonText& w, const std::vector<quota::GrantView>& grants);
// A part of a gang whose start order has not gone to `node` yet (agent_gateway.cc).
bool GangPartUnsent(const Job& j, const std::string& node);
// The reason's prefix of a job its queue's max_runtime is stopping.
inline constexpr char kGuardStopping[] = "stopping: ";
// The GPU compute a job's grants hold.
inline MilliGpu GpuHeld(const std::vector<quota::GrantView>& grants) {
  MilliGpu g = 0;
  for (const auto& x : grants) g += x.compute;
  return g;
}

}  // namespace tessera::api
