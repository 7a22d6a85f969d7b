// Liveness: nodes silent for the heartbeat timeout are lost (unless the leader itself stalled),
// starts never confirmed are given up, and the jobs held where they no longer run are requeued,
// stopped or lost. Called from the periodic pass (Tick) and the agents' requests.
#include <algorithm>

#include "api/agent_executor.h"
#include "model/agent_protocol.h"

namespace tessera::api {

void AgentExecutor::SetMonotonicClockForTest(SilenceWatch::Clock monotonic) {
  auto lock = port_->Lock();
  silence_.SetClock(std::move(monotonic));
  const int64_t mono = silence_.Now();
  for (auto& [name, n] : nodes_) n.heard_mono_ms = mono;  // times of the other clock mean nothing
  port_->Jobs().ForEach([&](const Job& j) {
    if (j.agent.starting_since_mono != 0) port_->AgentSideOf(j).starting_since_mono = mono;
  });
}

// Silence is measured on the monotonic clock: the wall clock steps (NTP, a VM resumed, an
// administrator), and a step forward longer than the release time would make every live node look
// silent and release its running jobs. The wall clock only names times (events, views).
void AgentExecutor::MarkLostLocked(Batch& b) {
  const int64_t mono = silence_.Now();
  if (const int64_t gap = silence_.Pass(mono, config_.heartbeat_timeout_ms / 2); gap > 0) {
    // The leader was not watching (stopped, starved of CPU, or waiting on its store): the nodes'
    // silence meanwhile may be its own deafness. Each gets a whole window from now.
    b.Add(EventAt(port_->NowMs(), "engine", "leader.stalled", "cluster",
                  "no pass for " + std::to_string(gap) +
                      " ms: every node gets a fresh heartbeat window",
                  {{"gap_ms", gap}}),
          nullptr);
    return;
  }
  for (auto& [name, n] : nodes_) {
    const int64_t silent = silence_.SilentFor(n.heard_mono_ms, mono);
    if (!n.lost && silent >= config_.heartbeat_timeout_ms) {
      n.lost = true;
      port_->SetNodeDown(name, true);  // nothing new goes there
      b.Add(EventAt(port_->NowMs(), "engine", "node.lost", name,
                    "no heartbeat for " + std::to_string((mono - n.heard_mono_ms) / 1000) + "s"),
            nullptr);
      port_->WantCycle();
    }
    // Its jobs: at once; or, with partition_stop, once its agent has stopped them itself if it
    // is only cut off (it may still run them until then).
    if (!n.lost || n.jobs_released) continue;
    if (config_.partition_stop_ms > 0 && silent < config_.PartitionReleaseMs()) continue;
    n.jobs_released = true;
    const std::vector<std::string> held =
        port_->Jobs().OnNode(name);  // a copy: the walk changes jobs
    for (const std::string& id : held)
      LoseJobLocked(port_->Jobs().Get(id), name, "node '" + name + "' lost", b);
    port_->WantCycle();
  }
}

void AgentExecutor::ExpireStartsLocked(Batch& b) {
  const int64_t mono = silence_.Now();  // as silence: a step of the wall clock expires nothing
  const int64_t bound = kStartTimeouts * config_.heartbeat_timeout_ms;
  std::vector<const Job*> expired;
  for (const std::string& id : port_->Jobs().LiveIds()) {
    const Job& j = port_->Jobs().Get(id);
    if (j.state != JobState::kStarting || j.agent.starting_since_mono == 0 ||
        mono - j.agent.starting_since_mono < bound)
      continue;
    if (NodesOf(j).size() != 1 || !j.ext.backend.empty()) continue;
    auto n = nodes_.find(j.node);
    // A silent node is judged by its heartbeats (MarkLostLocked), not here.
    if (n == nodes_.end() || n->second.lost ||
        n->second.heard_mono_ms <= j.agent.starting_since_mono)
      continue;
    expired.push_back(&j);
  }
  for (const Job* jp : expired) {
    const Job& j = *jp;
    LoseJobLocked(j, j.node,
                  "its start on node '" + j.node + "' was not confirmed within " +
                      std::to_string(bound / 1000) + "s",
                  b);
    port_->WantCycle();
  }
}

void AgentExecutor::FinishReportedLocked(const Job& j, const std::string& node, const Json& f,
                                         Batch& b) {
  // Cut off from every server for partition_stop, the agent stopped the job itself, and reached
  // the leader again before it released the node's jobs (MarkLostLocked): the job did not end,
  // it was lost on the node; requeued (or lost) as its queue says, not failed for the signal.
  // Cancelled, preempted or stopped by a guard meanwhile, the stop is the one ordered.
  const std::string by = f.value("stopped_by", "");
  if (by == kStoppedByPartition && !j.cancel_requested && !j.guard_stopped &&
      j.state != JobState::kPreempting) {
    LoseJobLocked(j, node,
                  "its agent on node '" + node +
                      "' stopped it, cut off from the control plane for partition_stop",
                  b);
    port_->WantCycle();
    return;
  }
  const bool failed = f.value("exit_code", -1) != 0 || f.value("signal", 0) != 0;
  if (j.state == JobState::kPlaced && j.agent.stale_on.count(node) && failed) {
    // The exit of an earlier placement's process here (stopped as absent from may_run), not this
    // placement's end: acknowledged, and the new start goes out now that the old one is gone.
    // (One that succeeded did the job's work: the job ends succeeded, it does not run again.)
    port_->AgentSideOf(j).stale_on.erase(node);
    return;
  }
  std::optional<int64_t> run_ms;  // checked by CheckHeartbeatJobs: 0 to INT64_MAX
  if (f.contains("run_ms")) run_ms = f["run_ms"].get<int64_t>();
  // Stopped as its agent was stopped (an upgrade, a reboot, Ctrl-C on `tessera up`): it ends as
  // it ended, never run again from scratch, and its reason says why (not a bare signal).
  FinishPartLocked(j, node, f.value("exit_code", -1), f.value("signal", 0), b, run_ms,
                   by == kStoppedByShutdown);
}

void AgentExecutor::LoseJobLocked(const Job& j, const std::string& node, const std::string& why,
                                  Batch& b) {
  const QueueRoute* route = config_.FindRoute(j.rec.queue);
  if (j.state == JobState::kStarting || j.state == JobState::kRunning ||
      j.state == JobState::kPreempting) {
    port_->AgentSideOf(j).stale_on.insert(node);  // its process there may outlive this decision
  }
  b.Touch({node});
  if (j.state == JobState::kPreempting && !j.cancel_requested) {
    port_->Stopped(j, b);
  } else if (route && route->requeue_on_loss && !j.cancel_requested) {
    port_->Requeue(j, "requeued: " + why, b);
  } else if (port_->End(j, JobState::kLost, JobCause::kLost, why)) {
    b.Add(EventAt(port_->NowMs(), "engine", "job.lost", j.rec.id, why), &j);
  }
}

}  // namespace tessera::api
