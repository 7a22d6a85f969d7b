#include "agent/host_files.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>

namespace tessera::agent::internal {
namespace {

// Whether process `pid` is in the cgroup at `dir` (under the v2 mount `root`): /proc/PID/cgroup
// reads "0::/<dir relative to root>".
bool InCgroup(long pid, std::string root, const std::string& dir) {
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  if (dir.size() <= root.size() || dir.compare(0, root.size(), root) != 0) return false;
  bool ok = false;
  const std::string line = ReadSmallFile("/proc/" + std::to_string(pid) + "/cgroup", &ok);
  return ok && line.find("0::" + dir.substr(root.size()) + "\n") != std::string::npos;
}

}  // namespace

std::string ReadSmallFile(const std::string& path, bool* ok) {
  std::ifstream in(path);
  *ok = static_cast<bool>(in);
  std::ostringstream ss;
  if (in) ss << in.rdbuf();
  return ss.str();
}

std::string WriteControl(const std::string& path, const std::string& text) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return path + ": " + std::strerror(errno);
  ssize_t n = write(fd, text.data(), text.size());
  std::string err = n == static_cast<ssize_t>(text.size()) ? "" : path + ": " + std::strerror(errno);
  close(fd);
  return err;
}

bool HasWord(const std::string& text, const std::string& word) {
  std::istringstream in(text);
  std::string w;
  while (in >> w) {
    if (w == word) return true;
  }
  return false;
}

// Those that left the job's process group or session included: cgroup.kill where the kernel
// has it (5.14), else each member cgroup.procs lists (checked to be one, so that a stale list
// never kills a stranger).
void KillCgroup(const std::string& root, const std::string& dir) {
  if (dir.empty() || WriteControl(dir + "/cgroup.kill", "1").empty()) return;
  bool ok = false;
  std::istringstream procs(ReadSmallFile(dir + "/cgroup.procs", &ok));
  long pid = 0;
  while (procs >> pid) {
    if (pid > 0 && InCgroup(pid, root, dir)) kill(static_cast<pid_t>(pid), SIGKILL);
  }
}

// Start times count from boot, so a list of pids from before a reboot means nothing.
std::string BootId() {
  bool ok = false;
  std::string id = ReadSmallFile("/proc/sys/kernel/random/boot_id", &ok);
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  return ok && !id.empty() ? id : "unknown";
}

}  // namespace tessera::agent::internal
