// Launcher: runs jobs as real processes with their allocation bound in, and stops them.
//
// Each job is one process started with fork/exec in a session (and process group) of its own,
// so a cancel reaches everything the job started in that group. What the process gets:
//   * CUDA_VISIBLE_DEVICES: the granted device UUIDs, or the MIG instance UUIDs where a grant is
//     a MIG slice, comma separated ("" when the job holds no GPU, so it sees none);
//   * TESSERA_JOB_ID;
//   * when a GPU memory limit is set (a share): TESSERA_GPU_MEMORY_LIMIT (bytes) and
//     TESSERA_CAPGPU_REGION (the share's region file, which the launcher creates from the limit
//     and gives to the job's account, in a directory of its own: region_dir()), and LD_PRELOAD
//     of the cap library when its path is configured and exists;
//   * the job's own environment on top of the agent's (job variables win, but never over the
//     binding variables above);
//   * CPU and memory limits through a cgroup v2 child per job (cpu.max, memory.max) when the
//     host allows it; otherwise cgroups_status() says why and jobs run without them.
// stdout and stderr go to one file per job, `<work_dir>/<job>.out` (truncated at start), cut at
// max_output_bytes while the job runs (Poll).
//
// Reaping is explicit: Poll() calls waitpid(WNOHANG) for each job and escalates cancels past
// their grace to SIGKILL. No SIGCHLD handler is installed, so there are no signal races; the
// owner calls Poll() from its loop. When a job's main process exits, whatever is left in its
// process group is killed, so a finished job leaves nothing behind.
//
// Thread-safety: not thread-safe; one owner thread (the agent loop). Start() forks, so it is safe
// in a multi-threaded process: the child only calls async-signal-safe functions before exec.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/resources.h"

namespace tessera::agent {

// One granted device. `mig` is the MIG instance UUID ("MIG-...") when the grant is a slice.
struct DeviceBinding {
  int index = 0;
  std::string uuid;
  std::string mig;
  std::string
      slot;  // a partition to make first ("1g.10gb@6", "CPX#2"); the agent fills `mig` from it
  std::string mode;  // AMD: the device's pair for that partition ("CPX+NPS1")
  int amd_index =
      -1;  // AMD: the partition's logical GPU index (ROCR_VISIBLE_DEVICES), filled by the agent
};

// What to run and what it holds (one `start` entry of the heartbeat reply).
struct JobSpec {
  std::string id;  // REQUIRES: 1-128 chars of [A-Za-z0-9._-], not starting with '.'
  std::vector<std::string> command;  // REQUIRES: non-empty; argv[0] is looked up in PATH
  std::map<std::string, std::string> env;
  MilliCpu cpu_milli = 0;  // 0: no CPU limit
  MiB memory_mib = 0;      // 0: no memory limit
  std::vector<DeviceBinding> devices;
  int64_t gpu_memory_limit_bytes = 0;  // 0: no cap (whole device or hardware slice)
  // The share's memory may be swapped out while idle (src/capgpu/swap.h): its region is created
  // with swapping on, with the launcher's swap_ram and swap_dir.
  bool swap = false;
  // Compute mode sm-sharing (issue 38; the order's "compute": {"mode": "sm-sharing", "percent":
  // P}): the share runs as an MPS client at this active-thread percentage; the agent starts its
  // device's MPS control daemon and puts the client's variables in `env` before Start. 0:
  // time-slicing.
  int sm_percent = 0;
  // The Unix account the job runs under (its uid, primary gid and supplementary groups; HOME,
  // USER, LOGNAME set): "" runs it as the agent's own account. An account this node does not
  // have, or one a non-root agent cannot switch to, refuses the start with the reason.
  std::string run_as;
};

struct LauncherOptions {
  std::string work_dir;  // output files go here; created if missing. REQUIRES: non-empty
  // cgroup v2 mount. Empty disables cgroups. Jobs go to <cgroup_root>/<cgroup_parent>/<job>.
  std::string cgroup_root = "/sys/fs/cgroup";
  std::string cgroup_parent = "tessera";
  std::string capgpu_preload;  // path of libtessera_capgpu.so; "" = none
  // Where share regions live: each launcher makes a directory of its own in it (region_dir()).
  std::string region_dir = "/dev/shm";
  bool inherit_environment = true;  // start from the agent's environment
  // Swapping shares: host RAM each share's swapped-out bytes may take (0: unlimited), and the
  // directory of the disk tier ("" = none).
  int64_t swap_ram_bytes = 0;
  std::string swap_dir;
  // The most bytes of a job's output kept on the node (0: no limit). Past it the file is cut to
  // its first bytes and a note saying so, whatever the job goes on printing.
  int64_t max_output_bytes = 0;
};

// How a job ended.
struct JobExit {
  std::string id;
  int exit_code = 0;  // the exit status when it exited; 128+signal when killed (shell style)
  int signal = 0;     // the terminating signal, 0 when it exited
  int64_t output_bytes = 0;
  bool cancelled = false;   // it was stopped by Cancel()
  bool output_cut = false;  // its output went past max_output_bytes: the rest was dropped
  int64_t run_ms = -1;      // from its start to when Poll found it ended (steady clock)
};

struct RunningJob {
  std::string id;
  pid_t pid = 0;
  // With Running(true): CPU time so far of every process in the job's session (clock ticks,
  // children reaped included), and the device memory its share region has charged (-1: no
  // region, e.g. a whole card or a hardware partition).
  uint64_t cpu_ticks = 0;
  int64_t gpu_memory_used_bytes = -1;
  int64_t gpu_launches = -1;  // kernel launches its share region counted (-1: no region)
  // A swapping share: its state (capgpu::ShareSwapState; "" when not swapping) and the bytes
  // it has off the device.
  std::string swap_state;
  int64_t swapped_bytes = 0;
  // The control plane gave it a swap order (agent protocol "swap"): its heartbeat entry says
  // "swapped" (a server that gives no orders may not know the field).
  bool swap_ordered = false;
  std::vector<int> devices;  // device indices it was started on
  int active = -1;           // filled by the agent for its heartbeat: 1 active, 0 not, -1 unknown
};

// CPU time (utime + stime + cutime + cstime, in clock ticks) of the processes of each session,
// from /proc/*/stat: a job is a session leader, so its session is its whole process tree.
std::map<pid_t, uint64_t> CpuTicksBySession(const std::string& proc = "/proc");

// The environment a job gets, as "K=V" strings, sorted by name. `base` is the inherited
// environment (may be empty). Pure; the launcher's binding rules in one place for tests.
std::vector<std::string> BuildJobEnvironment(const JobSpec& spec,
                                             const std::vector<std::string>& base,
                                             const LauncherOptions& options);

// cpu.max text for milli-CPUs with a 100 ms period ("max 100000" when 0).
std::string CgroupCpuMax(MilliCpu cpu_milli);
// memory.max text ("max" when 0).
std::string CgroupMemoryMax(MiB memory_mib);

// Checks that `id` may name files and cgroups.
Status ValidateJobId(const std::string& id);

// A launcher's region directory is `<region_dir>/<this><32 hex digits>`.
inline constexpr const char* kRegionDirPrefix = "tessera-";

class Launcher {
 public:
  // Probes cgroups (see cgroups_status()). Creates work_dir.
  explicit Launcher(LauncherOptions options);
  // Kills and reaps every job still running (SIGKILL), removes their cgroups. The jobs it runs
  // are listed in <work_dir>/.running, so that a launcher after a crash stops what they left.
  ~Launcher();
  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;

  // Starts a job. Errors: an invalid spec, a job with this id already running, fork or file
  // failures. A command that cannot be executed still starts: it exits with 127 and the reason
  // in its output (like a shell), so the failure reaches the user through the normal path.
  Status Start(const JobSpec& spec);

  // Sends SIGTERM to the job's process group; SIGKILL follows from Poll() once `grace` has
  // passed. A second Cancel sends nothing more and keeps the earlier deadline (a grace of 0
  // kills at once). kNotFound when not running. Cancelling() says whether it was cancelled.
  Status Cancel(const std::string& id, std::chrono::milliseconds grace);
  bool Cancelling(const std::string& id) const {
    auto it = jobs_.find(id);
    return it != jobs_.end() && it->second.cancelled;
  }

  // Reaps exited jobs (waitpid WNOHANG) and escalates expired cancels; cuts output files past
  // max_output_bytes. Returns the jobs that ended since the last call.
  std::vector<JobExit> Poll();

  // Cuts the output files of running jobs past max_output_bytes (Poll does too): one fstat per
  // job, for an owner that is busy elsewhere between polls (uploading).
  void CapOutputs();

  // Blocks until every job has ended or `timeout` passes, polling; returns what ended.
  std::vector<JobExit> WaitAll(std::chrono::milliseconds timeout);

  bool IsRunning(const std::string& id) const;
  // With `usage`: each job's CPU time and charged device memory too (one /proc scan).
  std::vector<RunningJob> Running(bool usage = false) const;
  // `<work_dir>/<id>.out`, whether or not the job exists.
  std::string OutputPath(const std::string& id) const;
  // The directory of this launcher's share regions, `<region_dir>/tessera-<32 hex digits>`.
  const std::string& region_dir() const { return regions_; }
  // `<region_dir()>/tessera-capgpu-<id>`, whether or not the job exists.
  std::string RegionPath(const std::string& id) const;
  // The region of a running share and the account it belongs to; false when there is none.
  bool ShareRegion(const std::string& id, std::string* path, uid_t* owner) const;
  // How many bytes of the job's output file may be uploaded now: all (INT64_MAX) without
  // max_output_bytes; while the job runs, those before where a cut's note would go (they do not
  // change); once it ended (or for a job never run here), max_output_bytes.
  int64_t UploadableBytes(const std::string& id) const;

  bool cgroups_available() const { return cgroups_available_; }
  // Jobs an earlier launcher on this work directory left running (its agent died), stopped at
  // construction: their processes, cgroups and share regions.
  const std::vector<std::string>& leftovers() const { return leftovers_; }
  // False when another launcher (another agent) holds this work directory: its jobs are not
  // listed, and nothing is stopped as left over.
  bool owns_work_dir() const { return owns_list_; }
  // "cgroups v2: <dir>" or "cgroups: unavailable (<why>)".
  const std::string& cgroups_status() const { return cgroups_status_; }

 private:
  struct Job {
    JobSpec spec;
    pid_t pid = 0;
    std::string cgroup_dir;  // "" when not in a cgroup
    std::string region_path;
    uid_t region_owner = 0;  // the account the region belongs to
    int out_fd = -1;         // the agent's own descriptor of the output file
    bool output_cut = false;
    bool cancelled = false;
    bool kill_sent = false;
    std::chrono::steady_clock::time_point kill_at;
    std::chrono::steady_clock::time_point started;
  };
  void ProbeCgroups();
  Status PrepareCgroup(const JobSpec& spec, std::string* dir, int* procs_fd);
  // The job's cgroup (when available) and its share region (when capped), which belongs to
  // `owner` and `group` (uid_t(-1): the agent's account).
  Status PrepareLimits(const JobSpec& spec, Job* job, int* procs_fd, uid_t owner, gid_t group);
  void Cleanup(Job& job);
  void CapOutput(Job& job);
  std::string RunningListPath() const;
  void WriteRunningList() const;
  void StopLeftovers();

  LauncherOptions options_;
  bool cgroups_available_ = false;
  std::string cgroups_status_;
  std::string cgroup_parent_dir_;
  std::map<std::string, Job> jobs_;
  std::vector<std::string> stale_cgroups_;  // busy at cleanup, retried on Poll()
  std::vector<std::string> leftovers_;
  std::string regions_;        // region_dir(); "" when it could not be made
  std::string regions_error_;  // why not
  int regions_lock_fd_ = -1;   // regions_, flock'ed while this launcher lives
  std::string cut_note_;       // ends a cut output file
  int lock_fd_ = -1;           // <work_dir>/.lock, held (flock) while this launcher owns the list
  bool owns_list_ = false;
};

}  // namespace tessera::agent
