// The node agent's side of the agent protocol (agent/protocol.h, docs/agent-protocol.md):
//
//   control plane -> agent: the register and heartbeat replies (ParseRegisterReply,
//       ParseHeartbeatReply), and what the agent does with a start order before anything runs:
//       ValidateJobId, the job's environment (BuildJobEnvironment), its cgroup limits
//       (CgroupCpuMax, CgroupMemoryMax) and its output upload path (OutputPath);
//   agent -> control plane: the register and heartbeat bodies the agent then sends, built from
//       what the reply carried (RegisterBody, HeartbeatBody), which must read back as the same
//       JSON. The control plane's parsing of those bodies is api_requests_fuzz's.
//
// The whole input is offered as both replies.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "agent/launcher.h"
#include "agent/protocol.h"
#include "fuzz_util.h"

namespace {

using nlohmann::json;
using namespace tessera::agent;

void Require(bool ok) {
  if (!ok) __builtin_trap();
}

// What the agent does with one start order before it forks.
void Prepare(const JobSpec& spec) {
  if (!ValidateJobId(spec.id).ok()) return;  // refused: the job is reported failed
  LauncherOptions options;
  options.work_dir = "/nonexistent";
  options.capgpu_preload = "/nonexistent/libtessera_capgpu.so";
  const std::vector<std::string> env =
      BuildJobEnvironment(spec, {"PATH=/bin", "TESSERA_TOKEN=x"}, options);
  for (const std::string& kv : env) Require(kv.rfind("TESSERA_TOKEN=", 0) != 0);
  (void)CgroupCpuMax(spec.cpu_milli);
  (void)CgroupMemoryMax(spec.memory_mib);
  const std::string path = OutputPath(spec.id, spec.memory_mib);
  Require(path.find("/..") == std::string::npos && path.find('?') == path.rfind('?'));
}

// The heartbeat body after `reply`: the started jobs running, the cancelled ones finished.
void NextHeartbeat(const HeartbeatReply& reply) {
  std::vector<RunningJob> running;
  for (const JobSpec& s : reply.start)
    running.push_back({s.id, static_cast<pid_t>(running.size() + 100)});
  std::vector<FinishedReport> finished;
  for (const CancelOrder& c : reply.cancel) {
    finished.push_back({c.job, 128 + 15, 15, c.grace_ms});
  }
  const std::string node = reply.ack.empty() ? "node-1" : reply.ack.front();
  const json body = json::parse(HeartbeatBody(node, running, finished), nullptr, false);
  Require(body.is_object() && body["node"] == node);
  Require(body["running"].size() == running.size() && body["finished"].size() == finished.size());
  for (size_t i = 0; i < running.size(); ++i) Require(body["running"][i]["job"] == running[i].id);
  for (size_t i = 0; i < finished.size(); ++i) {
    Require(body["finished"][i]["job"] == finished[i].job);
    Require(body["finished"][i]["output_bytes"] == finished[i].output_bytes);
  }
}

// A register body (after a restart) over the devices and jobs the reply named.
void NextRegister(const HeartbeatReply& reply) {
  Inventory inv;
  inv.node = reply.ack.empty() ? "node-1" : reply.ack.front();
  inv.pool = reply.may_run && !reply.may_run->empty() ? reply.may_run->front() : "";
  std::vector<RunningJob> running;
  for (const JobSpec& s : reply.start) {
    running.push_back({s.id, 1});
    for (const DeviceBinding& d : s.devices) {
      inv.devices.push_back({d.index, d.mig.empty() ? "H100-80GB" : d.mig, s.memory_mib, d.uuid,
                             false, !d.mig.empty()});
    }
  }
  const json body = json::parse(RegisterBody(inv, true, running), nullptr, false);
  Require(body.is_object() && body["node"] == inv.node &&
          body["devices"].size() == inv.devices.size());
  Require(body["running"].size() == running.size());
  Require(inv.pool.empty() ? !body.contains("pool") : body["pool"] == inv.pool);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = tessera::fuzz::AsText(data, size);
  auto heartbeat_ms = ParseRegisterReply(text, 1000);
  if (heartbeat_ms.ok()) Require(*heartbeat_ms > 0);
  auto reply = ParseHeartbeatReply(text);
  if (!reply.ok()) return 0;
  for (const JobSpec& spec : reply->start) {
    Require(!spec.command.empty());
    Prepare(spec);
  }
  for (const CancelOrder& c : reply->cancel) Require(c.grace_ms >= 0);
  NextHeartbeat(*reply);
  NextRegister(*reply);
  return 0;
}
