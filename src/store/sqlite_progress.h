// The SQLite store's job progress log (schema 7). A job's row is written whole when it is
// submitted; what changes after (state, placement, reason, exit code, end time) is appended to
// job_progress in the same commit, and folded into the row later: by Tidy (the writer idle; a
// slice a step), before a load or prune of the jobs, and by a commit that leaves the log past
// kBound rows (a writer never idle), back to a slice below it. Reads of one job or a list read the
// latest progress instead of folding it. An append writes the log's last pages; an update in place
// writes its job's page, and a cycle's updates scatter over the table: a cycle's 79,040 placements
// rewrote ~57,000 pages of 4 KiB in its commits (served_cycle_bench).
//
// Not thread-safe: the store's mutex guards every call, as it does the SqliteDb's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"
#include "store/sqlite_db.h"
#include "store/store.h"

namespace tessera::store::internal {

// A job record's end time as the tables keep it: its update time once it ended (at least 1),
// else 0.
int64_t JobEndedMs(const JobRecord& j);
// Binds the record's exit code to parameter `i`, NULL when it has none.
void BindExitCode(Stmt& q, int i, const JobRecord& j);

// Each job's latest progress among the log's rows below seq ?1 (SQLite takes the bare columns
// beside a lone MAX() from the row of the maximum): what a fold writes into the jobs rows. NOT
// INDEXED: the slice is read by the primary key's range and grouped in a temporary tree, in
// proportion to its rows; by the (id, seq) index the GROUP BY walked the whole log.
inline constexpr char kLatestProgressBelow[] =
    "SELECT id, state, placement, update_ms, exit_code, reason, ended_ms, MAX(seq) FROM "
    "job_progress NOT INDEXED WHERE seq < ?1 GROUP BY id";

class ProgressLog {
 public:
  static constexpr int64_t kTidySlice = 4096;  // a step of Tidy: tens of milliseconds
  // Rows past which a commit folds the log back to a slice below (a writer never idle, so Tidy
  // never runs): past the bound, each commit folds about what it appended, a slice at a time.
  static constexpr int64_t kBound = 131072;
  static constexpr int64_t kAll = int64_t{1} << 62;

  explicit ProgressLog(SqliteDb& db) : db_(db) {}

  // Once the schema is known: whether it has job_progress (an older store updates its rows in
  // place, and the log is off), and if so its rows counted.
  Status Open(bool enabled);
  bool enabled() const { return enabled_; }

  // Whether job_progress holds a row, whichever store on the file appended it. What this log
  // counts (rows) misses the rows another store appended or folded (a standby taking over, a
  // reload beside a running engine), so the count only sets the pace of folding.
  Result<bool> Pending();
  // Rows as this log counts them: exact after a fold that reached the end of the log.
  int64_t rows() const { return rows_; }

  // A commit's bookkeeping: Append inside it, Committed once it is durable.
  void BeginCommit() { appended_ = 0; }
  Status Append(const JobRecord& j);
  void Committed() { rows_ += appended_; }
  // The rows a commit folds once it is durable: 0 below the bound, else down to a slice below it.
  int64_t OverBound() const { return rows_ >= kBound ? rows_ - (kBound - kTidySlice) : 0; }

  // Folds the oldest `most` rows into the jobs rows, in a transaction of its own: each job takes
  // its latest progress among them (its end time only once it ended). Not fenced: folding
  // changes nothing the rows and the log do not already say together.
  Status Fold(int64_t most);

  // `job` as its latest unfolded progress says, if any.
  Status Overlay(std::optional<JobRecord>* job);

  // The SQL of Store::ListJobs (ended_only: ListEndedJobs), ?1 the state ('' any), ?2 the limit,
  // reading the store's job columns in order. Without progress `pending`, the rows alone (the
  // ended ones by the index jobs_ended_submit); with some, each row joined to its latest
  // progress by the index on (id, seq), so that a list writes nothing.
  static std::string ListSql(bool pending, bool ended_only);

 private:
  Status Count();

  SqliteDb& db_;
  bool enabled_ = false;
  int64_t rows_ = 0;
  int64_t appended_ = 0;  // rows the commit in progress appended
};

}  // namespace tessera::store::internal
