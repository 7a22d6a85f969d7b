// Small files of the host the launcher reads and writes: cgroup v2 control files, /proc, and
// the list of running jobs a launcher keeps for the next one after a crash (leftovers.cc).
#pragma once

#include <string>

namespace tessera::agent::internal {

// A whole small file (a control file, a /proc entry); *ok false when it cannot be opened.
std::string ReadSmallFile(const std::string& path, bool* ok);
// Writes `text` to an existing control file. Returns "" or the reason.
std::string WriteControl(const std::string& path, const std::string& text);
// Whether whitespace-separated `text` has `word` ("cpu" in cgroup.controllers).
bool HasWord(const std::string& text, const std::string& word);
// SIGKILL to every process in the cgroup at `dir` under the v2 mount `root`.
void KillCgroup(const std::string& root, const std::string& dir);
// This boot's id (/proc/sys/kernel/random/boot_id), "unknown" where it cannot be read.
std::string BootId();

}  // namespace tessera::agent::internal
