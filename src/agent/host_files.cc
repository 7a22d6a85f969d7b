#include "agent/host_files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/read_file.h"

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
  return ReadRest(in);
}

std::string ReadRest(std::istream& in) {
  bool failed = false;
  return tessera::ReadRest(in, &failed);
}

std::string WriteControl(const std::string& path, const std::string& text) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return path + ": " + std::strerror(errno);
  ssize_t n = write(fd, text.data(), text.size());
  std::string err =
      n == static_cast<ssize_t>(text.size()) ? "" : path + ": " + std::strerror(errno);
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

Result<std::string> MakePrivateDir(const std::string& parent, const std::string& prefix,
                                   int* lock_fd) {
  *lock_fd = -1;
  struct stat ps {};
  if (stat(parent.c_str(), &ps) != 0) return Status::Internal(parent + ": " + std::strerror(errno));
  if (!S_ISDIR(ps.st_mode)) return Status::FailedPrecondition(parent + " is not a directory");
  if ((ps.st_uid != 0 && ps.st_uid != geteuid()) ||
      ((ps.st_mode & 022) != 0 && (ps.st_mode & S_ISVTX) == 0)) {
    return Status::FailedPrecondition(
        parent +
        " is not safe for share regions: it must belong to root or to this "
        "agent's account, and be sticky (like /dev/shm) if others may write to it");
  }
  static const char kHex[] = "0123456789abcdef";
  for (int attempt = 0; attempt < 8; ++attempt) {
    unsigned char bytes[16];
    if (getrandom(bytes, sizeof bytes, 0) != static_cast<ssize_t>(sizeof bytes)) {
      return Status::Internal(std::string("getrandom: ") + std::strerror(errno));
    }
    std::string dir = parent + "/" + prefix;
    for (unsigned char b : bytes) {
      dir += kHex[b >> 4];
      dir += kHex[b & 15];
    }
    // 0700 until checked; mkdir never follows or reuses an existing name.
    if (mkdir(dir.c_str(), 0700) != 0) {
      if (errno == EEXIST) continue;
      return Status::Internal("mkdir " + dir + ": " + std::strerror(errno));
    }
    int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st {};
    // Locked before it reads as finished (0711), so that a directory of that mode whose lock is
    // free has no maker any more.
    bool ok = fd >= 0 && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid() &&
              flock(fd, LOCK_EX | LOCK_NB) == 0 && fchmod(fd, 0711) == 0;
    const int err = errno;
    if (!ok) {
      if (fd >= 0) close(fd);
      rmdir(dir.c_str());
      return Status::Internal("cannot make " + dir + " private: " + std::strerror(err));
    }
    *lock_fd = fd;
    return dir;
  }
  return Status::Internal("no unused directory name under " + parent);
}

bool IsPrivateDirName(const std::string& name, const std::string& prefix) {
  if (name.size() != prefix.size() + 32 || name.compare(0, prefix.size(), prefix) != 0)
    return false;
  return name.find_first_not_of("0123456789abcdef", prefix.size()) == std::string::npos;
}

void RemovePrivateDir(const std::string& dir) {
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_uid != geteuid()) {
    close(fd);
    return;
  }
  DIR* entries = fdopendir(fd);  // owns fd from here
  if (entries == nullptr) {
    close(fd);
    return;
  }
  while (dirent* e = readdir(entries)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") unlinkat(fd, name.c_str(), 0);
  }
  closedir(entries);
  rmdir(dir.c_str());
}

int RemoveAbandonedPrivateDirs(const std::string& parent, const std::string& prefix) {
  DIR* entries = opendir(parent.c_str());
  if (entries == nullptr) return 0;
  std::vector<std::string> names;
  while (dirent* e = readdir(entries)) {
    if (IsPrivateDirName(e->d_name, prefix)) names.emplace_back(e->d_name);
  }
  closedir(entries);
  int removed = 0;
  for (const std::string& name : names) {
    const std::string dir = parent + "/" + name;
    int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat st {};
    // Held until it is gone, so that two agents starting at once do not both work on it.
    if (fstat(fd, &st) == 0 && st.st_uid == geteuid() && (st.st_mode & 07777) == 0711 &&
        flock(fd, LOCK_EX | LOCK_NB) == 0) {
      RemovePrivateDir(dir);
      ++removed;
    }
    close(fd);
  }
  return removed;
}

Result<int> OpenRegionFile(const std::string& path, uid_t owner) {
  int fd = open(path.c_str(), O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return Status::NotFound("region " + path + ": " + std::strerror(errno));
  struct stat st {};
  std::string why;
  if (fstat(fd, &st) != 0) {
    why = std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    why = "not a regular file";
  } else if (st.st_nlink != 1) {
    why = "it has other names (links)";
  } else if (st.st_uid != owner) {
    why = "it belongs to uid " + std::to_string(st.st_uid) + ", not " + std::to_string(owner);
  }
  if (!why.empty()) {
    close(fd);
    return Status::FailedPrecondition("region " + path + ": " + why);
  }
  return fd;
}

}  // namespace tessera::agent::internal
