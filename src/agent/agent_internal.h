// Private to the node agent (agent.cc: the loop, the order watch and shutdown; agent_contact.cc:
// registration, heartbeats, orders and output uploads; agent_telemetry.cc: telemetry and swapping
// shares): the agent's state and its loop. One thread (and the order watch's).
#pragma once

#include <httplib.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "agent/agent.h"
#include "agent/agent_state.h"
#include "agent/device_health.h"
#include "agent/discovery.h"
#include "agent/launcher.h"
#include "agent/mps.h"
#include "agent/partitions.h"
#include "agent/protocol.h"
#include "agent/swap_manager.h"
#include "common/log.h"

namespace tessera::agent::internal {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// One line of the agent's log: to options.log when set, else to the structured log (stderr).
void Say(const AgentOptions& options, log::Level level, const std::string& line,
         log::Fields fields = {});

// The agent's state and its loop. One thread.
class Agent {
 public:
  Agent(const AgentOptions& options, Inventory inventory, std::vector<std::string> urls);

  int Run();

 private:
  void Info(const std::string& line, log::Fields fields = {}) const {
    Say(options_, log::Level::kInfo, line, fields);
  }
  void Warn(const std::string& line, log::Fields fields = {}) const {
    Say(options_, log::Level::kWarn, line, fields);
  }

  bool StopRequested() const;

  // Swapping shares: one manager per device keeps their resident memory within the device.
  void WatchSwap(const JobSpec& spec);

  void TickSwap();
  // The control plane's swap order for a job ("out", "in", "idle"; see HeartbeatReply::swap).
  void ApplySwapOrder(const std::string& job, const std::string& order);
  std::set<std::string> swap_ordered_;  // jobs the last heartbeat reply gave a swap order

  static int64_t NowMs() {
    return std::chrono::duration_cast<milliseconds>(Clock::now().time_since_epoch()).count();
  }

  void RecordExit(const JobExit& e);

  // A job's end, kept until acked: in finished_ and on disk (state_), before it is first reported.
  void KeepExit(const FinishedReport& f);

  // Loads what an earlier run of this agent kept on disk: the epoch and unacked exits.
  void LoadState();

  // Fencing: whether a reply carrying `epoch` (-1: none) comes from a leader older than one this
  // agent has heard from, and must be ignored (warned once per change). A higher epoch is
  // remembered, on disk too.
  bool Stale(int64_t epoch);

  // Output under a new leader (a failover): it may hold less of a job's output than the old one
  // did. ConfirmOutput asks it, for a job marked at the epoch's change, with an upload of nothing
  // at the offset the old one held; Rewind takes a 409's 'continues at byte K' below what this
  // agent counted as held and sends the rest again from K (whether it did). OutputHeld: that K
  // (-1: none named). ConfirmOutput returns false when no server answered.
  bool ConfirmOutput(const std::string& id, int64_t* offset);
  bool Rewind(const std::string& id, const std::string& body, int64_t* offset);
  static int64_t OutputHeld(const std::string& body);

  // A server from before `stopped_by` refuses an exit that carries it (400, unknown field):
  // StoppedByRefused says whether `body` is that refusal (warned once; from then on
  // TakeStoppedByOff leaves the field out of what is sent).
  bool StoppedByRefused(const std::string& body);
  void TakeStoppedByOff(std::vector<FinishedReport>* finished) const;

  // A successful reply (registration or heartbeat) from the control plane.
  void Reached();

  // Partition self-stop: with partition_stop_ms_ set, no successful reply for that long stops
  // every job (SIGTERM, SIGKILL after stop_grace_ms); their exits are reported once reached.
  void CheckPartition();

  // The order watch: a long poll (GET /v1/agent/orders) on a connection of its own, answered as
  // soon as the control plane has new orders for this node, so that the main loop heartbeats at
  // once instead of at the end of its period (a start or a stop reaches the node in milliseconds;
  // heartbeats stay at their period for liveness). Watches only once a heartbeat reply gave the
  // node's order sequence (seen_seq_ >= 0); a control plane without watches is polled as before.
  void WatchLoop();

  void StopWatching();

  // Sleeps `d`, or less when the agent stops.
  void Pause(milliseconds d);

  static std::string Encoded(const std::string& s);

  // One exchange with the control plane: register if needed, heartbeat, then upload output for
  // at most half a heartbeat period, so that output, however fast a job prints, never delays the
  // next heartbeat (the rest goes next time; a finished report waits for its job's bytes).
  bool Contact();

  bool Register();

  // A client for the current server URL.
  void Connect();

  // The server did not answer, or is a standby: the next attempt goes to the next URL given.
  void Failover();

  // Logs a failure once per outage (not on every retry).
  bool Failed(const std::string& what);

  // Uploads the new bytes of every running or unacked job until `deadline`, finished jobs first
  // (their reports wait for them), then the job least uploaded. False when the control plane
  // failed.
  bool UploadOutputs(Clock::time_point deadline);

  bool UploadOutput(const std::string& id, Clock::time_point deadline);

  bool Heartbeat();

  void Apply(const HeartbeatReply& reply);

  void Shutdown();

  // Activity since the last heartbeat: a job whose processes used CPU time is active (the
  // stand-in for GPU activity until per-process NVML sampling is wired; see docs/telemetry.md).
  // On a simulated node the devices' utilization is synthesized from the same figures: the CPU
  // share of the jobs on each device (capped at 100%), and their charged share memory.
  std::vector<DeviceTelemetry> Telemetry(std::vector<RunningJob>& running);

  // Device health (NVML devices only): reads XID events and ECC counters into inventory_'s
  // devices (logging each change), and adds each device's health to `devices` (an entry for a
  // device without telemetry is added).
  void CheckHealth(std::vector<DeviceTelemetry>* devices);

  // The session (the job's process tree: each job is a session leader) of `pid`; 0 when gone.
  static pid_t SessionOf(int pid);

  const AgentOptions& options_;
  std::unique_ptr<NvmlSampler> nvml_;     // real NVIDIA devices: their telemetry
  std::unique_ptr<HealthSource> health_;  // real devices' health (NVML or AMD SMI)
  Clock::time_point last_telemetry_{};
  std::map<std::string, uint64_t> cpu_ticks_;  // each running job's CPU time at the last heartbeat
  std::map<std::string, int64_t> launches_;    // each share's kernel launches at the last heartbeat
  Inventory inventory_;
  Partitions partitions_{inventory_, options_.nvml_library, options_.amdsmi_library};
  Launcher launcher_;
  std::map<int, std::unique_ptr<SwapManager>> swap_;  // device index -> its swapping shares
  std::unique_ptr<MpsDaemons> mps_;  // sm-sharing shares' MPS daemons; null: no control program
  int64_t last_swap_tick_ms_ = 0;
  std::vector<std::string> urls_;  // the control plane's servers; one leads
  size_t current_ = 0;             // written by the main thread under watch_mu_
  // The order watch (WatchLoop, its own thread and connection).
  static constexpr int64_t kWatchMs = 25000;
  std::mutex watch_mu_;
  std::unique_ptr<httplib::Client> watch_client_;
  std::atomic<int64_t> seen_seq_{-1};  // the node's order sequence the agent knows; -1: none yet
  std::atomic<bool> wake_{false};      // new orders: heartbeat now
  std::atomic<bool> watch_stop_{false};
  std::atomic<bool> watch_done_{false};  // WatchLoop has returned
  std::unique_ptr<httplib::Client> client_;
  int64_t heartbeat_ms_;
  int64_t backoff_ms_;
  bool registered_ = false;
  bool refused_ = false;  // the control plane refused this agent's protocol version: exit 1
  bool down_ = false;
  Clock::time_point readings_refused_{};  // when a heartbeat refused for a reading was last said
  bool stopping_ = false;
  std::map<std::string, FinishedReport> finished_;    // ended, not yet acked
  std::map<std::string, int64_t> uploaded_;           // output bytes the control plane holds
  std::set<std::string> given_up_;                    // output uploads refused for good
  std::set<std::string> recheck_;                     // a new leader may lack (ConfirmOutput)
  AgentState state_;                                  // on disk: exits until acked, the epoch
  int64_t epoch_ = -1;                                // the highest leader epoch seen; -1: none
  std::pair<int64_t, int64_t> stale_warned_{-1, -1};  // (stale epoch, epoch_) last warned about
  int64_t partition_stop_ms_ = 0;                     // from the register reply; 0: off
  Clock::time_point last_ok_{};                       // the last successful reply
  bool reached_ = false;                              // a successful reply since this agent started
  bool cut_off_ = false;              // jobs stopped for a partition, not reached since
  bool finished_in_register_ = true;  // false: this server refused `finished` in a registration
  bool stopped_by_taken_ = true;      // false: this server refused `stopped_by` (before the field)
  std::set<std::string> partition_stopped_;  // stopped by CheckPartition, exit not yet recorded
  std::set<std::string> shutdown_stopped_;   // stopped by Shutdown, exit not yet recorded
};

}  // namespace tessera::agent::internal
