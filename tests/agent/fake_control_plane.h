// What the agent loop's tests share between their fake control planes (agent_loop_test.cc: the
// protocol checker; agent_faults_test.cc: the faulty one): the token, the record of what the
// agent reported, and the options of an agent run against one.
// Thread-safety: AgentReports' accessors take its mutex; its handlers hold it while they record.
#pragma once

#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "agent/agent.h"

namespace tessera::agent::testing {

inline constexpr const char* kToken = "agent-token";

// What an agent reported to a fake control plane, written by the fake's request handlers under
// mu_. The accessors copy under the lock.
class AgentReports {
 public:
  // Acks a job's finished report from its n-th repetition on (1: the first).
  void AckAfter(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    ack_after_ = n;
  }
  int Heartbeats() {
    std::lock_guard<std::mutex> lock(mu_);
    return heartbeats_;
  }
  // The pid the agent reports for the running job `id` (0: not running).
  int Pid(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    return running_.count(id) != 0 ? running_[id] : 0;
  }
  bool Acked(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    return acked_.count(id) != 0;
  }
  nlohmann::json Finished(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    return finished_.count(id) != 0 ? finished_[id] : nlohmann::json();
  }
  int FinishedReports(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    return finished_reports_[id];
  }
  std::vector<nlohmann::json> Registrations() {
    std::lock_guard<std::mutex> lock(mu_);
    return registrations_;
  }
  std::vector<std::string> Violations() {
    std::lock_guard<std::mutex> lock(mu_);
    return violations_;
  }

 protected:
  std::mutex mu_;
  int ack_after_ = 1;
  int heartbeats_ = 0;
  std::vector<nlohmann::json> registrations_;
  std::map<std::string, int> running_;  // job -> pid
  std::map<std::string, nlohmann::json> finished_;
  std::map<std::string, int> finished_reports_;
  std::set<std::string> acked_;
  std::vector<std::string> violations_;
};

// The options of an agent `node` of these tests on the control plane `url`, its work under
// `dir`: quick polls, heartbeats and backoff, a 300 ms stop grace, no cgroups, no signal
// handling. The caller adds its inventory, request timeout, stop flag and log.
inline AgentOptions TestAgentOptions(const std::string& url, const std::string& dir,
                                     const std::string& node) {
  AgentOptions o;
  o.control_plane_url = url;
  o.token = kToken;
  o.node_name = node;
  o.work_dir = dir + "/jobs";
  o.cgroup_root = "";
  o.region_dir = dir;
  o.poll_ms = 10;
  o.default_heartbeat_ms = 50;
  o.max_backoff_ms = 200;
  o.stop_grace_ms = 300;
  o.handle_signals = false;
  return o;
}

}  // namespace tessera::agent::testing
