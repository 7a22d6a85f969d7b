// What the node agent keeps on disk across its own restarts, under its work directory:
//   <work_dir>/exits/<job>.json  each ended job's exit (with why the agent stopped it itself, when
//                                it did: `stopped_by`), written before it is first reported and
//                                deleted once the control plane acked it, so that an agent
//                                restarted before the ack reports it again (in its registration)
//                                and the job is not taken for lost and run twice;
//   <work_dir>/epoch             the highest leader epoch the agent has seen in a reply, so that
//                                a restarted agent still ignores an older (deposed) leader.
// Every write goes to a temporary file, is fsync'ed, renamed over the old one, and the directory
// fsync'ed: a crash leaves the old file or the new one.
//
// Thread-safety: none; the agent's main thread only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "agent/protocol.h"
#include "common/status.h"

namespace tessera::agent {

// One ended job as recorded: its report, when it ended (wall clock, ms since the epoch) and how
// much of its output the control plane held then (uploads resume there after a restart).
struct ExitRecord {
  FinishedReport report;
  int64_t ended_ms = 0;
  int64_t uploaded = 0;
};

class AgentState {
 public:
  // `work_dir`: the agent's work directory. Disabled (every call does nothing, Load finds
  // nothing) when `enabled` is false: another agent owns the directory.
  AgentState(std::string work_dir, bool enabled);

  bool enabled() const { return enabled_; }
  std::string RecordPath(const std::string& job) const;

  // Durably writes the record (job ids outside [A-Za-z0-9._-]{1,128} are not recorded: Ok).
  Status Save(const ExitRecord& record);
  // Deletes the job's record, if any.
  void Remove(const std::string& job);
  // Every record found; a file that cannot be read as one is named in *corrupt and skipped.
  std::vector<ExitRecord> Load(std::vector<std::string>* corrupt) const;

  // The epoch saved, -1 when none (or unreadable: *error says why).
  int64_t LoadEpoch(std::string* error) const;
  Status SaveEpoch(int64_t epoch);

 private:
  std::string dir_;  // <work_dir>/exits
  std::string epoch_path_;
  bool enabled_;
};

}  // namespace tessera::agent
