// The agent side of the control plane <-> node agent protocol (docs/agent-protocol.md): the
// JSON bodies the agent sends and the parsing of the replies it gets. Pure functions; no I/O.
//
// Parsing is strict about types (a `start` entry whose `command` is not a list of strings is an
// error naming the job and the field) and lenient about absence (a reply without `cancel` has no
// cancels). `may_run` is optional: when the reply omits it the agent stops nothing.
//
// Thread-safety: pure functions over values.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/discovery.h"
#include "agent/launcher.h"
#include "common/status.h"
#include "model/agent_protocol.h"

namespace tessera::agent {

struct CancelOrder {
  std::string job;
  int64_t grace_ms = 0;
};

struct HeartbeatReply {
  std::vector<JobSpec> start;
  std::vector<CancelOrder> cancel;
  std::optional<std::vector<std::string>> may_run;  // nullopt: the reply had no may_run
  std::vector<std::string> ack;
  // Swap orders for swapping shares (optional "swap": {"JOB": "out" | "in" | "idle"}): out
  // holds the job's memory in host RAM or on disk and pauses it until "in" (preemption by
  // swapping); idle moves it off the device until the job's next use; in brings it back.
  std::map<std::string, std::string> swap;
  // The node's order sequence the reply reflects: an order watch after it wakes only for news
  // (-1: the control plane keeps no order sequence; the agent does not watch).
  int64_t seq = -1;
  // The leader's fencing epoch (-1: the reply carried none, an older server). The agent ignores
  // a reply whose epoch is lower than the highest it has seen.
  int64_t epoch = -1;
  // Devices an administrator returned to service (issue 38): their health starts over from what
  // they report now (NvmlHealth::Reset). Absent: none.
  std::vector<int> health_reset;
};

// The answer to an order watch (GET /v1/agent/orders): woken with the sequence to watch after
// next, or not (its wait ran out, or a newer watch replaced it).
struct OrdersWake {
  bool wake = false;
  int64_t seq = 0;
};
Result<OrdersWake> ParseOrdersWake(const std::string& body);

// A finished job as reported until acknowledged.
struct FinishedReport {
  std::string job;
  int exit_code = 0;
  int signal = 0;
  int64_t output_bytes = 0;
  // Why the agent stopped the job itself, sent as `stopped_by` when not empty: "partition" (no
  // reply from the control plane for partition_stop_ms). "": it ended on its own, or was stopped
  // on the control plane's order.
  std::string stopped_by = "";
  // How long the job ran, by the agent's monotonic clock, sent as `run_ms` (protocol 5) when
  // known: -1 for a job that never started, or an exit kept on disk by an older agent.
  int64_t run_ms = -1;
};

// POST /v1/agent/register body.
// `finished`: exits the agent recorded and has not had acked (kept on disk across its restarts),
// as the `finished` entries of a heartbeat; the field is left out when there are none.
// `running`: the jobs this agent runs now (none after a restart); the control plane ends any
// other job it believed ran on the node.
// The node name goes into every message as a JSON string and into file names: 1 to 253
// printable ASCII characters without spaces or '/' (a byte that is not UTF-8 would make every
// message fail to encode). InvalidArgument naming it otherwise.
Status ValidateNodeName(const std::string& node);

// The body carries `"protocol": kAgentProtocolVersion` (model/agent_protocol.h).
std::string RegisterBody(const Inventory& inventory, bool cgroups,
                         const std::vector<RunningJob>& running = {},
                         const std::vector<FinishedReport>& finished = {});
// A register answer that refuses this agent's protocol version (HTTP 4xx whose error starts
// "agent protocol "): its message, which names both versions. nullopt for any other answer. The
// agent logs it and exits non-zero: retrying cannot help.
std::optional<std::string> ProtocolRefusal(int http_status, std::string_view body);
// heartbeat_ms of the register reply (`fallback_ms` when absent). Errors on malformed JSON,
// `"ok": false`, or a heartbeat_ms that is not a positive integer.
Result<int64_t> ParseRegisterReply(std::string_view body, int64_t fallback_ms);
// The whole register reply: heartbeat_ms as above, the leader's fencing `epoch` (-1 when absent)
// and `partition_stop_ms` (0 when absent: off), each a non-negative integer (an error otherwise).
struct RegisterReply {
  int64_t heartbeat_ms = 0;
  int64_t epoch = -1;
  int64_t partition_stop_ms = 0;
};
Result<RegisterReply> ParseRegisterReplyFields(std::string_view body, int64_t fallback_ms);

// Bytes as MiB, rounded up; never overflows (bytes up to INT64_MAX).
int64_t MiBRoundedUp(int64_t bytes);

// POST /v1/agent/heartbeat body.
// Device telemetry for a heartbeat (-1: not known, left out).
struct DeviceTelemetry {
  int index = 0;
  int util_pct = -1;
  int64_t memory_used_mib = -1;
  std::string health{};  // "ok" or "unhealthy" (protocol 3); "": not known, left out
  std::string health_reason{};
};
// Each running entry carries "active" and "gpu_memory_used_mib" when known (RunningJob::active,
// gpu_memory_used_bytes); `devices` adds the body's "devices" list when not empty, each entry
// with "health" (and "health_reason" when unhealthy) where known.
std::string HeartbeatBody(const std::string& node, const std::vector<RunningJob>& running,
                          const std::vector<FinishedReport>& finished,
                          const std::vector<DeviceTelemetry>& devices = {});
Result<HeartbeatReply> ParseHeartbeatReply(std::string_view body);

// "/v1/agent/jobs/<id>/output?offset=<n>" (the id percent-encoded where needed).
std::string OutputPath(const std::string& job, int64_t offset);
// "/v1/agent/orders?node=<node>&after=<seq>&wait_ms=<ms>" (the node percent-encoded where
// needed): an order watch (OrdersWake).
std::string OrdersWatchPath(const std::string& node, int64_t after, int64_t wait_ms);

}  // namespace tessera::agent
