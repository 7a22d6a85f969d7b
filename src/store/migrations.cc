// The schema's history. Append a step to change the schema; never edit a released one, since
// stores in the field were built by it.
#include <string>
#include <vector>

#include "store/internal.h"

namespace tessera::store::internal {

// The same statements for both backends: SQLite and PostgreSQL index an expression alike.
constexpr const char* kSubmitOrderIndexes =
    "DROP INDEX jobs_submit;"
    "CREATE INDEX jobs_submit ON jobs (" TESSERA_SUBMIT_ORDER
    ");"
    "DROP INDEX jobs_live;"
    "CREATE INDEX jobs_live ON jobs (" TESSERA_SUBMIT_ORDER
    ") WHERE ended_ms = 0;"
    "DROP INDEX jobs_ended_submit;"
    "CREATE INDEX jobs_ended_submit ON jobs (" TESSERA_SUBMIT_ORDER ") WHERE ended_ms > 0;";

const std::vector<Migration>& Migrations() {
  static const std::vector<Migration> kSteps = {
      {1, "event log, job records, settings",
       // SQLite: INTEGER PRIMARY KEY is the rowid (64-bit); seq is assigned explicitly.
       "CREATE TABLE events ("
       "  seq INTEGER PRIMARY KEY, time_ms INTEGER NOT NULL, actor TEXT NOT NULL,"
       "  kind TEXT NOT NULL, subject TEXT NOT NULL, reason TEXT NOT NULL, data TEXT NOT NULL);"
       "CREATE TABLE jobs ("
       "  id TEXT PRIMARY KEY, queue TEXT NOT NULL, identity TEXT NOT NULL,"
       "  group_name TEXT NOT NULL, state TEXT NOT NULL, spec TEXT NOT NULL,"
       "  placement TEXT NOT NULL, submit_ms INTEGER NOT NULL, update_ms INTEGER NOT NULL,"
       "  exit_code INTEGER);"
       "CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);",
       // PostgreSQL: seq is assigned under a table lock, not by a sequence, so that numbers
       // become visible in order and without gaps.
       "CREATE TABLE events ("
       "  seq BIGINT PRIMARY KEY, time_ms BIGINT NOT NULL, actor TEXT NOT NULL,"
       "  kind TEXT NOT NULL, subject TEXT NOT NULL, reason TEXT NOT NULL, data TEXT NOT NULL);"
       "CREATE TABLE jobs ("
       "  id TEXT PRIMARY KEY, queue TEXT NOT NULL, identity TEXT NOT NULL,"
       "  group_name TEXT NOT NULL, state TEXT NOT NULL, spec TEXT NOT NULL,"
       "  placement TEXT NOT NULL, submit_ms BIGINT NOT NULL, update_ms BIGINT NOT NULL,"
       "  exit_code INTEGER);"
       "CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);"},
      {2, "job reason; indexes for event filters and job listing",
       "ALTER TABLE jobs ADD COLUMN reason TEXT NOT NULL DEFAULT '';"
       "CREATE INDEX events_kind ON events (kind, seq);"
       "CREATE INDEX events_subject ON events (subject, seq);"
       "CREATE INDEX jobs_submit ON jobs (submit_ms, id);",
       "ALTER TABLE jobs ADD COLUMN reason TEXT NOT NULL DEFAULT '';"
       "CREATE INDEX events_kind ON events (kind, seq);"
       "CREATE INDEX events_subject ON events (subject, seq);"
       "CREATE INDEX jobs_submit ON jobs (submit_ms, id);"},
      {3, "leadership: the epoch that fences a deposed leader's writes",
       "CREATE TABLE leadership (id INTEGER PRIMARY KEY CHECK (id = 1), epoch INTEGER NOT NULL,"
       "  holder TEXT NOT NULL, since_ms INTEGER NOT NULL);"
       "INSERT INTO leadership (id, epoch, holder, since_ms) VALUES (1, 0, '', 0);",
       "CREATE TABLE leadership (id INTEGER PRIMARY KEY CHECK (id = 1), epoch BIGINT NOT NULL,"
       "  holder TEXT NOT NULL, since_ms BIGINT NOT NULL);"
       "INSERT INTO leadership (id, epoch, holder, since_ms) VALUES (1, 0, '', 0);"},
      {4,
       "jobs.ended_ms (0 while live) and partial indexes on it: live jobs (loaded at start), "
       "ended jobs by age (retention); the state column stays unindexed, so progress updates "
       "touch no index",
       "ALTER TABLE jobs ADD COLUMN ended_ms INTEGER NOT NULL DEFAULT 0;"
       "UPDATE jobs SET ended_ms = MAX(update_ms, 1)"
       "  WHERE state IN ('succeeded', 'failed', 'cancelled', 'lost');"
       "CREATE INDEX jobs_live ON jobs (submit_ms, id) WHERE ended_ms = 0;"
       "CREATE INDEX jobs_ended ON jobs (ended_ms) WHERE ended_ms > 0;",
       "ALTER TABLE jobs ADD COLUMN ended_ms BIGINT NOT NULL DEFAULT 0;"
       "UPDATE jobs SET ended_ms = GREATEST(update_ms, 1)"
       "  WHERE state IN ('succeeded', 'failed', 'cancelled', 'lost');"
       "CREATE INDEX jobs_live ON jobs (submit_ms, id) WHERE ended_ms = 0;"
       "CREATE INDEX jobs_ended ON jobs (ended_ms) WHERE ended_ms > 0;"},
      {5,
       "jobs.idem_key: the submitter's Idempotency-Key (identity, newline, key), '' when none; "
       "a repeated submission finds its job by it",
       "ALTER TABLE jobs ADD COLUMN idem_key TEXT NOT NULL DEFAULT '';"
       "CREATE INDEX jobs_idem ON jobs (idem_key) WHERE idem_key <> '';",
       "ALTER TABLE jobs ADD COLUMN idem_key TEXT NOT NULL DEFAULT '';"
       "CREATE INDEX jobs_idem ON jobs (idem_key) WHERE idem_key <> '';"},
      {6,
       "samples: the utilization history (a JSON breakdown per time), at a resolution in seconds "
       "(the sample interval, and 5-minute averages)",
       "CREATE TABLE samples (resolution_s INTEGER NOT NULL, time_ms BIGINT NOT NULL, data TEXT "
       "NOT NULL,"
       "  PRIMARY KEY (resolution_s, time_ms));",
       "CREATE TABLE samples (resolution_s INTEGER NOT NULL, time_ms BIGINT NOT NULL, data TEXT "
       "NOT NULL,"
       "  PRIMARY KEY (resolution_s, time_ms));"},
      {7,
       "job_progress: what changes in a job after its submission (state, placement, reason, exit "
       "code), appended by each commit and folded into the jobs rows later (SQLite; PostgreSQL "
       "updates the rows in place)",
       "CREATE TABLE job_progress (seq INTEGER PRIMARY KEY, id TEXT NOT NULL, state TEXT NOT NULL,"
       "  placement TEXT NOT NULL, update_ms INTEGER NOT NULL, exit_code INTEGER,"
       "  reason TEXT NOT NULL, ended_ms INTEGER NOT NULL);"
       "CREATE INDEX job_progress_id ON job_progress (id, seq);",
       "SELECT 1"},
      {8,
       "jobs_ended_submit: the ended jobs in submit order, for lists of them that do not read "
       "past the live ones (Store::ListEndedJobs)",
       "CREATE INDEX jobs_ended_submit ON jobs (submit_ms, id) WHERE ended_ms > 0;",
       "CREATE INDEX jobs_ended_submit ON jobs (submit_ms, id) WHERE ended_ms > 0;"},
      {9,
       "jobs in submission order: within a millisecond by the id's number (j-9 before j-10), "
       "not its text; the indexes in submit order rebuilt on the same expressions "
       "(internal.h, kSubmitOrder)",
       kSubmitOrderIndexes, kSubmitOrderIndexes},
  };
  return kSteps;
}

Status NewerSchemaError(const std::string& described_url, int found) {
  return Status::FailedPrecondition(
      described_url + ": store schema version " + std::to_string(found) +
      " is newer than this Tessera (knows up to " + std::to_string(Store::LatestSchemaVersion()) +
      "); upgrade Tessera");
}

std::string DeposedMessage(const std::string& described_url, int64_t mine,
                           const Store::Leadership& now) {
  return described_url + ": deposed: this server led in epoch " + std::to_string(mine) + ", and " +
         (now.holder.empty() ? std::string("another server") : now.holder) + " leads since epoch " +
         std::to_string(now.epoch) + "; its writes are refused";
}

Status UnknownJobUpdate(const std::string& id) {
  return Status::FailedPrecondition("job record " + id +
                                    " is an update (empty spec) of a job the store does not hold");
}

}  // namespace tessera::store::internal
