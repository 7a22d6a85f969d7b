// The launcher's limits: cgroups v2 (probing, a job's cgroup, cpu.max and memory.max) and the
// memory-cap regions of shares.
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <limits>

#include "agent/host_files.h"
#include "agent/launcher.h"
#include "agent/launcher_internal.h"
#include "capgpu/region.h"

namespace tessera::agent {
namespace {

using internal::HasWord;
using internal::ReadSmallFile;
using internal::WriteControl;

constexpr int64_t kCpuPeriodUs = 100000;

}  // namespace

namespace internal {

Status CreateShareRegion(const std::string& path, int64_t limit_bytes, bool swap,
                         int64_t swap_ram_bytes, const std::string& swap_dir, uid_t owner,
                         gid_t group) {
  unlink(path.c_str());  // a stale region of an earlier run must not carry charges
  capgpu::LimitList limits;
  limits.count = 1;
  limits.bytes[0] = static_cast<uint64_t>(limit_bytes);
  if (int err = capgpu::CreateRegionFile(path.c_str(), limits, 0600, true); err != 0) {
    return Status::Internal("cannot create the memory-cap region '" + path +
                            "': " + std::strerror(err));
  }
  Result<int> fd = internal::OpenRegionFile(path, geteuid());
  if (!fd.ok()) return fd.status();
  Status s = Status::Ok();
  if (swap) {
    // Before the workload starts: its processes read swap_enabled when they join.
    capgpu::Region region;
    int err = region.OpenFd(*fd);
    if (err == 0) {
      capgpu::RegionLock lock(region);
      const uint64_t ram =
          swap_ram_bytes > 0 ? static_cast<uint64_t>(swap_ram_bytes) : capgpu::kNoLimit;
      if (!lock.held() || !capgpu::ConfigureSwap(region.data(), ram, swap_dir.c_str()))
        err = EINVAL;
    }
    if (err != 0)
      s = Status::Internal("cannot turn swapping on in '" + path + "': " + std::strerror(err));
  }
  if (s.ok() && owner != static_cast<uid_t>(-1) && fchown(*fd, owner, group) != 0) {
    s = Status::Internal("cannot give the memory-cap region '" + path + "' to uid " +
                         std::to_string(owner) + ": " + std::strerror(errno));
  }
  close(*fd);
  return s;
}

bool ReadShareRegion(const std::string& path, uid_t owner, capgpu::RegionFile* copy) {
  if (path.empty() || copy == nullptr) return false;
  Result<int> fd = internal::OpenRegionFile(path, owner);
  if (!fd.ok()) return false;
  const int rc = capgpu::ReadRegionCopy(*fd, copy);
  close(*fd);
  return rc == 0;
}

}  // namespace internal

using internal::CreateShareRegion;

std::string CgroupCpuMax(MilliCpu cpu_milli) {
  // 0, or more than the quota can express: no limit.
  if (cpu_milli <= 0 || cpu_milli > std::numeric_limits<int64_t>::max() / kCpuPeriodUs) {
    return "max " + std::to_string(kCpuPeriodUs);
  }
  // milli-CPU * period / 1000; the kernel's minimum quota is 1000 us.
  int64_t quota = std::max<int64_t>(cpu_milli * kCpuPeriodUs / 1000, 1000);
  return std::to_string(quota) + " " + std::to_string(kCpuPeriodUs);
}

std::string CgroupMemoryMax(MiB memory_mib) {
  if (memory_mib <= 0 || memory_mib > std::numeric_limits<int64_t>::max() / (1024 * 1024))
    return "max";
  return std::to_string(memory_mib * 1024 * 1024);
}

void Launcher::ProbeCgroups() {
  auto unavailable = [this](const std::string& why) {
    cgroups_available_ = false;
    cgroups_status_ = "cgroups: unavailable (" + why + ")";
  };
  const std::string& root = options_.cgroup_root;
  if (root.empty()) return unavailable("disabled");
  bool ok = false;
  std::string controllers = ReadSmallFile(root + "/cgroup.controllers", &ok);
  if (!ok) return unavailable("no cgroup v2 hierarchy at " + root);
  if (!HasWord(controllers, "cpu") || !HasWord(controllers, "memory")) {
    return unavailable("cpu and memory controllers not offered at " + root);
  }
  if (access((root + "/cgroup.subtree_control").c_str(), W_OK) != 0) {
    return unavailable(root + " is not writable");
  }
  std::string parent = root + "/" + options_.cgroup_parent;
  if (mkdir(parent.c_str(), 0755) != 0 && errno != EEXIST) {
    return unavailable("mkdir " + parent + ": " + std::strerror(errno));
  }
  for (const std::string& dir : {root, parent}) {
    std::string enabled = ReadSmallFile(dir + "/cgroup.subtree_control", &ok);
    if (HasWord(enabled, "cpu") && HasWord(enabled, "memory")) continue;
    std::string err = WriteControl(dir + "/cgroup.subtree_control", "+cpu +memory");
    if (!err.empty()) return unavailable("enabling cpu and memory: " + err);
  }
  cgroup_parent_dir_ = parent;
  cgroups_available_ = true;
  cgroups_status_ = "cgroups v2: " + parent;
}

Status Launcher::PrepareCgroup(const JobSpec& spec, std::string* dir, int* procs_fd) {
  *dir = cgroup_parent_dir_ + "/" + spec.id;
  if (mkdir(dir->c_str(), 0755) != 0 && errno != EEXIST) {
    return Status::Internal("cgroup " + *dir + ": " + std::strerror(errno));
  }
  std::string err = WriteControl(*dir + "/cpu.max", CgroupCpuMax(spec.cpu_milli));
  if (err.empty()) err = WriteControl(*dir + "/memory.max", CgroupMemoryMax(spec.memory_mib));
  if (!err.empty()) {
    rmdir(dir->c_str());
    return Status::Internal("cgroup limits for job " + spec.id + ": " + err);
  }
  *procs_fd = open((*dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
  if (*procs_fd < 0) {
    Status s = Status::Internal("cgroup " + *dir + "/cgroup.procs: " + std::strerror(errno));
    rmdir(dir->c_str());
    return s;
  }
  return Status::Ok();
}

Status Launcher::PrepareLimits(const JobSpec& spec, Job* job, int* procs_fd, uid_t owner,
                               gid_t group) {
  if (cgroups_available_) {
    if (Status s = PrepareCgroup(spec, &job->cgroup_dir, procs_fd); !s.ok()) return s;
  }
  if (spec.gpu_memory_limit_bytes > 0) {
    if (regions_.empty()) {
      return Status::FailedPrecondition("no directory for memory-cap regions under '" +
                                        options_.region_dir + "': " + regions_error_);
    }
    job->region_path = RegionPath(spec.id);
    job->region_owner = owner == static_cast<uid_t>(-1) ? geteuid() : owner;
    if (Status s = CreateShareRegion(job->region_path, spec.gpu_memory_limit_bytes, spec.swap,
                                     options_.swap_ram_bytes, options_.swap_dir, owner, group);
        !s.ok()) {
      return s;
    }
  }
  return Status::Ok();
}

}  // namespace tessera::agent
