// A data directory written by the release at 29e72e9 (fixtures/release-29e72e9/sqlite: its
// SQLite store, made by fixtures/make_release_fixture.sh), started on by today's server.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "release_fixture.h"
#include "store/store.h"

namespace tessera::store {
namespace {

namespace fs = std::filesystem;

// A copy of the fixture's data directory in a fresh temporary one (the fixture is never written).
std::string CopyOfReleaseDataDir() {
  const std::string dir = ::testing::TempDir() + "/release_datadir_" + std::to_string(getpid()) +
                          "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(testing::ReleaseFixtureDir() + "/sqlite/tessera.db", dir + "/tessera.db");
  return dir;
}

// The schema version a file records, read without Tessera (no migration runs).
int RawSchemaVersion(const std::string& path) {
  sqlite3* db = nullptr;
  int version = -1;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* q = nullptr;
    if (sqlite3_prepare_v2(db, "SELECT version FROM schema_version", -1, &q, nullptr) ==
            SQLITE_OK &&
        sqlite3_step(q) == SQLITE_ROW) {
      version = sqlite3_column_int(q, 0);
    }
    sqlite3_finalize(q);
  }
  sqlite3_close(db);
  return version;
}

// (On a copy: even a read-only open of a WAL-mode file makes -shm and -wal files beside it.)
TEST(ReleaseMigration, TheFixtureIsTheReleasesSchema) {
  const std::string dir = CopyOfReleaseDataDir();
  EXPECT_EQ(RawSchemaVersion(dir + "/tessera.db"), 6);
  fs::remove_all(dir);
}

TEST(ReleaseMigration, SqliteDataDirectoryOfTheReleaseServesToday) {
  const std::string dir = CopyOfReleaseDataDir();
  testing::CheckReleaseStore(dir + "/tessera.db", dir, "sqlite");
  EXPECT_EQ(RawSchemaVersion(dir + "/tessera.db"), Store::LatestSchemaVersion());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tessera::store
