// The store suite against SQLite, plus URL handling that needs no server.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "store/internal.h"
#include "store/sqlite_progress.h"
#include "store/store.h"
#include "store_suite.h"

namespace tessera::store {
namespace {

INSTANTIATE_TEST_SUITE_P(Sqlite, StoreSuite, ::testing::Values(std::string("sqlite")));

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/tessera-store-url-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// SQLite's plan for `sql` on the store at `path`: one line a step ("SEARCH jobs USING INDEX ...").
std::string QueryPlan(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  std::string plan;
  if (sqlite3_open(path.c_str(), &db) == SQLITE_OK) {
    sqlite3_stmt* q = nullptr;
    if (sqlite3_prepare_v2(db, ("EXPLAIN QUERY PLAN " + sql).c_str(), -1, &q, nullptr) !=
        SQLITE_OK) {
      plan = std::string("cannot prepare: ") + sqlite3_errmsg(db);
    }
    while (q != nullptr && sqlite3_step(q) == SQLITE_ROW)
      plan += std::string(reinterpret_cast<const char*>(sqlite3_column_text(q, 3))) + "\n";
    sqlite3_finalize(q);
  }
  sqlite3_close(db);
  return plan;
}

// The red team's keyed submissions ran at 64/s against 2,000/s without a key: the lookup by
// Idempotency-Key scanned the jobs table. The plan SQLite makes for the store's condition uses the
// partial index.
TEST(SqliteStore, TheIdempotencyKeyLookupUsesItsIndex) {
  TempDir dir;
  const std::string path = dir.path() + "/t.db";
  ASSERT_TRUE(Store::Open(path).ok());
  const std::string plan =
      QueryPlan(path, std::string("SELECT id FROM jobs WHERE ") + internal::kIdempotencyKeyWhere +
                          " ORDER BY submit_ms LIMIT 1");
  EXPECT_NE(plan.find("USING INDEX jobs_idem"), std::string::npos) << plan;
  EXPECT_EQ(plan.find("SCAN jobs\n"), std::string::npos) << plan;
}

// A list of ended jobs walks the partial index of the ended ones in submit order: it reads no
// live job (100,000 of them after served_cycle_bench's cycle, where the dashboard's list of 500
// jobs read them all).
TEST(SqliteStore, TheListOfEndedJobsUsesItsIndex) {
  TempDir dir;
  const std::string path = dir.path() + "/t.db";
  ASSERT_TRUE(Store::Open(path).ok());
  const std::string plan = QueryPlan(path, std::string("SELECT ") + internal::kJobColumns +
                                               " FROM jobs WHERE " + internal::kEndedJobListWhere);
  EXPECT_NE(plan.find("jobs_ended_submit"), std::string::npos) << plan;
  EXPECT_EQ(plan.find("TEMP B-TREE"), std::string::npos) << "sorted, not read in order: " << plan;
}

// While job progress is unfolded (right after a cycle), a list of ended jobs reads the ended
// rows by their index and the log's ended progress, not every job: it read all 100,000 jobs
// after served_cycle_bench's cycle (0.17-0.19 s in store_bench --list-jobs, 3 ms once folded).
TEST(SqliteStore, AListOfEndedJobsReadsNoLiveJobWhileProgressIsUnfolded) {
  TempDir dir;
  const std::string path = dir.path() + "/t.db";
  ASSERT_TRUE(Store::Open(path).ok());
  const std::string plan =
      QueryPlan(path, internal::ProgressLog::ListSql(/*pending=*/true, /*ended_only=*/true));
  EXPECT_NE(plan.find("jobs_ended_submit"), std::string::npos) << plan;
  EXPECT_EQ(plan.find("SCAN j\n"), std::string::npos) << "reads every job: " << plan;
  EXPECT_EQ(plan.find("SCAN j USING"), std::string::npos) << "reads every job: " << plan;
}

// A fold (a step of Tidy, or a commit past the log's bound) reads its slice of the progress log
// by the primary key's range, in proportion to the slice. By the (id, seq) index, its GROUP BY
// walked the whole log: a step of 4,096 rows took 25-47 ms with 80,000 rows in the log.
TEST(SqliteStore, AFoldReadsItsSliceOfTheProgressLogNotTheWholeLog) {
  TempDir dir;
  const std::string path = dir.path() + "/t.db";
  ASSERT_TRUE(Store::Open(path).ok());
  const std::string plan = QueryPlan(path, internal::kLatestProgressBelow);
  EXPECT_NE(plan.find("SEARCH job_progress USING INTEGER PRIMARY KEY (rowid<?)"), std::string::npos)
      << plan;
  EXPECT_EQ(plan.find("job_progress_id"), std::string::npos) << "walks the index: " << plan;
}

// A burst of commits is not slowed by copying the write-ahead log into the database: a commit
// only appends to the log, and Tidy (the commit writer calls it once its queue is empty) copies
// it. The copy used to run inside whichever commit crossed 1,000 pages of log.
TEST(SqliteStore, TheLogIsCopiedIntoTheDatabaseByTidyNotByACommit) {
  TempDir dir;
  const std::string path = dir.path() + "/t.db";
  auto s = Store::Open(path);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const auto size = [&] { return std::filesystem::file_size(path); };
  const uintmax_t empty = size();
  // About 3,000 pages of log in three commits, each past SQLite's own 1,000-page threshold.
  const std::string data = "{\"pad\":\"" + std::string(4000, 'x') + "\"}";
  for (int c = 0; c < 3; ++c) {
    std::vector<Event> events;
    for (int i = 0; i < 1000; ++i) {
      Event e;
      e.time_ms = 1000 * c + i;
      e.actor = "engine";
      e.kind = "job.placed";
      e.subject = "j-" + std::to_string(1000 * c + i);
      e.data = data;
      events.push_back(e);
    }
    ASSERT_TRUE((*s)->Commit(events, {}, nullptr).ok());
  }
  EXPECT_LT(size(), empty + (uintmax_t{1} << 20)) << "the commits copied the log themselves";
  (*s)->Tidy();
  EXPECT_GT(size(), empty + (uintmax_t{8} << 20)) << "Tidy left the log uncopied";
  auto events = (*s)->ListEvents(0, 5000, {});
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(events->size(), 3000u);
}

// One integer a query on the file returns, read without Tessera.
int64_t RawInt(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  int64_t out = -1;
  if (sqlite3_open(path.c_str(), &db) == SQLITE_OK) {
    sqlite3_stmt* q = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &q, nullptr) == SQLITE_OK &&
        sqlite3_step(q) == SQLITE_ROW) {
      out = sqlite3_column_int64(q, 0);
    }
    sqlite3_finalize(q);
  }
  sqlite3_close(db);
  return out;
}

// A store with one job, j-1, submitted at 1.
class SqliteProgressTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = Store::Open(path_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
    ASSERT_TRUE(store_->Commit({}, {MakeJob("j-1", 1)}, nullptr).ok());
  }
  // j-1's progress: no spec, so an update.
  static JobRecord Progress(int64_t update_ms) {
    JobRecord j = MakeJob("j-1", 1);
    j.spec = "";
    j.state = "placed";
    j.update_ms = update_ms;
    return j;
  }

  TempDir dir_;
  const std::string path_ = dir_.path() + "/t.db";
  std::unique_ptr<Store> store_;
};

// A job's progress is appended to job_progress by its commit, leaving the job's row (and its
// page) alone; Tidy folds it into the row. A cycle's placements, written in place, rewrote
// ~57,000 pages scattered over the jobs table (served_cycle_bench).
TEST_F(SqliteProgressTest, ACommitAppendsJobProgressAndTidyFoldsItIntoTheRow) {
  ASSERT_TRUE(store_->Commit({}, {Progress(7)}, nullptr).ok());
  const std::string row = "SELECT update_ms FROM jobs WHERE id = 'j-1'";
  EXPECT_EQ(RawInt(path_, row), 1) << "the commit rewrote the row";
  EXPECT_EQ(RawInt(path_, "SELECT count(*) FROM job_progress"), 1);
  store_->Tidy();
  EXPECT_EQ(RawInt(path_, row), 7);
  EXPECT_EQ(RawInt(path_, "SELECT count(*) FROM job_progress"), 0);
}

// A writer never idle (Tidy never runs) keeps the log bounded: a commit that leaves it past
// 131,072 rows folds it back to a slice (4,096 rows) below, so that past the bound each commit
// folds about what it appended, a slice at a time. It used to fold 16,384 rows at once.
TEST_F(SqliteProgressTest, PastItsBoundTheProgressLogIsFoldedBackBelowIt) {
  using internal::ProgressLog;
  const auto progress_rows = [&] { return RawInt(path_, "SELECT count(*) FROM job_progress"); };
  const auto row = [&] { return RawInt(path_, "SELECT update_ms FROM jobs WHERE id = 'j-1'"); };
  constexpr int64_t kBelow = ProgressLog::kBound - ProgressLog::kTidySlice;
  std::vector<JobRecord> updates;
  for (int i = 0; i < 140'000; ++i) updates.push_back(Progress(10 + i));
  ASSERT_TRUE(store_->Commit({}, updates, nullptr).ok());
  EXPECT_EQ(progress_rows(), kBelow);
  EXPECT_EQ(row(), 10 + (140'000 - kBelow) - 1)
      << "the row takes the latest progress of the slice folded";
  auto got = store_->GetJob("j-1");
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ((*got)->update_ms, 10 + 139'999) << "a read finds the latest, folded or not";
  // Below the bound, a commit folds nothing; the one that passes it folds back below it.
  ASSERT_TRUE(store_->Commit({}, {Progress(200'000)}, nullptr).ok());
  EXPECT_EQ(progress_rows(), kBelow + 1);
  updates.assign(ProgressLog::kTidySlice, Progress(300'000));
  ASSERT_TRUE(store_->Commit({}, updates, nullptr).ok());
  EXPECT_EQ(progress_rows(), kBelow);
}

// A list of jobs (the dashboard's, GET /v1/jobs) reads the progress not yet folded; it writes
// nothing, so it is served while the file cannot be written: here another connection holds the
// write lock (a disk full or read-only alike). It used to fold first, and waited out the busy
// timeout (5 s) to fail.
TEST_F(SqliteProgressTest, AListOfJobsReadsTheProgressLogAndWritesNothing) {
  JobRecord ended = Progress(9);
  ended.state = "succeeded";
  ended.exit_code = 0;
  ASSERT_TRUE(store_->Commit({}, {Progress(7)}, nullptr).ok());
  ASSERT_TRUE(store_->Commit({}, {MakeJob("j-2", 2)}, nullptr).ok());
  ASSERT_TRUE(store_->Commit({}, {ended}, nullptr).ok());
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  auto all = store_->ListJobs("", 10);
  auto done = store_->ListJobs("succeeded", 10);
  auto pending = store_->ListJobs("pending", 10);
  sqlite3_exec(other, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(other);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].id, "j-2") << "newest first";
  EXPECT_EQ((*all)[0].state, "pending");
  EXPECT_EQ((*all)[1].state, "succeeded");
  EXPECT_EQ((*all)[1].update_ms, 9);
  ASSERT_TRUE((*all)[1].exit_code.has_value());
  EXPECT_EQ(*(*all)[1].exit_code, 0);
  EXPECT_EQ((*all)[0].spec, MakeJob("j-2", 2).spec) << "the columns progress leaves are the row's";
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  ASSERT_EQ(done->size(), 1u) << "the state filter goes by the latest progress";
  EXPECT_EQ((*done)[0].id, "j-1");
  ASSERT_TRUE(pending.ok()) << pending.status().ToString();
  ASSERT_EQ(pending->size(), 1u) << "j-1's row still says pending; its progress does not";
  EXPECT_EQ((*pending)[0].id, "j-2");
  EXPECT_EQ(RawInt(path_, "SELECT count(*) FROM job_progress"), 2) << "the list folded the log";
}

// Two stores on one file (a standby that takes over, a reload beside a running engine): each
// finds the progress the other appended or folded. A store counted the log when it opened, and
// then trusted its count: a standby opened before the leader's last commits loaded the jobs'
// older rows on taking over, and a store whose rows another folded looped in Tidy.
TEST_F(SqliteProgressTest, AStoreFindsTheProgressAnotherStoreOnTheFileAppendedOrFolded) {
  auto opened = Store::Open(path_);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::unique_ptr<Store> other = std::move(*opened);  // opened before the progress
  ASSERT_TRUE(store_->Commit({}, {Progress(7)}, nullptr).ok());
  auto one = other->GetJob("j-1");
  ASSERT_TRUE(one.ok() && one->has_value());
  EXPECT_EQ((*one)->update_ms, 7);
  auto listed = other->ListJobs("", 10);
  ASSERT_TRUE(listed.ok() && listed->size() == 1u);
  EXPECT_EQ((*listed)[0].update_ms, 7);
  auto live = other->LoadLiveJobs();  // folds, from the other store
  ASSERT_TRUE(live.ok() && live->size() == 1u);
  EXPECT_EQ((*live)[0].update_ms, 7) << "the jobs' rows as they were before the progress";
  EXPECT_EQ(RawInt(path_, "SELECT count(*) FROM job_progress"), 0);
  int steps = 0;
  while (store_->Tidy() && steps < 10) ++steps;
  EXPECT_LT(steps, 10) << "Tidy went on folding what the other store had folded";
  auto mine = store_->GetJob("j-1");
  ASSERT_TRUE(mine.ok() && mine->has_value());
  EXPECT_EQ((*mine)->update_ms, 7);
}

// Tidy folds the log a slice a call (4,096 rows), then copies the write-ahead log in a call of its
// own, saying whether more is left, so that the commit writer can write what comes between two
// steps; the rows end with the latest progress.
TEST_F(SqliteProgressTest, TidyFoldsTheProgressLogAStepACall) {
  std::vector<JobRecord> updates;
  for (int i = 0; i < 10'000; ++i) updates.push_back(Progress(10 + i));
  ASSERT_TRUE(store_->Commit({}, updates, nullptr).ok());
  EXPECT_TRUE(store_->Tidy());
  EXPECT_EQ(RawInt(path_, "SELECT count(*) FROM job_progress"), 10'000 - 4'096);
  EXPECT_EQ(RawInt(path_, "SELECT update_ms FROM jobs WHERE id = 'j-1'"), 10 + 4'095);
  int more = 0;  // the other two slices, and the write-ahead log's copy if it is long enough
  while (store_->Tidy()) ++more;
  EXPECT_GE(more, 1);
  EXPECT_LE(more, 2);
  EXPECT_EQ(RawInt(path_, "SELECT count(*) FROM job_progress"), 0);
  EXPECT_EQ(RawInt(path_, "SELECT update_ms FROM jobs WHERE id = 'j-1'"), 10 + 9'999);
  EXPECT_FALSE(store_->Tidy()) << "nothing left";
}

// The database holds commands and environments: its files are its owner's alone, new or old.
TEST(SqliteStore, TheDatabaseAndItsWalAreTheOwnersAlone) {
  TempDir dir;
  const std::string path = dir.path() + "/t.db";
  umask(022);
  {
    auto s = Store::Open(path);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE((*s)->PutSetting("k", "v").ok());
    for (const char* suffix : {"", "-wal"}) {
      struct stat st {};
      ASSERT_EQ(stat((path + suffix).c_str(), &st), 0) << suffix;
      EXPECT_EQ(st.st_mode & 0777, 0600u) << path + suffix;
    }
  }
  chmod(path.c_str(), 0644);  // made by an older Tessera
  ASSERT_TRUE(Store::Open(path).ok());
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(StoreUrl, EmptyUrlIsRefused) {
  auto s = Store::Open("");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("empty"), std::string::npos) << s.status().message();
}

TEST(StoreUrl, SqlitePrefixWithoutPathIsRefused) {
  auto s = Store::Open("sqlite:");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("'sqlite:'"), std::string::npos) << s.status().message();
}

TEST(StoreUrl, UnknownSchemeIsNamed) {
  auto s = Store::Open("mysql://user:secret@db/tessera");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("unsupported scheme 'mysql'"), std::string::npos)
      << s.status().message();
  EXPECT_EQ(s.status().message().find("secret"), std::string::npos) << "password leaked";
}

TEST(StoreUrl, PostgresWithoutTargetIsRefused) {
  auto s = Store::Open("postgresql://");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
}

TEST(StoreUrl, MissingDirectoryIsNamed) {
  auto s = Store::Open("/nonexistent-dir-for-tessera/sub/tessera.db");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("/nonexistent-dir-for-tessera/sub"), std::string::npos)
      << s.status().message();
}

TEST(StoreUrl, FileThatIsNotADatabaseIsRefused) {
  TempDir dir;
  const std::string path = dir.path() + "/notes.txt";
  {
    std::ofstream out(path);
    out << "these are not the droids you are looking for, this is plain text and long enough "
           "to fill a database header of one hundred bytes easily, yes indeed it is.\n";
  }
  auto s = Store::Open("sqlite:" + path);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find(path), std::string::npos) << s.status().message();
  EXPECT_NE(s.status().message().find("not a database"), std::string::npos) << s.status().message();
}

TEST(StoreUrl, PlainPathAndSqlitePrefixOpenTheSameFile) {
  TempDir dir;
  const std::string path = dir.path() + "/t.db";
  {
    auto a = Store::Open(path);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    ASSERT_TRUE((*a)->PutSetting("k", "v").ok());
    EXPECT_EQ((*a)->Describe(), "sqlite:" + path);
  }
  auto b = Store::Open("sqlite:" + path);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  auto v = (*b)->GetSetting("k");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->value_or("-"), "v");
}

TEST(StoreUrl, UnreachablePostgresNamesTheUrlWithoutPassword) {
  // Port 1 on loopback: nothing listens there, the connection is refused at once.
  auto s = Store::Open("postgresql://tessera:hunter2@127.0.0.1:1/tessera?connect_timeout=2");
  ASSERT_FALSE(s.ok());
  const std::string& m = s.status().message();
  EXPECT_NE(m.find("postgresql://tessera:***@127.0.0.1:1/tessera"), std::string::npos) << m;
  EXPECT_NE(m.find("cannot connect"), std::string::npos) << m;
  EXPECT_EQ(m.find("hunter2"), std::string::npos) << "password leaked: " << m;
}

TEST(StoreUrl, RedactsOnlyThePassword) {
  using internal::RedactUrl;
  EXPECT_EQ(RedactUrl("postgresql://u:p@h:5432/db"), "postgresql://u:***@h:5432/db");
  EXPECT_EQ(RedactUrl("postgresql://u@h:5432/db"), "postgresql://u@h:5432/db");
  EXPECT_EQ(RedactUrl("postgresql://h:5432/db"), "postgresql://h:5432/db");
  EXPECT_EQ(RedactUrl("postgres://h/db?x=a@b"), "postgres://h/db?x=a@b");
  EXPECT_EQ(RedactUrl("/var/lib/tessera.db"), "/var/lib/tessera.db");
}

TEST(StoreUrl, OpenAtUnknownVersionIsRefused) {
  TempDir dir;
  EXPECT_FALSE(internal::OpenAtVersion(dir.path() + "/t.db", 0).ok());
  EXPECT_FALSE(
      internal::OpenAtVersion(dir.path() + "/t.db", Store::LatestSchemaVersion() + 1).ok());
}

}  // namespace
}  // namespace tessera::store
