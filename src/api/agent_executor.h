// AgentExecutor: the node agents' side of the control plane. It registers nodes (a node joins the
// cluster: its inventory durable before anything is placed on it), answers heartbeats (exits and
// running jobs in; start, stop and swap orders out, for durable decisions only), holds the
// agents' long polls for orders, stores job output, applies what agents report (device health,
// isolation, telemetry, jobs' activity), and judges liveness: nodes silent for the heartbeat
// timeout are lost (unless the leader itself stalled), starts never confirmed are given up, and
// the jobs held where they no longer run are requeued, stopped or lost.
//
// It reaches the engine only through an AgentPort (api/ledger_port.h): the engine's lock, the
// jobs and the quota engine to read, the job state machine and the commit pipeline. It keeps its
// own the registered nodes (the engine reads them, and loads them from the store), the monotonic
// clock silence is judged on and the registrations' order.
//
//   agent_messages.cc  the messages checked, before anything changes (pure functions)
//   agent_gateway.cc   registration, heartbeats and their orders, order watches, output
//   agent_reports.cc   device health, isolation and telemetry; jobs' activity
//   node_liveness.cc   node loss, starts never confirmed, jobs lost or finished on a node
//
// Thread-safety: the public methods without "Locked" may be called from any thread, without the
// engine's lock; the "Locked" ones with it held (the engine's Tick, cordon and load call them).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

#include "api/config.h"
#include "api/ledger_port.h"
#include "api/records.h"
#include "api/silence_watch.h"
#include "common/status.h"

namespace tessera::api {

class AgentExecutor {
 public:
  using Json = nlohmann::json;
  AgentExecutor(std::unique_ptr<AgentPort> port, const EngineConfig& config, std::string data_dir);

  Result<Json> RegisterNode(const Identity& who, const Json& body);
  Result<Json> Heartbeat(const Identity& who, const Json& body);
  // The same, answered through `done` once what it acknowledges is durable: a heartbeat that
  // reports exits is answered once they are written, without a thread waiting for it.
  void HeartbeatAsync(const Identity& who, const Json& body,
                      std::function<void(Result<Json>)> done);
  Status WriteOutput(const Identity& who, const std::string& job, int64_t offset,
                     const std::string& bytes);
  // A long poll for a node's orders (GET /v1/agent/orders): `wake` is called once, from any
  // thread, with the node's order sequence as soon as a durable change that gives the node new
  // orders is newer than `after` (at once when there is one already). One watch per node: a newer
  // watch answers the older with 0, as does UnwatchAll. The heartbeat reply's `seq` is the
  // `after` that wakes for nothing the agent already knows. Returns the watch's ticket.
  Result<uint64_t> WatchOrders(const Identity& who, const std::string& node, int64_t after,
                               std::function<void(int64_t)> wake);
  void UnwatchOrders(const std::string& node, uint64_t ticket);  // its deadline passed: no call
  void UnwatchAll();  // answers every watch with 0 (the server stops)
  // For tests: the monotonic clock (ms) silence and the leader's own stalls are judged on
  // (default: std::chrono::steady_clock). Every node is taken as heard at the switch.
  void SetMonotonicClockForTest(SilenceWatch::Clock monotonic);

  // Under the engine's lock.
  // Marks nodes silent for heartbeat_timeout lost, unless the leader stalled (no pass for half
  // that time: each gets a fresh window). Both on the monotonic clock, which wall steps miss.
  void MarkLostLocked(Batch& b);
  // A job whose start its agent has not confirmed (running or finished) within kStartTimeouts
  // heartbeat timeouts, although the agent heartbeats, is requeued (or lost) like a lost node's.
  void ExpireStartsLocked(Batch& b);
  static constexpr int64_t kStartTimeouts = 3;
  // An administrator's word (uncordon of `n`, or of its `device` when >= 0): its unhealthy
  // devices are healthy again, each with a device.healthy event naming `who` and the reason
  // cleared; the agent is told to start their health over (health_reset) with its replies.
  void ClearHealthLocked(const std::string& node, int device, const std::string& who, Batch& b);
  // The registered nodes, by name: what agents said of them, and their liveness.
  const std::map<std::string, NodeInfo>& NodesLocked() const { return nodes_; }
  // The nodes as loaded from the store (after a failed write, none: nothing is served).
  void SetNodesLocked(std::map<std::string, NodeInfo> nodes) { nodes_ = std::move(nodes); }
  // The monotonic time (ms) silence is judged on: a load takes every node as heard now.
  int64_t MonotonicNowLocked() const { return silence_.Now(); }

 private:
  int64_t NowS() const { return port_->NowMs() / 1000; }
  // PermissionDenied (and an audit event) unless `who` may speak for `node`. Without the lock.
  Status SpeaksFor(const Identity& who, const std::string& node, const char* what);
  // Heartbeat's work under the lock: its reply, and the last batch the reply rests on (0: none).
  Result<std::pair<Json, int64_t>> HeartbeatQueued(const Identity& who, const Json& body);
  // Orders for node n; only decisions durable by `durable` are acted on.
  Json OrdersLocked(const NodeInfo& n, Batch& b, int64_t durable);
  Json StartOrderLocked(const Job& j, const NodeInfo& n) const;
  // A job held on `node` that no longer runs there: stopped if it was being preempted, else
  // requeued (if its queue says so) or ended as lost, for `why`.
  void LoseJobLocked(const Job& j, const std::string& node, const std::string& why, Batch& b);
  // The part of `j` on `node` ended with `code` and `sig`, after `run_ms` by the agent's clock
  // (protocol 5; absent: an older agent's report, or a part that never started); `shutdown`: its
  // agent stopped it as it was itself stopped (protocol 6), which the reason says.
  void FinishPartLocked(const Job& j, const std::string& node, int code, int sig, Batch& b,
                        std::optional<int64_t> run_ms = std::nullopt, bool shutdown = false);
  // A `finished` entry of `node`'s agent: the part's end (FinishPartLocked), or, stopped by the
  // agent itself for a partition (`stopped_by`), the job lost there as on a lost node.
  void FinishReportedLocked(const Job& j, const std::string& node, const Json& f, Batch& b);
  void RecordTelemetryLocked(NodeInfo& n, const Json& body);  // a heartbeat's `devices`
  void ObserveActivityLocked(const Job& j, const Json& report, const std::string& actor, Batch& b);
  // A device's health as its agent reports it (registration or heartbeat `devices`: "health",
  // "health_reason"; absent: unchanged). A change is an event (device.unhealthy,
  // device.healthy) and goes to what may take new work; a device turned unhealthy has its jobs
  // preempted and requeued when unhealthy_requeue says so.
  void RecordHealthLocked(NodeInfo& n, const Json& devices, const std::string& actor, Batch& b);

  std::unique_ptr<AgentPort> port_;
  std::map<std::string, NodeInfo> nodes_;  // under the engine's lock
  const EngineConfig& config_;
  const std::string data_dir_;  // job output files
  SilenceWatch silence_;        // under the engine's lock
  std::mutex register_mu_;      // orders registrations (held without the lock while one is written)
};

}  // namespace tessera::api
