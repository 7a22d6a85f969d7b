// A PostgreSQL store written by the release at 29e72e9 (fixtures/release-29e72e9/postgresql: a
// plain-SQL pg_dump, made by fixtures/make_release_fixture.sh), loaded into a private server
// (pg_harness.h) and started on by today's server.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "pg_harness.h"
#include "release_fixture.h"

namespace tessera::store {
namespace {

namespace fs = std::filesystem;

TEST(ReleaseMigration, PostgresStoreOfTheReleaseServesToday) {
  std::string error;
  auto* server = tessera::testing::SharedPgServer(&error);
  ASSERT_NE(server, nullptr) << error;
  auto url = server->CreateUniqueDatabase("release");
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  // psql of the server's own version, stopping at the first error.
  const std::string log = ::testing::TempDir() + "/release_psql_" + std::to_string(getpid());
  const std::string psql = "/usr/lib/postgresql/" + server->version() + "/bin/psql";
  const std::string cmd = psql + " -X -q -v ON_ERROR_STOP=1 -d '" + *url + "' -f '" +
                          testing::ReleaseFixtureDir() + "/postgresql/tessera.sql' >'" + log +
                          "' 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd << " failed; see " << log;
  fs::remove(log);

  const std::string data = ::testing::TempDir() + "/release_pg_data_" + std::to_string(getpid());
  fs::remove_all(data);
  fs::create_directories(data);
  testing::CheckReleaseStore(*url, data, "postgresql");
  fs::remove_all(data);
}

}  // namespace
}  // namespace tessera::store
