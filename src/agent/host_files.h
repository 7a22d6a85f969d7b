// Small files of the host the launcher reads and writes: cgroup v2 control files, /proc, the
// list of running jobs a launcher keeps for the next one after a crash (leftovers.cc), and the
// private directory of share regions.
#pragma once

#include <sys/types.h>

#include <istream>
#include <string>

#include "common/status.h"

namespace tessera::agent::internal {

// A whole small file (a control file, a /proc entry); *ok false when it cannot be opened.
std::string ReadSmallFile(const std::string& path, bool* ok);
// What is left to read of an open file, as far as it reads: never an exception (a /proc file of a
// process that exits between its open and its read fails with ESRCH).
std::string ReadRest(std::istream& in);
// Writes `text` to an existing control file. Returns "" or the reason.
std::string WriteControl(const std::string& path, const std::string& text);
// Whether whitespace-separated `text` has `word` ("cpu" in cgroup.controllers).
bool HasWord(const std::string& text, const std::string& word);
// SIGKILL to every process in the cgroup at `dir` under the v2 mount `root`.
void KillCgroup(const std::string& root, const std::string& dir);
// This boot's id (/proc/sys/kernel/random/boot_id), "unknown" where it cannot be read.
std::string BootId();

// Makes `<parent>/<prefix><32 hex digits>` (128 random bits), a directory no other name can
// have been made at (mkdir), owned by this process's account, mode 0711: others reach a file in
// it by its name (a job its region) and neither list nor change anything there. `parent` must
// belong to root or to this account and, if others may write to it, be sticky (/dev/shm), so
// that nobody else can move the directory away. *lock_fd gets a descriptor of it holding an
// exclusive flock, taken before the mode is 0711: keep it open while the directory is in use
// (RemoveAbandonedPrivateDirs), close it after. Returns its path or the reason.
Result<std::string> MakePrivateDir(const std::string& parent, const std::string& prefix,
                                   int* lock_fd);
// Removes (RemovePrivateDir) every directory MakePrivateDir made under `parent` with `prefix`
// for this account whose maker is gone (no process holds its lock). Returns how many.
int RemoveAbandonedPrivateDirs(const std::string& parent, const std::string& prefix);
// Whether `name` (a last path component) is one MakePrivateDir makes with `prefix`.
bool IsPrivateDirName(const std::string& name, const std::string& prefix);
// Removes what is in a directory MakePrivateDir made, then the directory: only a real directory
// (not a symbolic link) owned by this process's account.
void RemovePrivateDir(const std::string& dir);
// Opens the share region file at `path` read-write for the agent: never through a symbolic link
// (O_NOFOLLOW), and only a regular file with no other name (one link) owned by `owner`. Returns
// the descriptor (close-on-exec; the caller closes it) or the reason.
Result<int> OpenRegionFile(const std::string& path, uid_t owner);

}  // namespace tessera::agent::internal
