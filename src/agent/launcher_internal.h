// Private to the launcher (launcher.cc: starting, stopping and watching jobs; launcher_child.cc:
// the job's process from its account and environment to exec; launcher_limits.cc: cgroups and
// memory-cap regions): what the pieces share.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "agent/launcher.h"
#include "capgpu/region.h"
#include "common/status.h"

namespace tessera::agent::internal {

// argv and envp for execvpe, pointing into the strings held here; filled in place, never moved.
struct ExecArgs {
  std::vector<std::string> env_strings;
  std::vector<char*> envp;
  std::vector<std::string> args;
  std::vector<char*> argv;
  std::string exec_error;  // the prefix the child writes when exec fails
  // What it writes when a bare command is in no PATH directory the job's account can search.
  std::string exec_not_in_path;
};

void BuildExecArgs(const JobSpec& spec, const LauncherOptions& options, ExecArgs* x);

// The job's stdout/stderr file, made anew: `out_fd` for the job, appending (so that what it
// writes after the agent cut the file lands at the cut), and `own_fd`, the agent's descriptor of
// the same file (without O_APPEND, under which pwrite would append too); /dev/null for its stdin.
Status OpenJobStdio(const std::string& out_path, int* out_fd, int* own_fd, int* null_fd);

// A job's Unix account, resolved before fork (getpwnam is not async-signal-safe).
struct Account {
  bool set = false;  // false: the agent's own
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary, the primary included
  std::string name, home;
};

// The account named `name` (empty: the agent's own); refused when it does not exist or this
// agent cannot switch to it.
Result<Account> ResolveAccount(const std::string& name);

// What the child needs after fork; plain values and pointers only.
struct ChildSetup {
  int out_fd = -1;
  int null_fd = -1;
  int procs_fd = -1;  // the job cgroup's cgroup.procs, or -1
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  const char* exec_error = nullptr;
  const char* exec_not_in_path = nullptr;
  const Account* account = nullptr;  // switch to it (uid, gid, groups) before exec
  const char* cwd = "/";             // the account's home (never the agent's directory)
};

// Forks the job's process; returns its pid, or -1 with the reason in `fork_errno`.
pid_t ForkJob(const ChildSetup& c, int* fork_errno);

// The agent creates and sizes the share's region before the workload starts, so no process
// of the workload decides its limit (the cap library only joins it). `path` is in the
// launcher's private directory, where no other account can have put anything. The region then
// belongs to `owner` and `group` (the job's account; uid_t(-1): the agent's own), so that the
// cap library in the job can charge it.
Status CreateShareRegion(const std::string& path, int64_t limit_bytes, bool swap,
                         int64_t swap_ram_bytes, const std::string& swap_dir, uid_t owner,
                         gid_t group);

// Reads a copy of a share's region as the agent made it (no symbolic link, one name, `owner`'s);
// false when there is none such at `path`. The region is the job's to write: it is never mapped
// nor locked here (capgpu/region.h, "An observer outside the workload").
bool ReadShareRegion(const std::string& path, uid_t owner, capgpu::RegionFile* copy);

}  // namespace tessera::agent::internal
