// The node agent: registers this host with the control plane, heartbeats, and runs what it is
// told (docs/agent-protocol.md; behaviour in docs/agent.md).
//
// RunAgent() is the whole agent as one blocking call, for `tessera agent`:
//   1. discovers the inventory (simulated when `simulate` is set, else NVML, else AMD SMI, else
//      none);
//   2. registers, retrying with backoff until the control plane answers;
//   3. loops: reaps finished jobs (waitpid WNOHANG), and every heartbeat interval uploads new
//      output bytes (PUT .../output?offset=N), sends a heartbeat with running and finished jobs,
//      and applies the reply: start, cancel (SIGTERM, SIGKILL after grace), stop jobs absent
//      from may_run and start, forget finished jobs once acked;
//   4. on stop (the flag, SIGINT or SIGTERM): stops its jobs (SIGTERM, SIGKILL after
//      stop_grace_ms), reports them once more, and returns.
// While the control plane is unreachable the agent keeps its jobs running and retries with
// exponential backoff (heartbeat interval doubling up to max_backoff_ms). A finished job is
// reported only once all its output has been uploaded, and on every heartbeat until acked.
// A heartbeat answered 404 (the node is unknown: the control plane lost or dropped it) makes the
// agent register again.
// Under faults (docs/agent-protocol.md, "Faults"): each job's exit is written to
// <work_dir>/exits/ before it is first reported and deleted once acked, so a restarted agent
// reports it (in its registration and heartbeats) and the job does not run twice; replies of a
// leader epoch lower than the highest seen (kept in <work_dir>/epoch) are ignored; and with the
// register reply's partition_stop_ms, an agent without a successful reply for that long stops its
// jobs itself and reports their exits once it reaches the control plane again.
//
// Thread-safety: RunAgent runs on the calling thread; `stop` may be set from any thread. With
// handle_signals, it installs SIGINT/SIGTERM handlers for its duration and restores the previous
// ones on return; do not run two agents with handle_signals in one process.
#pragma once

#include <atomic>
#include <functional>
#include <string>

#include "net/client_tls.h"

namespace tessera::agent {

struct AgentOptions {
  std::string control_plane_url =
      "http://127.0.0.1:8080";  // http(s)://host:port, or several, comma-separated
  std::string token;            // bearer token of an identity with role agent (or admin)
  net::ClientTls tls;           // for https:// control planes
  std::string node_name;        // "" = this host's name
  std::string pool;             // the scheduling pool the node joins; "" = "default"
  std::string simulate;         // simulated inventory, e.g. "2xH100-80GB"; "" = discover with NVML
  std::string nvml_library = "libnvidia-ml.so.1";
  // AMD SMI, loaded where NVML finds no device.
  std::string amdsmi_library = "libamd_smi.so";
  std::string work_dir = "tessera-agent";      // job output files (<work_dir>/<job>.out)
  std::string cgroup_root = "/sys/fs/cgroup";  // "" disables cgroups
  std::string cgroup_parent = "tessera";       // jobs go to <cgroup_root>/<cgroup_parent>/<job>
  std::string capgpu_preload;                  // path of libtessera_capgpu.so for shares; "" = none
  std::string region_dir = "/dev/shm";         // share region files
  // The MPS control program for sm-sharing shares (agent/mps.h), PATH searched; its daemons'
  // pipes and logs under <work_dir>/mps. "" or not found: the agent offers no MPS.
  std::string mps_control = "nvidia-cuda-mps-control";
  // Swapping shares (queues with swap: true): host RAM per share for swapped-out bytes (0:
  // unlimited), the disk tier's directory ("" = none), and how long a share must be idle before
  // it may be swapped out to make room for another (src/agent/swap_manager.h).
  int64_t swap_ram_bytes = 0;
  std::string swap_dir;
  int64_t swap_disk_bytes = 0;  // what the node offers under swap_dir, reported as capacity
  int swap_idle_ms = 30000;
  int swap_slice_ms =
      0;             // slicing: active shares past this may be swapped out for one in need (0: off)
  int poll_ms = 50;  // how often finished processes are reaped
  int default_heartbeat_ms = 1000;          // until the register reply says otherwise
  int max_backoff_ms = 10000;               // retry ceiling while the control plane is down
  int request_timeout_ms = 5000;            // per HTTP request
  int stop_grace_ms = 5000;                 // grace for jobs stopped by may_run and on agent exit
  int64_t upload_chunk_bytes = 512 * 1024;  // output bytes per PUT (the API caps bodies at 1 MiB)
  // The most output kept and uploaded per job (0: no limit); the server's max_output by default.
  int64_t max_output_bytes = int64_t{64} << 20;
  std::atomic<bool>* stop = nullptr;  // set to true to stop; may be null
  bool handle_signals = true;         // SIGINT/SIGTERM stop the agent
  // One line per event; default: the structured log (common/log.h, component "agent") on stderr.
  std::function<void(const std::string&)> log;
};

// Runs the agent until stopped. Returns 0 after a clean stop, 2 for bad options (an invalid
// simulated inventory, a malformed URL), 1 when discovery fails otherwise.
int RunAgent(const AgentOptions& options);

}  // namespace tessera::agent
