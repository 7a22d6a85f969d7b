// Internals of the store shared by its backends and its tests: URL parsing, the migration list
// and the backend factories. Not part of the public interface; the engine uses store.h only.
//
// Thread-safety: free functions over immutable data; safe from any thread.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "store/store.h"

namespace tessera::store::internal {

enum class Backend { kSqlite, kPostgres };

// A store URL taken apart: which backend, and what to hand it (a file path or a libpq URI).
struct ParsedUrl {
  Backend backend = Backend::kSqlite;
  std::string target;  // SQLite: the file path; PostgreSQL: the URL as given
};

// Accepts a path, "sqlite:PATH", "postgresql://..." or "postgres://...". Rejects an empty URL,
// an empty path and any other "scheme://" with a message naming the URL.
Result<ParsedUrl> ParseUrl(const std::string& url);

// Why a write of a deposed leader (its epoch `mine`) is refused, naming who leads now.
std::string DeposedMessage(const std::string& described_url, int64_t mine,
                           const Store::Leadership& now);

// The condition that finds a job by its Idempotency-Key ($1) submitted since $2 (both
// backends' placeholders). `idem_key <> ''` repeats the partial index's own condition: a planner
// cannot prove it from `idem_key = $1` with a bound value, and without it scans the jobs table
// (25 ms a submission at 110k jobs, under the store's lock).
inline constexpr const char* kIdempotencyKeyWhere =
    "idem_key = $1 AND idem_key <> '' AND submit_ms >= $2";

// Submission order: by time, then, within a millisecond, by the id's number. Ids are "j-N" without
// leading zeros, so by length and then text is by N: j-9 before j-10, where the text alone puts
// j-10 first (and a restart queued a burst's jobs out of order). The jobs indexes hold the same
// expressions (migration 9), so lists and loads read them in order.
#define TESSERA_SUBMIT_ORDER "submit_ms, length(id), id"
#define TESSERA_NEWEST_FIRST "submit_ms DESC, length(id) DESC, id DESC"
inline constexpr const char* kSubmitOrder = TESSERA_SUBMIT_ORDER;
inline constexpr const char* kNewestFirst = TESSERA_NEWEST_FIRST;

// The condition and order of a list of the ended jobs in state $1 (any: '') by newest submission,
// at most $2 (Store::ListEndedJobs): `ended_ms > 0` is the partial index jobs_ended_submit's own
// condition, so the list walks that index and no live job.
inline constexpr const char* kEndedJobListWhere =
    "ended_ms > 0 AND ($1 = '' OR state = $1) ORDER BY " TESSERA_NEWEST_FIRST " LIMIT $2";

// The columns of the events and jobs tables, in the order both backends read and bind them.
inline constexpr const char* kEventColumns = "seq, time_ms, actor, kind, subject, reason, data";
inline constexpr const char* kJobColumns =
    "id, queue, identity, group_name, state, spec, placement, submit_ms, update_ms, exit_code, "
    "reason, idem_key";
// What an insert of a job record (kJobColumns, then ended_ms) does when the job is there
// already: every column takes the new record's value (both backends' SQL).
inline constexpr const char* kJobUpsertConflict =
    "ON CONFLICT (id) DO UPDATE SET queue = excluded.queue, "
    "identity = excluded.identity, group_name = excluded.group_name, "
    "state = excluded.state, spec = excluded.spec, "
    "placement = excluded.placement, submit_ms = excluded.submit_ms, "
    "update_ms = excluded.update_ms, exit_code = excluded.exit_code, "
    "reason = excluded.reason, idem_key = excluded.idem_key, ended_ms = excluded.ended_ms";

// N for a job id "j-N", 0 for any other id.
int64_t JobNumber(const std::string& id);

// A URL fit for logs and messages: the password of a PostgreSQL URL replaced by "***".
std::string RedactUrl(const std::string& url);

// One schema step. `sqlite` and `postgres` are scripts of ';'-separated statements that move a
// store from version-1 to version; each runs inside the migration transaction.
struct Migration {
  int version;
  const char* what;
  const char* sqlite;
  const char* postgres;
};

// The steps, versions 1..N in order. LatestSchemaVersion() is the last one's version.
const std::vector<Migration>& Migrations();

// The refusal for a store written by a newer Tessera.
Status NewerSchemaError(const std::string& described_url, int found);

// The refusal of an update (a record with an empty spec) of a job the store does not hold.
Status UnknownJobUpdate(const std::string& id);

// What every backend's Commit does before it writes: a job record without an id is refused,
// and `*seqs` (when given) emptied. The answer: whether there is anything to write.
Result<bool> StartCommit(const std::vector<Event>& events, const std::vector<JobRecord>& jobs,
                         std::vector<int64_t>* seqs);

// Every backend's Commit around its own writing: StartCommit's checks, then, under `mu` and only
// when there is anything to write, `write(&assigned)`, which numbers the events; the numbers go
// to `*seqs` (when given) only when it succeeded.
template <typename Write>
Status CommitWith(const std::vector<Event>& events, const std::vector<JobRecord>& jobs,
                  std::vector<int64_t>* seqs, std::mutex& mu, Write write) {
  Result<bool> anything = StartCommit(events, jobs, seqs);
  if (!anything.ok() || !*anything) return anything.status();
  std::lock_guard<std::mutex> lock(mu);
  std::vector<int64_t> assigned;
  Status s = write(&assigned);
  if (s.ok() && seqs != nullptr) *seqs = std::move(assigned);
  return s;
}

// Backend factories. `target_version` is the version to migrate up to: LatestSchemaVersion()
// for real use; tests pass lower ones to build old stores.
Result<std::unique_ptr<Store>> OpenSqlite(const std::string& path, int target_version);
Result<std::unique_ptr<Store>> OpenPostgres(const std::string& url, int target_version);

// Test hooks (production code does not call these).
// The PostgreSQL lease's time to live and renewal period (postgres_lease.h), in milliseconds.
int64_t PgLeaseTtlMs();
int64_t PgLeaseRenewMs();
// Opens `url` migrating only up to `version` (1..LatestSchemaVersion()).
Result<std::unique_ptr<Store>> OpenAtVersion(const std::string& url, int version);
// Runs a ';'-separated SQL script on `url` in one transaction, outside any Store: tests use it to
// plant rows of an old schema or a future schema version.
Status ExecSql(const std::string& url, const std::string& sql);
Status ExecSqliteScript(const std::string& path, const std::string& sql);
Status ExecPostgresScript(const std::string& url, const std::string& sql);

}  // namespace tessera::store::internal
