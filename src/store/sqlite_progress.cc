#include "store/sqlite_progress.h"

#include <algorithm>

#include "store/internal.h"

namespace tessera::store::internal {

int64_t JobEndedMs(const JobRecord& j) {
  return Store::EndedState(j.state) ? std::max<int64_t>(j.update_ms, 1) : int64_t{0};
}

void BindExitCode(Stmt& q, int i, const JobRecord& j) {
  if (j.exit_code) {
    q.Bind(i, static_cast<int64_t>(*j.exit_code));
  } else {
    q.BindNull(i);
  }
}

Status ProgressLog::Open(bool enabled) {
  enabled_ = enabled;
  return enabled_ ? Count() : Status::Ok();
}

Result<bool> ProgressLog::Pending() {
  if (!enabled_) return false;
  auto any = db_.OptionalRow("SELECT 1 FROM job_progress LIMIT 1", "reading job progress",
                             SqliteDb::NoBindings, [](const Stmt&) { return true; });
  if (!any.ok()) return any.status();
  return any->has_value();
}

Status ProgressLog::Count() {
  auto rows = db_.OptionalRow("SELECT count(*) FROM job_progress", "counting job progress",
                              SqliteDb::NoBindings, [](const Stmt& q) { return q.Int64(0); });
  if (!rows.ok()) return rows.status();
  rows_ = rows->value_or(0);
  return Status::Ok();
}

Status ProgressLog::Append(const JobRecord& j) {
  auto st = db_.Prepare(
      "INSERT INTO job_progress (id, state, placement, update_ms, exit_code, reason, ended_ms) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
  if (!st.ok()) return st.status();
  Stmt q(*st);
  q.BindFrom(1, j.id, j.state, j.placement, j.update_ms);
  BindExitCode(q, 5, j);
  q.BindFrom(6, j.reason, JobEndedMs(j));
  if (q.Step() != SQLITE_DONE) return db_.Error("recording the progress of job " + j.id);
  ++appended_;
  return Status::Ok();
}

Status ProgressLog::Fold(int64_t most) {
  auto pending = Pending();
  if (!pending.ok()) return pending.status();
  if (!*pending) {
    rows_ = 0;
    return Status::Ok();
  }
  if (auto s = db_.Exec("BEGIN IMMEDIATE", "folding job progress"); !s.ok()) return s;
  int64_t folded = 0;
  Status s = [&]() -> Status {
    auto cut = db_.OptionalRow(
        "SELECT MIN(seq) + ?1 FROM job_progress", "folding job progress",
        [&](Stmt& q) { q.Bind(1, most); }, [](const Stmt& q) { return q.Int64(0); });
    if (!cut.ok()) return cut.status();
    auto below = [&](Stmt& q) { q.Bind(1, cut->value_or(0)); };
    auto updated = db_.Write(
        std::string("UPDATE jobs SET state = p.state, placement = p.placement, update_ms = "
                    "p.update_ms, exit_code = p.exit_code, reason = p.reason, ended_ms = CASE "
                    "WHEN p.ended_ms > 0 THEN p.ended_ms ELSE jobs.ended_ms END FROM (") +
            kLatestProgressBelow + ") AS p WHERE jobs.id = p.id",
        "folding job progress", below);
    if (!updated.ok()) return updated.status();
    auto deleted =
        db_.Write("DELETE FROM job_progress WHERE seq < ?1", "folding job progress", below);
    if (!deleted.ok()) return deleted.status();
    folded = *deleted;
    return db_.Exec("COMMIT", "committing folded job progress");
  }();
  if (!s.ok()) {
    db_.Rollback("rolling back");
    return s;
  }
  if (folded < most) return Count();  // the rest, exactly (few rows)
  rows_ = std::max<int64_t>(0, rows_ - folded);
  return Status::Ok();
}

Status ProgressLog::Overlay(std::optional<JobRecord>* job) {
  if (!job->has_value() || !enabled_) return Status::Ok();
  JobRecord& j = **job;
  auto found = db_.OptionalRow(
      "SELECT state, placement, update_ms, exit_code, reason FROM job_progress WHERE id = ?1 "
      "ORDER BY seq DESC LIMIT 1",
      "reading the progress of job " + j.id, [&](Stmt& q) { q.Bind(1, j.id); },
      [&](const Stmt& q) {
        q.ReadFrom(0, &j.state, &j.placement, &j.update_ms);
        j.exit_code = q.IsNull(3) ? std::nullopt : std::optional<int>(q.Int(3));
        j.reason = q.Text(4);
        return true;
      });
  return found.status();
}

std::string ProgressLog::ListSql(bool pending, bool ended_only) {
  if (!pending) {
    return std::string("SELECT ") + kJobColumns + " FROM jobs WHERE " +
           (ended_only ? kEndedJobListWhere
                       : "(?1 = '' OR state = ?1) ORDER BY " TESSERA_NEWEST_FIRST " LIMIT ?2");
  }
  // The ended jobs: the newest the rows say ended (by the index; an ended job never changes
  // state again, so its row's state is its latest), and those the log says ended.
  const char* ended =
      "j.rowid IN (SELECT rowid FROM (SELECT rowid FROM jobs WHERE ended_ms > 0 AND (?1 = '' OR "
      "state = ?1) ORDER BY " TESSERA_NEWEST_FIRST
      " LIMIT ?2) UNION SELECT jobs.rowid FROM "
      "job_progress AS e JOIN jobs ON jobs.id = e.id WHERE e.ended_ms > 0) AND ";
  return std::string(
             "SELECT j.id, j.queue, j.identity, j.group_name, IFNULL(p.state, j.state), j.spec, "
             "IIF(p.seq IS NULL, j.placement, p.placement), j.submit_ms, "
             "IIF(p.seq IS NULL, j.update_ms, p.update_ms), "
             "IIF(p.seq IS NULL, j.exit_code, p.exit_code), "
             "IIF(p.seq IS NULL, j.reason, p.reason), j.idem_key FROM jobs AS j "
             "LEFT JOIN job_progress AS p "
             "ON p.seq = (SELECT MAX(seq) FROM job_progress WHERE id = j.id) WHERE ") +
         (ended_only ? ended : "") +
         "(?1 = '' OR IFNULL(p.state, j.state) = ?1) "
         // kNewestFirst (internal.h) on the alias j: job_progress has an id column too.
         "ORDER BY j.submit_ms DESC, length(j.id) DESC, j.id DESC "
         "LIMIT ?2";
}

}  // namespace tessera::store::internal
