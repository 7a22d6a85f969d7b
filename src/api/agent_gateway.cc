// The node agents' side: registration (a node joins the scheduler's cluster), heartbeats (exits
// and running jobs in; start and stop orders out), node loss, and job output uploads. What the
// agents report about devices and jobs is applied in agent_reports.cc.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <future>
#include <set>

#include "api/agent_executor.h"
#include "api/agent_messages.h"
#include "api/read_model.h"
#include "api/recovery.h"
#include "common/log.h"
#include "common/text.h"
#include "model/agent_protocol.h"
#include "model/isolation.h"
#include "model/quantity.h"

namespace tessera::api {

AgentExecutor::AgentExecutor(std::unique_ptr<AgentPort> port, const EngineConfig& config,
                             std::string data_dir)
    : port_(std::move(port)), config_(config), data_dir_(std::move(data_dir)) {}

Status AgentExecutor::SpeaksFor(const Identity& who, const std::string& node, const char* what) {
  if (who.MaySpeakFor(node)) return Status::Ok();
  static const log::Logger kLog("serve");
  kLog.Warn("refused: an identity spoke for a node it is not bound to",
            {{"identity", who.name}, {"action", what}, {"node", node}});
  {
    auto lock = port_->Lock();
    port_->Audit(who.name, "agent.refused", node, std::string("may not ") + what + " for this node",
                 {{"action", what}});
  }
  return Status::PermissionDenied("identity '" + who.name + "' may not " + what + " for node '" +
                                  node + "'");
}

Result<Json> AgentExecutor::RegisterNode(const Identity& who, const Json& body) {
  if (who.role != Role::kAgent && who.role != Role::kAdmin)
    return Status::PermissionDenied("only agents register nodes");
  if (!body.is_object() || !body.contains("node") || !body["node"].is_string() ||
      body["node"].get<std::string>().empty()) {
    return Status::InvalidArgument("'node' is required");
  }
  if (Status st = ValidateNodeName(body["node"].get<std::string>()); !st.ok()) return st;
  if (Status st = SpeaksFor(who, body["node"].get<std::string>(), "register"); !st.ok()) return st;
  if (Status st = CheckProtocolVersion(body); !st.ok()) return st;
  if (Status st = CheckRegistration(body); !st.ok()) return st;
  if (Status st = CheckHeartbeatJobs(body); !st.ok()) return st;  // its `running`, `finished`
  Result<NodeInfo> parsed = NodeOfRegistration(body);
  if (!parsed.ok()) return parsed.status();
  NodeInfo& n = *parsed;
  Result<std::set<std::string>> running = RunningOfRegistration(body);
  if (!running.ok()) return running.status();
  const quota::NodeSpec spec = SpecOf(n);
  Json inv = body;
  inv["node"] = n.name;
  inv["pool"] = n.pool;
  // Registrations one at a time (the store's inventory and memory's in the same order), and the
  // inventory's fsync outside the engine's mutex: the scheduler checks the inventory first
  // (one it cannot hold is refused and never saved), keeps the node down while it is written,
  // and takes it up once durable, so nothing is placed on an inventory a restart would not find.
  std::unique_lock<std::mutex> registering(register_mu_);
  auto lock = port_->Lock();
  if (Status broken = port_->Broken(); !broken.ok()) return broken;
  Status added = port_->AddNode(spec, /*down=*/true);
  if (!added.ok()) return Status::InvalidArgument("node '" + n.name + "': " + added.message());
  lock.unlock();
  Status st = port_->SaveNode(n.name, inv.dump());
  lock.lock();
  if (!st.ok()) return port_->Reload(st);
  // Up (AddNode of the same inventory brings a down node back; after a reload meanwhile, adds it).
  added = port_->AddNode(spec, /*down=*/false);
  if (!added.ok())
    return port_->Reload(Status::Internal("node '" + n.name + "': " + added.message()));
  n.last_heartbeat_ms = port_->NowMs();
  n.heard_mono_ms = silence_.Now();
  port_->ApplyIsolation(n);
  auto old = nodes_.find(n.name);
  Batch b;
  b.Add(EventAt(port_->NowMs(), who.name, "node.registered", n.name, "",
                {{"devices", n.devices.size()}, {"simulated", n.simulated}}),
        nullptr);
  if (old != nodes_.end() && old->second.lost) {
    b.Add(EventAt(port_->NowMs(), who.name, "node.returned", n.name, "registered again after loss"),
          nullptr);
  }
  n.running_reported = *running;
  if (old != nodes_.end() && old->second.devices.size() == n.devices.size()) {
    // Health as last known, so that what the registration says of it is a change (or not).
    for (size_t i = 0; i < n.devices.size(); ++i) {
      n.devices[i].healthy = old->second.devices[i].healthy;
      n.devices[i].health_reason = old->second.devices[i].health_reason;
      n.devices[i].health_cleared = old->second.devices[i].health_cleared;
      n.devices[i].health_reset = old->second.devices[i].health_reset;
    }
  }
  port_->SetSchedulable(nodes_[n.name] = n);  // its cordon or drain, kept across registrations
  port_->WantCycle();
  // Exits the agent kept on disk while it (or its link) was down: the jobs ended, they do not
  // run again. Acknowledged (like a heartbeat's) once durable.
  Json ack = Json::array();
  for (const auto& f : body.value("finished", Json::array())) {
    const std::string id = f["job"].get<std::string>();
    ack.push_back(id);
    const Job* it = port_->Jobs().Find(id);
    if (it == nullptr || !Holds(*it) || !it->ext.backend.empty() ||
        it->agent.parts_done.count(n.name))
      continue;
    const auto on = NodesOf(*it);
    if (std::find(on.begin(), on.end(), n.name) == on.end()) continue;
    FinishReportedLocked(*it, n.name, f, b);
  }
  // What the agent runs now is the truth: a job the control plane believed started there that
  // the (restarted) agent does not run is over there, at once rather than at a heartbeat timeout.
  // (An agent that does not say what it runs is not reconciled.)
  const std::vector<std::string> held = body.contains("running")
                                            ? port_->Jobs().OnNode(n.name)
                                            : std::vector<std::string>{};  // a copy
  for (const std::string& id : held) {
    const Job& j = port_->Jobs().Get(id);
    if (j.state == JobState::kPlaced || running->count(id) || j.agent.parts_done.count(n.name))
      continue;
    if (GangPartUnsent(j, n.name)) continue;
    LoseJobLocked(j, n.name, "not running on node '" + n.name + "' when its agent registered again",
                  b);
  }
  // A device the agent reports unhealthy (or healthy again) as it registers (protocol 3; an
  // older agent says nothing of health: as it was).
  RecordHealthLocked(nodes_[n.name], body.value("devices", Json::array()), "agent:" + n.name, b);
  st = port_->Commit(b, lock);
  if (!st.ok()) return st;
  Json reply = {{"ok", true},
                {"heartbeat_ms", config_.heartbeat_interval_ms},
                {"epoch", port_->Epoch()},
                {"ack", std::move(ack)}};
  if (config_.partition_stop_ms > 0) reply["partition_stop_ms"] = config_.partition_stop_ms;
  return reply;
}

namespace {

// A job a runtime guard stopped ends with the guard's words: "stopped: max_runtime 100s ...".
std::string GuardStopReason(const Job& j) {
  return "stopped: " +
         j.rec.reason.substr(std::min(j.rec.reason.size(), std::strlen(kGuardStopping)));
}

}  // namespace

void AgentExecutor::FinishPartLocked(const Job& j, const std::string& node, int code, int sig,
                                     Batch& b, std::optional<int64_t> run_ms, bool shutdown) {
  port_->AgentSideOf(j).parts_done.insert(node);
  bool all_done = true;
  for (const std::string& n : NodesOf(j)) all_done = all_done && j.agent.parts_done.count(n);
  const bool failed = code != 0 || sig != 0;
  const std::string actor = "agent:" + node;
  if (j.state == JobState::kPreempting && failed && !j.cancel_requested && !j.guard_stopped) {
    // Stopped by the preemption (a signal, or a non-zero exit): pending again once all parts are.
    // Cancelled meanwhile, it ends cancelled below instead (requeued, it ran once more).
    if (!all_done) return;
    port_->Stopped(j, b);  // job.requeued: pending again, its submit time kept
    return;
  }
  if (!all_done && !failed && !j.cancel_requested) {
    b.Add(
        EventAt(port_->NowMs(), actor, "job.part_finished", j.rec.id, "part on " + node + " ended"),
        &j);
    return;
  }
  const JobState state = j.cancel_requested ? JobState::kCancelled
                         : failed           ? JobState::kFailed
                                            : JobState::kSucceeded;
  std::string reason = j.cancel_requested ? "cancelled"
                       : j.guard_stopped  ? GuardStopReason(j)
                       : sig != 0         ? "killed by signal " + std::to_string(sig)
                       : code != 0        ? "exit code " + std::to_string(code)
                                          : "";
  if (failed && shutdown && !j.cancel_requested && !j.guard_stopped)
    reason = "stopped as its agent on node '" + node + "' was shut down (" + reason + ")";
  if (failed && NodesOf(j).size() > 1) reason += " (part on " + node + ")";
  if (!port_->End(j, state, JobCause::kExited, reason)) return;
  port_->SetExitCode(j, code);
  Json data = {{"exit_code", code}, {"signal", sig}};
  if (run_ms) {
    port_->SetRanFor(j, *run_ms);
    data["run_ms"] = *run_ms;
  }
  b.Add(EventAt(port_->NowMs(), actor, std::string("job.") + JobStateName(state), j.rec.id, reason,
                data),
        &j);
  port_->WantCycle();
}

// A part of a gang whose start order has not gone to `node` yet. The job may already be
// running elsewhere: the first part's start moves it to "starting", its first report to
// "running", and the other parts' orders follow (each once its decisions are durable).
bool GangPartUnsent(const Job& j, const std::string& node) {
  if (j.state != JobState::kStarting && j.state != JobState::kRunning) return false;
  return NodesOf(j).size() > 1 && !j.agent.parts_done.count("sent:" + node);
}

Json AgentExecutor::StartOrderLocked(const Job& j, const NodeInfo& n) const {
  Json devs = Json::array();
  MilliCpu cpu = 0;
  MiB mem = 0, cap = 0;
  for (const auto& g : j.grants) {
    if (g.node != n.name) continue;
    cpu += g.cpu;
    mem += g.host_memory;
    if (g.device < 0) continue;
    Json d = {
        {"index", g.device},
        {"uuid", g.device < static_cast<int>(n.devices.size()) ? n.devices[g.device].uuid : ""},
        {"mig", ""}};
    if (!g.slot.empty()) d["slot"] = g.slot;  // the agent creates (or finds) this partition
    // An AMD device's pair, for a partition and a whole card or share alike: the agent switches
    // an idle card the cycle returned to SPX+NPS1 back before it starts the job.
    const std::string pair = port_->Quota().device(g.node, g.device).amd_pair;
    if (!pair.empty()) d["mode"] = pair;
    devs.push_back(d);
    if (j.form == "share") cap = g.memory;
  }
  Json env = j.spec.value("env", Json::object());
  env["TESSERA_QUEUE"] = j.rec.queue;
  env["TESSERA_GROUP"] = j.rec.group;
  env["TESSERA_IDENTITY"] = j.rec.identity;
  env["TESSERA_FORM"] = j.form;
  const std::vector<std::string> nodes = NodesOf(j);
  if (nodes.size() > 1) {
    std::string list;
    for (const auto& x : nodes) list += (list.empty() ? "" : ",") + x;
    env["TESSERA_GANG_NODES"] = list;
    env["TESSERA_GANG_RANK"] =
        std::to_string(std::find(nodes.begin(), nodes.end(), n.name) - nodes.begin());
  }
  Json order = {{"job", j.rec.id},
                {"command", j.spec["command"]},
                {"env", env},
                {"cpu_milli", cpu},
                {"memory_mib", mem},
                {"devices", devs},
                {"gpu_memory_limit_bytes", cap * 1024 * 1024}};
  if (j.spec.contains("run_as")) order["run_as"] = j.spec["run_as"];
  if (j.form == "share") {
    const QueueRoute* route = config_.FindRoute(j.rec.queue);
    if (route != nullptr && route->swap_overcommit_percent > 0) order["swap"] = true;
    // sm-sharing (issue 38): the agent starts the job as an MPS client at the grant's percent.
    const int pct = j.grants.empty() ? 0 : j.grants[0].sm_percent;
    if (pct > 0) order["compute"] = {{"mode", "sm-sharing"}, {"percent", pct}};
  }
  return order;
}

Result<Json> AgentExecutor::Heartbeat(const Identity& who, const Json& body) {
  std::promise<Result<Json>> answered;
  HeartbeatAsync(who, body, [&answered](Result<Json> r) { answered.set_value(std::move(r)); });
  Result<Json> result = answered.get_future().get();
  if (!result.ok())
    (void)port_->Sync();  // a failed write: memory is rebuilt before the caller looks
  return result;
}

void AgentExecutor::HeartbeatAsync(const Identity& who, const Json& body,
                                   std::function<void(Result<Json>)> done) {
  // A failed write: the agent reports the exits again; nothing was started.
  port_->AnswerWhenDurable(HeartbeatQueued(who, body), std::move(done));
}

Result<std::pair<Json, int64_t>> AgentExecutor::HeartbeatQueued(const Identity& who,
                                                                const Json& body) {
  if (who.role != Role::kAgent && who.role != Role::kAdmin)
    return Status::PermissionDenied("only agents heartbeat");
  if (!body.is_object() || !body.contains("node") || !body["node"].is_string())
    return Status::InvalidArgument("'node' is required");
  if (Status st = OnlyKnownFields(body, {"node", "running", "finished", "devices"}, "heartbeat");
      !st.ok())
    return st;
  if (Status st = CheckTelemetry(body); !st.ok()) return st;
  if (Status st = CheckHeartbeatJobs(body); !st.ok()) return st;
  const std::string node = body["node"].get<std::string>();
  if (Status st = ValidateNodeName(node); !st.ok()) return st;
  if (Status st = SpeaksFor(who, node, "heartbeat"); !st.ok()) return st;
  auto lock = port_->Lock();
  if (Status broken = port_->Broken(); !broken.ok()) return broken;
  auto nit = nodes_.find(node);
  if (nit == nodes_.end()) return Status::NotFound("node '" + node + "' is not registered");
  NodeInfo& n = nit->second;
  n.last_heartbeat_ms = port_->NowMs();
  n.heard_mono_ms = silence_.Now();
  Batch b;
  b.from_node = node;
  const std::string actor = "agent:" + node;
  if (n.lost) {
    n.lost = false;
    n.jobs_released = false;
    port_->SetSchedulable(n);  // up, unless cordoned
    port_->WantCycle();
    b.Add(EventAt(port_->NowMs(), actor, "node.returned", node, "heartbeat after loss"), nullptr);
  }
  auto on_node = [&](const Job& j) {
    const auto nodes = NodesOf(j);
    return Holds(j) && j.ext.backend.empty() &&
           std::find(nodes.begin(), nodes.end(), node) != nodes.end();
  };
  n.running_reported.clear();
  for (const auto& r : body.value("running", Json::array()))
    n.running_reported.insert(r["job"].get<std::string>());
  Json ack = Json::array();
  for (const auto& f : body.value("finished", Json::array())) {
    const std::string id = f["job"].get<std::string>();
    ack.push_back(id);
    const Job* it = port_->Jobs().Find(id);
    if (it == nullptr || !on_node(*it) || it->agent.parts_done.count(node)) continue;
    FinishReportedLocked(*it, node, f, b);
  }
  for (const auto& r : body.value("running", Json::array())) {
    const Job* it = port_->Jobs().Find(r["job"].get<std::string>());
    if (it != nullptr && it->state == JobState::kPending && it->agent.swap.held_on == node) {
      Json swap_only = r;  // held swapped out: its swap state only, no activity
      swap_only.erase("active");
      ObserveActivityLocked(*it, swap_only, actor, b);
      continue;
    }
    if (it == nullptr || !on_node(*it)) continue;
    const Job& j = *it;
    // An earlier placement's process: not this one's start (OrdersLocked has it stopped first).
    if (j.state == JobState::kPlaced && j.agent.stale_on.count(node)) continue;
    port_->AgentSideOf(j).pid = r.value("pid", int64_t{0});
    if ((j.state == JobState::kStarting || j.state == JobState::kPlaced) &&
        port_->Transition(j, JobState::kRunning, JobCause::kRunning)) {
      port_->AgentSideOf(j).activity.last_active_ms =
          port_->NowMs();  // a fresh start counts as activity
      b.Add(EventAt(port_->NowMs(), actor, "job.running", j.rec.id, "",
                    {{"pid", j.agent.pid}, {"node", node}}),
            &j);
    }
    // Back on its device by its agent's word: the "in" order has been carried out.
    if (j.agent.swap.order == "in" && r.contains("swapped") && r["swapped"].is_boolean() &&
        !r["swapped"].get<bool>()) {
      port_->AgentSideOf(j).swap.order.clear();
    }
    ObserveActivityLocked(j, r, actor, b);
  }
  RecordTelemetryLocked(n, body);
  RecordHealthLocked(n, body.value("devices", Json::array()), actor, b);
  const int64_t durable = port_->Durable();
  Json orders = OrdersLocked(n, b, durable);
  // What these orders reflect: every decision about the node up to here (an order watch after
  // it wakes for the next one, not for what this heartbeat changed itself).
  orders["seq"] = std::min(port_->LastNews(node), durable);
  // With nothing to acknowledge the reply waits for no write. Its orders name only durable
  // decisions (see OrdersLocked), and what this heartbeat changed (running, starting) is
  // queued: were it lost, the next heartbeat says it again. Exits are acknowledged only once
  // durable: an acked exit is never reported again.
  port_->Queue(b);
  const int64_t target = ack.empty() ? 0 : port_->LastQueued();
  orders["ack"] = std::move(ack);
  orders["epoch"] = port_->Epoch();
  // Devices an administrator returned: the agent starts their health over (until it says ok).
  Json reset = Json::array();
  for (const DeviceInfo& d : n.devices) {
    if (d.health_reset) reset.push_back(d.index);
  }
  if (!reset.empty()) orders["health_reset"] = std::move(reset);
  return std::pair<Json, int64_t>{std::move(orders), target};
}

// The heartbeat's telemetry: device entries {index, util_pct 0-100, memory_used_mib}, and on each
// running entry "active" (its devices or processes showed activity since the last heartbeat) and
// "gpu_memory_used_mib". All optional; an agent that sends none is never judged idle.
// Orders for node n: start what was placed there; stop what is cancelled or preempted; the
// rest may run (anything else the agent runs is stopped).
Json AgentExecutor::OrdersLocked(const NodeInfo& n, Batch& b, int64_t durable) {
  const std::string& node = n.name;
  auto on_node = [&](const Job& j) {
    const auto nodes = NodesOf(j);
    return Holds(j) && j.ext.backend.empty() &&
           std::find(nodes.begin(), nodes.end(), node) != nodes.end();
  };
  Json start = Json::array(), cancel = Json::array(), may_run = Json::array();
  const int64_t preempt_grace_ms = config_.policy.grace_seconds * 1000;
  Json swap = Json::object();
  std::vector<std::string> unstarted;  // preempted before any start went out: requeued below
  for (const std::string& id : port_->Jobs().OnNode(node)) {
    const Job& j = port_->Jobs().Get(id);
    if (j.state == JobState::kPreempting && j.agent.preempted_unstarted && on_node(j)) {
      unstarted.push_back(id);  // nothing of it runs: no exit will come to end the preemption
      continue;
    }
    if (j.state == JobState::kPending && !j.agent.swap.held_on.empty()) {
      // Held swapped out here: its processes stay, paused, until it resumes or is stopped.
      if (j.agent.swap.held_on == node) {
        may_run.push_back(id);
        swap[id] = "out";
      }
      continue;
    }
    if (!on_node(j) || j.agent.parts_done.count(node)) continue;
    if (!j.agent.swap.order.empty()) swap[id] = j.agent.swap.order;
    const bool gang = NodesOf(j).size() > 1;
    // A decision still on its way to the store is not acted on: its order goes out with a
    // later heartbeat, once it is durable (the job stays allowed to run meanwhile).
    const bool decided = j.last_seq <= durable;
    if (j.state == JobState::kPlaced && j.agent.stale_on.count(node)) {
      // Requeued from here while its process ran, and placed here again: that process stops
      // first (it is not in may_run), so that no two bindings of the job run at once.
      if (n.running_reported.count(id)) continue;
      port_->AgentSideOf(j).stale_on.erase(node);
    }
    if (j.state == JobState::kPlaced || GangPartUnsent(j, node)) {
      if (!decided) continue;
      const bool starts = j.state == JobState::kPlaced;  // else: a gang's next part
      if (starts && !port_->Transition(j, JobState::kStarting, JobCause::kStarted)) continue;
      start.push_back(StartOrderLocked(j, n));
      Job::AgentSide& side = port_->AgentSideOf(j);
      side.start_sent_ms = port_->NowMs();
      side.starting_since_mono = silence_.Now();
      if (gang) side.parts_done.insert("sent:" + node);
      if (starts) {
        b.Add(EventAt(port_->NowMs(), "engine", "job.starting", id, "", {{"node", node}}), &j);
      }
      continue;
    }
    if (j.state == JobState::kStarting && !gang && decided && !n.running_reported.count(id) &&
        port_->NowMs() - j.agent.start_sent_ms >= 2 * config_.heartbeat_interval_ms) {
      // Sent, and neither running nor finished on the agent's word since: the reply that carried
      // the start was lost. Sent again (an agent ignores a start for a job it runs).
      start.push_back(StartOrderLocked(j, n));
      port_->AgentSideOf(j).start_sent_ms = port_->NowMs();
      continue;
    }
    may_run.push_back(id);
    if (!decided) continue;
    if (j.state == JobState::kPreempting) {
      cancel.push_back({{"job", id}, {"grace_ms", preempt_grace_ms}});
    } else if (j.cancel_requested) {
      cancel.push_back({{"job", id}, {"grace_ms", config_.cancel_grace_ms}});
    }
  }
  for (const std::string& id : unstarted) {
    const Job& j = port_->Jobs().Get(id);
    b.Touch(NodesOf(j));
    if (j.cancel_requested || j.guard_stopped) {
      // Cancelled, or stopped by a runtime guard, before it ran: it ends so (not requeued).
      const std::string why = j.cancel_requested ? std::string("cancelled") : GuardStopReason(j);
      const JobState to = j.cancel_requested ? JobState::kCancelled : JobState::kFailed;
      if (port_->End(j, to, j.cancel_requested ? JobCause::kCancelled : JobCause::kExited, why)) {
        b.Add(EventAt(port_->NowMs(), "engine", std::string("job.") + JobStateName(to), id, why),
              &j);
      }
      port_->WantCycle();
    } else {
      port_->Stopped(j, b);  // job.requeued: pending again, its submit time kept
    }
  }
  Json orders = {{"start", start}, {"cancel", cancel}, {"may_run", may_run}};
  if (!swap.empty()) orders["swap"] = std::move(swap);
  return orders;
}

Status AgentExecutor::WriteOutput(const Identity& who, const std::string& job, int64_t offset,
                                  const std::string& bytes) {
  if (who.role != Role::kAgent && who.role != Role::kAdmin)
    return Status::PermissionDenied("only agents upload output");
  if (offset < 0) return Status::InvalidArgument("'offset' must not be negative");
  if (offset >= config_.limits.max_output_bytes) {
    return Status::ResourceExhausted("output of job '" + job + "' is over the limit of " +
                                     std::to_string(config_.limits.max_output_bytes) +
                                     " bytes (max_output)");
  }
  // The part below the limit is kept, ended by a note saying so where the limit has room for it
  // (as the agent's own cut); the next upload is refused.
  const int64_t max = config_.limits.max_output_bytes;
  const std::string note = OutputCutNote("tessera", max, "max_output");
  const int64_t room = max - static_cast<int64_t>(note.size());
  const bool cut = offset + static_cast<int64_t>(bytes.size()) > room;
  const size_t keep = static_cast<size_t>(
      std::clamp<int64_t>(room - offset, 0, static_cast<int64_t>(bytes.size())));
  {
    auto lock = port_->Lock();
    const Job* it = port_->Jobs().Find(job);
    if (it == nullptr) return Status::NotFound("no job '" + job + "'");
    // Only for a job on a node this agent speaks for.
    bool mine = who.role == Role::kAdmin;
    for (const std::string& n : NodesOf(*it)) mine = mine || who.MaySpeakFor(n);
    if (!mine) {
      lock.unlock();
      return SpeaksFor(who, it->node.empty() ? "(none)" : it->node, "upload output");
    }
  }
  int fd = ::open(JobOutputPath(data_dir_, job).c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW,
                  0640);  // read: what it repeats
  if (fd < 0) return Status::Internal("cannot open output of '" + job + "'");
  // Uploads come in order (docs/agent-protocol.md): one may start where the stored bytes end, or
  // repeat bytes already stored (an upload whose answer was lost); one past the end would leave
  // a hole of bytes the job never wrote, and is refused (409).
  struct stat st {};
  if (::fstat(fd, &st) != 0 || offset > static_cast<int64_t>(st.st_size)) {
    const int64_t have = static_cast<int64_t>(st.st_size);
    ::close(fd);
    return Status::FailedPrecondition("output of job '" + job + "' continues at byte " +
                                      std::to_string(have) + ", not " + std::to_string(offset));
  }
  // What it repeats must be what is stored: a "repeat" of other bytes rewrote stored output, also
  // of a job that had ended (an agent's forgery); only the bytes past the end are written.
  const size_t repeats =
      std::min(keep, static_cast<size_t>(static_cast<int64_t>(st.st_size) - offset));
  std::string stored(repeats, '\0');
  if (repeats > 0 && (::pread(fd, stored.data(), repeats, static_cast<off_t>(offset)) !=
                          static_cast<ssize_t>(repeats) ||
                      stored.compare(0, repeats, bytes, 0, repeats) != 0)) {
    ::close(fd);
    return Status::FailedPrecondition(
        "output of job '" + job + "': bytes " + std::to_string(offset) + " to " +
        std::to_string(offset + static_cast<int64_t>(repeats)) +
        " differ from those stored: stored output is never rewritten");
  }
  const ssize_t n = ::pwrite(fd, bytes.data() + repeats, keep - repeats,
                             static_cast<off_t>(offset + static_cast<int64_t>(repeats)));
  bool written = n == static_cast<ssize_t>(keep - repeats);
  if (written && cut && !note.empty()) {
    written = ::pwrite(fd, note.data(), note.size(), static_cast<off_t>(room)) ==
              static_cast<ssize_t>(note.size());
  }
  ::close(fd);
  if (!written) return Status::Internal("short write of output of '" + job + "'");
  return Status::Ok();
}

Result<uint64_t> AgentExecutor::WatchOrders(const Identity& who, const std::string& node,
                                            int64_t after, std::function<void(int64_t)> wake) {
  if (who.role != Role::kAgent && who.role != Role::kAdmin)
    return Status::PermissionDenied("only agents watch for orders");
  if (Status st = SpeaksFor(who, node, "watch for orders"); !st.ok()) return st;
  auto lock = port_->Lock();
  if (Status broken = port_->Broken(); !broken.ok()) return broken;
  if (nodes_.count(node) == 0) return Status::NotFound("node '" + node + "' is not registered");
  const int64_t news = port_->LastNews(node);
  return port_->Watches().Watch(node, after, std::move(wake), news,
                                [this] { return port_->Durable(); });
}

void AgentExecutor::UnwatchOrders(const std::string& node, uint64_t ticket) {
  port_->Watches().Unwatch(node, ticket);
}

void AgentExecutor::UnwatchAll() { port_->Watches().UnwatchAll(); }

}  // namespace tessera::api
