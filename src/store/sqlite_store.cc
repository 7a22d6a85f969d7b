// The SQLite backend: one file, WAL journal, synchronous=FULL, one IMMEDIATE transaction per
// Commit. A single connection is shared by all callers and guarded by a mutex; prepared
// statements are cached per SQL text.
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/log.h"
#include "store/internal.h"
#include "store/sqlite_db.h"
#include "store/sqlite_progress.h"
#include "store/store.h"

namespace tessera::store::internal {
namespace {

constexpr int kBusyTimeoutMs = 5000;

class SqliteStore final : public Store {
 public:
  SqliteStore(sqlite3* db, std::string path) : db_(db, "sqlite:" + path), path_(std::move(path)) {}
  ~SqliteStore() override {
    if (lease_fd_ >= 0) close(lease_fd_);  // releases the flock
  }

  Status Configure(int target_version) {
    std::lock_guard<std::mutex> lock(mu_);
    sqlite3_extended_result_codes(db_.handle(), 1);
    sqlite3_busy_timeout(db_.handle(), kBusyTimeoutMs);
    // Reads the file header: a file that is not a database fails here, named.
    if (auto s = db_.Exec("PRAGMA journal_mode=WAL", "switching to WAL journal"); !s.ok()) return s;
    if (auto s = db_.Exec("PRAGMA synchronous=FULL", "setting synchronous=FULL"); !s.ok()) return s;
    // 64 MiB of page cache (the default is 2 MiB): a scheduling pass commits tens of thousands of
    // rows whose index pages would otherwise be read back from the file one by one.
    if (auto s = db_.Exec("PRAGMA cache_size=-65536", "sizing the page cache"); !s.ok()) return s;
    // The log is copied into the database by Tidy, not by the commit crossing 1,000 pages.
    sqlite3_wal_hook(db_.handle(), &SqliteStore::WalHook, this);
    if (auto s = Migrate(target_version); !s.ok()) return s;
    auto version = ReadVersionLocked();
    if (!version.ok()) return version.status();
    return progress_.Open(*version >= kProgressLogVersion);
  }

  Status Commit(const std::vector<Event>& events, const std::vector<JobRecord>& jobs,
                std::vector<int64_t>* seqs) override {
    return CommitWith(events, jobs, seqs, mu_, [&](std::vector<int64_t>* assigned) {
      // IMMEDIATE takes the write lock now, so the seq read below cannot race another writer
      // (another process on the same file).
      progress_.BeginCommit();
      Status s = WriteTransaction("starting a commit", "committing",
                                  [&] { return CommitLocked(events, jobs, assigned); });
      if (s.ok()) progress_.Committed();
      // Past the bound (a writer never idle), the log folded back below it.
      if (s.ok() && progress_.OverBound() > 0) (void)progress_.Fold(progress_.OverBound());
      return s;
    });
  }

  // A step: a slice of the progress log folded, or once it is folded, the log copied.
  bool Tidy() override {
    std::lock_guard<std::mutex> lock(mu_);
    auto pending = progress_.Pending();
    if (!pending.ok()) return false;
    if (*pending) {
      // On failure, the rows stay; the next load of the jobs or Tidy folds them.
      if (!progress_.Fold(ProgressLog::kTidySlice).ok()) return false;
      return progress_.rows() > 0 || wal_frames_ >= 1000;  // the log's copy, a step of its own
    }
    if (wal_frames_ >= 1000) Checkpoint();  // SQLite's own threshold
    return false;
  }

  Result<std::vector<JobRecord>> LoadJobs() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto s = progress_.Fold(ProgressLog::kAll); !s.ok()) return s;
    return db_.Rows(std::string("SELECT ") + kJobColumns + " FROM jobs ORDER BY " + kSubmitOrder,
                    "loading jobs", SqliteDb::NoBindings, ReadJob);
  }

  Result<std::vector<JobRecord>> LoadLiveJobs() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto s = progress_.Fold(ProgressLog::kAll); !s.ok()) return s;
    return db_.Rows(std::string("SELECT ") + kJobColumns +
                        " FROM jobs WHERE ended_ms = 0 ORDER BY " + kSubmitOrder,
                    "loading live jobs", SqliteDb::NoBindings, ReadJob);
  }

  // Reads the progress not yet folded rather than folding it: a list writes nothing, so it is
  // served on a disk that cannot be written and never waits for the write lock. Each row listed
  // finds its latest progress by the (id, seq) index.
  Result<std::vector<JobRecord>> ListJobs(const std::string& state, int limit) override {
    return ListLocked(state, limit, /*ended_only=*/false);
  }
  Result<std::vector<JobRecord>> ListEndedJobs(const std::string& state, int limit) override {
    return ListLocked(state, limit, /*ended_only=*/true);
  }

  Result<int64_t> MaxJobNumber() override {
    std::lock_guard<std::mutex> lock(mu_);
    auto st = db_.Prepare(
        "SELECT COALESCE(MAX(CAST(substr(id, 3) AS INTEGER)), 0) FROM jobs WHERE id LIKE 'j-%'");
    if (!st.ok()) return st.status();
    Stmt q(*st);
    if (q.Step() != SQLITE_ROW) return db_.Error("reading the highest job number");
    return q.Int64(0);
  }

  Result<int64_t> Prune(int64_t before_ms) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto s = progress_.Fold(ProgressLog::kAll); !s.ok()) return s;
    // Events by seq: the log's prefix older than the cut (seq order is time order, near enough).
    return DeleteRows("pruning", "pruning",
                      {"DELETE FROM jobs WHERE ended_ms > 0 AND ended_ms < ?1",
                       "DELETE FROM events WHERE seq < COALESCE((SELECT MIN(seq) FROM events "
                       "WHERE time_ms >= ?1), (SELECT MAX(seq) + 1 FROM events), 0)"},
                      "pruning", [&](Stmt& q) { q.Bind(1, before_ms); });
  }

  Result<int64_t> PruneEventsOfKind(const std::string& kind, int64_t before_ms) override {
    std::lock_guard<std::mutex> lock(mu_);
    // By the (kind, seq) index: the kind's events, then their times.
    return DeleteRows("pruning", "pruning",
                      {"DELETE FROM events WHERE kind = ?1 AND seq IN (SELECT seq FROM events "
                       "WHERE kind = ?1 AND time_ms < ?2)"},
                      "pruning", [&](Stmt& q) { q.BindFrom(1, kind, before_ms); });
  }

  Result<std::optional<JobRecord>> GetJob(const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto job = db_.OptionalRow(
        std::string("SELECT ") + kJobColumns + " FROM jobs WHERE id = ?1", "reading job " + id,
        [&](Stmt& q) { q.Bind(1, id); }, ReadJob);
    if (!job.ok()) return job;
    if (auto s = progress_.Overlay(&*job); !s.ok()) return s;
    return job;
  }

  Result<std::optional<JobRecord>> FindByIdempotencyKey(const std::string& key,
                                                        int64_t since_ms) override {
    if (key.empty()) return std::optional<JobRecord>();  // '' marks the jobs without a key
    std::lock_guard<std::mutex> lock(mu_);
    auto job = db_.OptionalRow(
        std::string("SELECT ") + kJobColumns + " FROM jobs WHERE " + kIdempotencyKeyWhere +
            " ORDER BY submit_ms LIMIT 1",
        "finding a job by idempotency key", [&](Stmt& q) { q.BindFrom(1, key, since_ms); },
        ReadJob);
    if (!job.ok()) return job;
    if (auto s = progress_.Overlay(&*job); !s.ok()) return s;
    return job;
  }

  Result<std::vector<Event>> ListEvents(int64_t after_seq, int limit,
                                        const EventFilter& filter) override {
    if (limit < 0) return Status::InvalidArgument("event limit must not be negative");
    if (limit == 0) return std::vector<Event>();
    std::string sql = std::string("SELECT ") + kEventColumns + " FROM events WHERE seq > ?1";
    if (!filter.kind_prefix.empty()) sql += " AND substr(kind, 1, length(?2)) = ?2";
    if (!filter.subject.empty()) sql += " AND subject = ?3";
    if (!filter.actor.empty()) sql += " AND actor = ?4";
    sql += " ORDER BY seq LIMIT ?5";
    std::lock_guard<std::mutex> lock(mu_);
    return db_.Rows(
        sql, "listing events",
        [&](Stmt& q) {
          q.Bind(1, after_seq);
          if (!filter.kind_prefix.empty()) q.Bind(2, filter.kind_prefix);
          if (!filter.subject.empty()) q.Bind(3, filter.subject);
          if (!filter.actor.empty()) q.Bind(4, filter.actor);
          q.Bind(5, static_cast<int64_t>(limit));
        },
        ReadEvent);
  }

  Result<int64_t> LastSeq() override {
    std::lock_guard<std::mutex> lock(mu_);
    return LastSeqLocked();
  }

  Status PutSetting(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> lock(mu_);
    return WriteTransaction("writing setting " + key, "committing setting " + key,
                            [&] { return PutSettingLocked(key, value); });
  }

  Result<std::optional<Leadership>> TryLead(const std::string& holder) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (lease_fd_ < 0) {
      const std::string lease = path_ + ".leader";
      lease_fd_ = open(lease.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
      if (lease_fd_ < 0) return Status::Internal(Describe() + ": cannot open " + lease);
      if (flock(lease_fd_, LOCK_EX | LOCK_NB) != 0) {
        close(lease_fd_);
        lease_fd_ = -1;
        return std::optional<Leadership>();  // another process leads this file
      }
    }
    if (auto s = db_.Exec("BEGIN IMMEDIATE", "taking the lead"); !s.ok()) return s;
    Status s = db_.Exec(
        "UPDATE leadership SET epoch = epoch + 1, holder = " + Quote(holder) +
            ", since_ms = CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) WHERE id = 1",
        "taking the lead");
    auto now = s.ok() ? LeaderLocked() : Result<Leadership>(s);
    if (now.ok()) s = db_.Exec("COMMIT", "taking the lead");
    if (!now.ok() || !s.ok()) {
      db_.Rollback("rolling back");
      return now.ok() ? s : now.status();
    }
    fence_ = now->epoch;
    return std::optional<Leadership>(*now);
  }

  Result<Leadership> Leader() override {
    std::lock_guard<std::mutex> lock(mu_);
    return LeaderLocked();
  }

  Status CheckLease() override {
    std::lock_guard<std::mutex> lock(mu_);
    return CheckFenceLocked();  // the flock lasts as long as this process
  }

  Status PutSample(int resolution_s, const Sample& sample) override {
    std::lock_guard<std::mutex> lock(mu_);
    return WriteTransaction("writing a sample", "committing a sample", [&] {
      return db_
          .Write(
              "INSERT INTO samples (resolution_s, time_ms, data) VALUES (?1, ?2, ?3) "
              "ON CONFLICT (resolution_s, time_ms) DO UPDATE SET data = excluded.data",
              "writing a sample",
              [&](Stmt& q) {
                q.BindFrom(1, static_cast<int64_t>(resolution_s), sample.time_ms, sample.data);
              })
          .status();
    });
  }

  Result<std::vector<Sample>> ListSamples(int resolution_s, int64_t since_ms,
                                          int64_t until_ms) override {
    std::lock_guard<std::mutex> lock(mu_);
    return db_.Rows(
        "SELECT time_ms, data FROM samples WHERE resolution_s = ?1 AND time_ms >= ?2 AND time_ms < "
        "?3 ORDER BY time_ms",
        "listing samples",
        [&](Stmt& q) { q.BindFrom(1, static_cast<int64_t>(resolution_s), since_ms, until_ms); },
        [](const Stmt& q) {
          return Sample{q.Int64(0), q.Text(1)};
        });
  }

  Result<int64_t> PruneSamples(int resolution_s, int64_t before_ms) override {
    std::lock_guard<std::mutex> lock(mu_);
    return DeleteRows(
        "pruning samples", "committing pruned samples",
        {"DELETE FROM samples WHERE resolution_s = ?1 AND time_ms < ?2"}, "pruning samples",
        [&](Stmt& q) { q.BindFrom(1, static_cast<int64_t>(resolution_s), before_ms); });
  }

  Result<std::optional<std::string>> GetSetting(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mu_);
    return db_.OptionalRow(
        "SELECT value FROM settings WHERE key = ?1", "reading setting " + key,
        [&](Stmt& q) { q.Bind(1, key); }, [](const Stmt& q) { return q.Text(0); });
  }

  Result<std::vector<std::pair<std::string, std::string>>> ListSettings(
      const std::string& prefix) override {
    std::lock_guard<std::mutex> lock(mu_);
    return db_.Rows(
        "SELECT key, value FROM settings WHERE substr(key, 1, length(?1)) = ?1 ORDER BY key",
        "listing settings " + prefix, [&](Stmt& q) { q.Bind(1, prefix); },
        [](const Stmt& q) { return std::pair<std::string, std::string>(q.Text(0), q.Text(1)); });
  }

  Result<int> SchemaVersion() override {
    std::lock_guard<std::mutex> lock(mu_);
    return ReadVersionLocked();
  }

  std::string Describe() const override { return "sqlite:" + path_; }

 private:
  // One write transaction: BEGIN IMMEDIATE (`begin_what` in its error), `body()` once the fence
  // holds, COMMIT (`commit_what`); rolled back when any of them fails, whose error it returns.
  template <typename Body>
  Status WriteTransaction(const std::string& begin_what, const std::string& commit_what,
                          Body body) {
    if (auto s = db_.Exec("BEGIN IMMEDIATE", begin_what); !s.ok()) return s;
    Status s = CheckFenceLocked();
    if (s.ok()) s = body();
    if (s.ok()) s = db_.Exec("COMMIT", commit_what);
    if (!s.ok()) db_.Rollback("rolling back");
    return s;
  }

  // Deletes in one write transaction (as WriteTransaction): each of `deletes` runs, `bind(q)`
  // binding its parameters (`what` naming it in an error); the rows they removed, together.
  template <typename Bind>
  Result<int64_t> DeleteRows(const std::string& begin_what, const std::string& commit_what,
                             std::initializer_list<const char*> deletes, const std::string& what,
                             Bind bind) {
    int64_t rows = 0;
    Status s = WriteTransaction(begin_what, commit_what, [&]() -> Status {
      for (const char* sql : deletes) {
        Result<int64_t> changed = db_.Write(sql, what, bind);
        if (!changed.ok()) return changed.status();
        rows += *changed;
      }
      return Status::Ok();
    });
    if (!s.ok()) return s;
    return rows;
  }

  Status PutSettingLocked(const std::string& key, const std::string& value) {
    auto st = db_.Prepare(
        "INSERT INTO settings (key, value) VALUES (?1, ?2) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value");
    if (!st.ok()) return st.status();
    Stmt q(*st);
    q.BindFrom(1, key, value);
    if (q.Step() != SQLITE_DONE) return db_.Error("writing setting " + key);
    return Status::Ok();
  }

  static std::string Quote(const std::string& text) {
    std::string out = "'";
    for (char c : text) out += c == '\'' ? std::string("''") : std::string(1, c);
    return out + "'";
  }

  Result<Leadership> LeaderLocked() {
    auto st = db_.Prepare("SELECT epoch, holder FROM leadership WHERE id = 1");
    if (!st.ok()) return st.status();
    Stmt q(*st);
    if (q.Step() != SQLITE_ROW) return db_.Error("reading the leadership");
    return Leadership{q.Int64(0), q.Text(1)};
  }

  // Inside a write transaction: refused when another server took the lead since this one did.
  Status CheckFenceLocked() {
    if (fence_ == 0) return Status::Ok();
    auto now = LeaderLocked();
    if (!now.ok()) return now.status();
    if (now->epoch == fence_) return Status::Ok();
    return Status::FailedPrecondition(DeposedMessage(Describe(), fence_, *now));
  }

  Result<int64_t> LastSeqLocked() {
    auto st = db_.Prepare("SELECT COALESCE(MAX(seq), 0) FROM events");
    if (!st.ok()) return st.status();
    Stmt q(*st);
    if (q.Step() != SQLITE_ROW) return db_.Error("reading the last seq");
    return q.Int64(0);
  }

  Status CommitLocked(const std::vector<Event>& events, const std::vector<JobRecord>& jobs,
                      std::vector<int64_t>* assigned) {
    if (!events.empty()) {
      auto last = LastSeqLocked();
      if (!last.ok()) return last.status();
      int64_t seq = *last;
      auto st = db_.Prepare(std::string("INSERT INTO events (") + kEventColumns +
                            ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
      if (!st.ok()) return st.status();
      for (const auto& e : events) {
        Stmt q(*st);
        q.BindFrom(1, ++seq, e.time_ms, e.actor, e.kind, e.subject, e.reason, e.data);
        if (q.Step() != SQLITE_DONE) return db_.Error("appending event " + e.kind);
        assigned->push_back(seq);
      }
    }
    for (const auto& j : jobs) {
      Status s = j.spec.empty() ? UpdateJobLocked(j) : InsertJobLocked(j);
      if (!s.ok()) return s;
    }
    return Status::Ok();
  }

  // A new job, or one whose spec is rewritten.
  Status InsertJobLocked(const JobRecord& j) {
    // A rewritten row must not be overridden, when folded, by progress recorded before it.
    bool rewrite = false;
    auto pending = progress_.Pending();
    if (!pending.ok()) return pending.status();
    if (*pending) {
      auto held = HeldLocked(j.id);
      if (!held.ok()) return held.status();
      rewrite = *held;
    }
    auto st = db_.Prepare(std::string("INSERT INTO jobs (") + kJobColumns +
                          ", ended_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, "
                          "?13) " +
                          kJobUpsertConflict);
    if (!st.ok()) return st.status();
    Stmt q(*st);
    q.BindFrom(1, j.id, j.queue, j.identity, j.group, j.state, j.spec, j.placement, j.submit_ms,
               j.update_ms);
    BindExitCode(q, 10, j);
    q.BindFrom(11, j.reason, j.idempotency_key, JobEndedMs(j));
    if (q.Step() != SQLITE_DONE) return db_.Error("writing job " + j.id);
    return rewrite ? progress_.Append(j) : Status::Ok();
  }

  Result<bool> HeldLocked(const std::string& id) {
    auto held = db_.OptionalRow(
        "SELECT 1 FROM jobs WHERE id = ?1", "finding job " + id, [&](Stmt& q) { q.Bind(1, id); },
        [](const Stmt&) { return true; });
    if (!held.ok()) return held.status();
    return held->has_value();
  }

  // A stored job's progress: the columns that change after submission. Appended to job_progress
  // (store/sqlite_progress.h); in place in a store of an older schema.
  Status UpdateJobLocked(const JobRecord& j) {
    if (progress_.enabled()) {
      auto held = HeldLocked(j.id);
      if (!held.ok()) return held.status();
      return *held ? progress_.Append(j) : UnknownJobUpdate(j.id);
    }
    // ended_ms is set once, when the job ends; progress updates leave it (and so every index)
    // alone.
    const bool ended = EndedState(j.state);
    auto st = db_.Prepare(
        ended ? "UPDATE jobs SET state = ?2, placement = ?3, update_ms = ?4, exit_code = ?5, "
                "reason = ?6, ended_ms = ?7 WHERE id = ?1"
              : "UPDATE jobs SET state = ?2, placement = ?3, update_ms = ?4, exit_code = ?5, "
                "reason = ?6 WHERE id = ?1");
    if (!st.ok()) return st.status();
    Stmt q(*st);
    q.BindFrom(1, j.id, j.state, j.placement, j.update_ms);
    BindExitCode(q, 5, j);
    q.Bind(6, j.reason);
    if (ended) q.Bind(7, JobEndedMs(j));
    if (q.Step() != SQLITE_DONE) return db_.Error("updating job " + j.id);
    if (sqlite3_changes(db_.handle()) != 1) return UnknownJobUpdate(j.id);
    return Status::Ok();
  }

  Result<std::vector<JobRecord>> ListLocked(const std::string& state, int limit, bool ended_only) {
    std::lock_guard<std::mutex> lock(mu_);
    auto pending = progress_.Pending();
    if (!pending.ok()) return pending.status();
    return db_.Rows(
        ProgressLog::ListSql(*pending, ended_only), "listing jobs",
        [&](Stmt& q) { q.BindFrom(1, state, static_cast<int64_t>(std::max(0, limit))); }, ReadJob);
  }

  static Event ReadEvent(const Stmt& q) {
    Event e;
    q.ReadFrom(0, &e.seq, &e.time_ms, &e.actor, &e.kind, &e.subject, &e.reason, &e.data);
    return e;
  }

  static JobRecord ReadJob(const Stmt& q) {
    JobRecord j;
    q.ReadFrom(0, &j.id, &j.queue, &j.identity, &j.group, &j.state, &j.spec, &j.placement,
               &j.submit_ms, &j.update_ms);
    if (!q.IsNull(9)) j.exit_code = q.Int(9);
    q.ReadFrom(10, &j.reason, &j.idempotency_key);
    return j;
  }

  // 0 for a store without the version table (a new file).
  Result<int> ReadVersionLocked() {
    {
      auto st = db_.Prepare(
          "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'");
      if (!st.ok()) return st.status();
      Stmt q(*st);
      if (q.Step() != SQLITE_ROW) return db_.Error("reading the schema version");
      if (q.Int(0) == 0) return 0;
    }
    auto st = db_.Prepare("SELECT version FROM schema_version WHERE id = 1");
    if (!st.ok()) return st.status();
    Stmt q(*st);
    const int rc = q.Step();
    if (rc == SQLITE_ROW) return q.Int(0);
    if (rc != SQLITE_DONE) return db_.Error("reading the schema version");
    return 0;
  }

  // Brings the file to `target` in one transaction. Statements are not cached here: the schema
  // is changing under them.
  Status Migrate(int target) {
    if (auto s = db_.Exec("BEGIN IMMEDIATE", "starting migration"); !s.ok()) return s;
    Status s = MigrateLocked(target);
    if (s.ok()) s = db_.Exec("COMMIT", "committing migration");
    if (!s.ok()) db_.Rollback("rolling back migration");
    // Drop statements compiled against the old schema.
    db_.ForgetStatements();
    return s;
  }

  Status MigrateLocked(int target) {
    auto version = ReadVersionLocked();
    if (!version.ok()) return version.status();
    if (*version > Store::LatestSchemaVersion()) return NewerSchemaError(Describe(), *version);
    if (*version >= target) return Status::Ok();
    if (auto s = db_.Exec("CREATE TABLE IF NOT EXISTS schema_version ("
                          "id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL)",
                          "creating the version table");
        !s.ok()) {
      return s;
    }
    for (const auto& step : Migrations()) {
      if (step.version <= *version || step.version > target) continue;
      if (auto s = db_.Exec(step.sqlite, "migrating to schema version " +
                                             std::to_string(step.version) + " (" + step.what + ")");
          !s.ok()) {
        return s;
      }
    }
    return db_.Exec("INSERT INTO schema_version (id, version) VALUES (1, " +
                        std::to_string(target) +
                        ") ON CONFLICT (id) DO UPDATE SET version = excluded.version",
                    "recording the schema version");
  }

  // Called by SQLite after each commit (mu_ held) with its log's frames. Past 256 MiB the commit
  // copies the log (a writer never idle); below, Tidy does, after a cycle's ~50,000 pages.
  static int WalHook(void* self, sqlite3* /*db*/, const char* /*name*/, int frames) {
    auto* store = static_cast<SqliteStore*>(self);
    if ((store->wal_frames_ = frames) >= 65536) store->Checkpoint();
    return SQLITE_OK;
  }
  // A passive checkpoint: copies what no reader still needs; the rest is copied next time.
  void Checkpoint() {
    int log = 0, copied = 0;
    const int rc =
        sqlite3_wal_checkpoint_v2(db_.handle(), nullptr, SQLITE_CHECKPOINT_PASSIVE, &log, &copied);
    if (rc == SQLITE_OK) wal_frames_ = log - copied;
  }

  static constexpr int kProgressLogVersion = 7;  // schema version that brought job_progress
  mutable std::mutex mu_;
  SqliteDb db_;                // guarded by mu_
  ProgressLog progress_{db_};  // guarded by mu_ (store/sqlite_progress.h)
  int wal_frames_ = 0;  // in the write-ahead log not yet copied into the database; guarded by mu_
  const std::string path_;
  int lease_fd_ = -1;  // "<file>.leader", flocked while leading
  int64_t fence_ = 0;  // the epoch this store leads in; 0: unfenced
};

std::string AbsolutePath(const std::string& path) {
  std::error_code ec;
  auto abs = std::filesystem::absolute(path, ec);
  return ec ? path : abs.lexically_normal().string();
}

}  // namespace

Result<std::unique_ptr<Store>> OpenSqlite(const std::string& path, int target_version) {
  const std::string abs = AbsolutePath(path);
  const auto parent = std::filesystem::path(abs).parent_path();
  std::error_code ec;
  if (!parent.empty() && !std::filesystem::is_directory(parent, ec)) {
    return Status::InvalidArgument("sqlite:" + abs + ": directory " + parent.string() +
                                   " does not exist");
  }
  // The database holds every job's command and environment: readable by its owner alone. A new
  // file is made 0600 before SQLite opens it (its -wal and -shm files take the same mode); an
  // older one made readable by others is tightened.
  const int made = open(abs.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (made >= 0) close(made);
  for (const char* suffix : {"", "-wal", "-shm"}) {
    struct stat st {};
    const std::string file = abs + suffix;
    if (stat(file.c_str(), &st) == 0 && (st.st_mode & 077) != 0)
      chmod(file.c_str(), st.st_mode & 0700);
  }
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(
      abs.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close_v2(db);
    return Status::InvalidArgument("sqlite:" + abs + ": cannot open: " + msg);
  }
  auto store = std::make_unique<SqliteStore>(db, abs);
  if (auto s = store->Configure(target_version); !s.ok()) return s;
  return std::unique_ptr<Store>(std::move(store));
}

Status ExecSqliteScript(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
      SQLITE_OK) {
    std::string msg = db != nullptr ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close_v2(db);
    return Status::Internal("sqlite:" + path + ": cannot open: " + msg);
  }
  sqlite3_busy_timeout(db, kBusyTimeoutMs);
  char* err = nullptr;
  const std::string script = "BEGIN IMMEDIATE;" + sql + ";COMMIT;";
  Status s;
  if (sqlite3_exec(db, script.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    s = Status::Internal("sqlite:" + path + ": " + (err != nullptr ? err : "error"));
    sqlite3_free(err);
    sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  sqlite3_close_v2(db);
  return s;
}

}  // namespace tessera::store::internal
