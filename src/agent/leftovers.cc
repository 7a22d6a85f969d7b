// The launcher's list of the jobs it runs (<work_dir>/.running), and what a launcher does with
// the list an earlier one left: the jobs of an agent that died are stopped (docs/agent.md).
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "agent/host_files.h"
#include "agent/launcher.h"
#include "capgpu/region.h"

namespace tessera::agent {

using internal::BootId;
using internal::KillCgroup;
using internal::ReadSmallFile;

namespace {

// Whether the process `pid` that started at `start` still runs: not gone, not a zombie (dead,
// not yet reaped), and not another process that has taken the pid since.
bool StillRuns(int32_t pid, uint64_t start) {
  char state = 0;
  uint64_t now_start = 0;
  return capgpu::ReadProcessStat(pid, &state, &now_start) && now_start == start && state != 'Z' &&
         state != 'X';
}

// Waits, at most `bound`, until none of `killed` (pid, start time) runs. A SIGKILL is only sent
// by kill(): the process dies when it next runs, after its memory is torn down.
void WaitUntilDead(const std::vector<std::pair<int32_t, uint64_t>>& killed,
                   std::chrono::milliseconds bound) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  for (const auto& [pid, start] : killed) {
    while (StillRuns(pid, start) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
}

}  // namespace

std::string Launcher::RunningListPath() const { return options_.work_dir + "/.running"; }

// "boot <boot id>", "regions <region_dir()>" (the launcher's private directory, whose name no
// one can guess), then one line per job: id, pid, the pid's start time (so that a reused pid is
// never taken for the job's). Written whole and renamed over, so that a crash leaves the old
// list or the new one.
void Launcher::WriteRunningList() const {
  if (!owns_list_) return;
  std::string text = "boot " + BootId() + "\n";
  if (!regions_.empty()) text += "regions " + regions_ + "\n";
  for (const auto& [id, job] : jobs_) {
    char state = 0;
    uint64_t start = 0;
    if (!capgpu::ReadProcessStat(job.pid, &state, &start)) continue;
    text += id + " " + std::to_string(job.pid) + " " + std::to_string(start) + "\n";
  }
  const std::string path = RunningListPath(), tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out) return;
  }
  rename(tmp.c_str(), path.c_str());
}

// Jobs an earlier run of this agent (same work directory) started and never saw end: the agent
// died (a crash, SIGKILL, an out-of-memory kill) and its jobs, in their own sessions and
// cgroups, outlived it. The control plane has ended them and may give their devices to new
// work, so they are stopped, their cgroups removed, and the earlier launcher's region directory
// with their share regions. It returns once the killed processes have died (within a bound), so
// that a job the agent starts next on the same device never runs beside one of them.
void Launcher::StopLeftovers() {
  bool ok = false;
  std::istringstream in(ReadSmallFile(RunningListPath(), &ok));
  if (!ok) return;
  std::string line;
  // Written before a reboot (or by an older agent, without the line): its processes are gone,
  // and its pids and start times may now be other processes'.
  if (!std::getline(in, line) || line != "boot " + BootId()) {
    WriteRunningList();
    return;
  }
  std::string old_regions;
  std::vector<std::pair<int32_t, uint64_t>> killed;
  while (std::getline(in, line)) {
    if (line.rfind("regions ", 0) == 0) {
      old_regions = line.substr(8);
      continue;
    }
    std::istringstream fields(line);
    std::string id;
    long pid = 0;
    uint64_t start = 0;
    if (!(fields >> id >> pid >> start) || !ValidateJobId(id).ok() || pid <= 1) continue;
    char state = 0;
    uint64_t now_start = 0;
    if (capgpu::ReadProcessStat(static_cast<int32_t>(pid), &state, &now_start) &&
        now_start == start) {
      kill(static_cast<pid_t>(-pid), SIGKILL);  // its process group (the job is a session leader)
      kill(static_cast<pid_t>(pid), SIGKILL);
      killed.emplace_back(static_cast<int32_t>(pid), start);
    }
    if (cgroups_available_) {
      const std::string dir = cgroup_parent_dir_ + "/" + id;
      KillCgroup(options_.cgroup_root, dir);
      if (rmdir(dir.c_str()) != 0 && errno != ENOENT) stale_cgroups_.push_back(dir);
    }
    leftovers_.push_back(id);
  }
  WaitUntilDead(killed, std::chrono::seconds(10));
  // Only a directory such as a launcher makes (the name, a real directory of this account's):
  // a list written by an older agent, with regions under shared names, removes nothing there.
  const size_t slash = old_regions.rfind('/');
  if (slash != std::string::npos && old_regions != regions_ &&
      internal::IsPrivateDirName(old_regions.substr(slash + 1), kRegionDirPrefix)) {
    internal::RemovePrivateDir(old_regions);
  }
  WriteRunningList();
}

}  // namespace tessera::agent
