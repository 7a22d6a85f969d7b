// The store suite against a private PostgreSQL server (tests/store/pg_harness.h), started once
// for the process.
#include <gtest/gtest.h>

#include <pqxx/pqxx>
#include <string>

#include "pg_harness.h"
#include "store/internal.h"
#include "store/store.h"
#include "store_suite.h"

namespace tessera::store {
namespace {

INSTANTIATE_TEST_SUITE_P(Postgres, StoreSuite, ::testing::Values(std::string("postgresql")));

TEST(PgHarness, ServerStartsAndCreatesDatabases) {
  std::string error;
  auto* server = testing::SharedPgServer(&error);
  ASSERT_NE(server, nullptr) << error;
  auto url = server->CreateDatabase("harness_check");
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  EXPECT_EQ(*url, server->Url("harness_check"));
  EXPECT_FALSE(server->CreateDatabase("bad name;").ok());
  auto store = Store::Open(*url);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ((*store)->Describe(), *url);
}

TEST(PgHarness, MissingDatabaseIsNamed) {
  std::string error;
  auto* server = testing::SharedPgServer(&error);
  ASSERT_NE(server, nullptr) << error;
  auto store = Store::Open(server->Url("no_such_db"));
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("no_such_db"), std::string::npos)
      << store.status().message();
}

// PostgreSQL's plan for `sql` ($1 and $2 given as the literals `state` and `limit`), one line a
// step.
std::string Plan(const std::string& url, std::string sql, const std::string& state, int limit) {
  for (const auto& [param, value] : {std::pair<std::string, std::string>{"$1", "'" + state + "'"},
                                     {"$2", std::to_string(limit)}}) {
    for (size_t at = sql.find(param); at != std::string::npos; at = sql.find(param, at))
      sql.replace(at, param.size(), value);
  }
  pqxx::connection c(url);
  pqxx::nontransaction t(c);
  std::string plan;
  for (const auto& row : t.exec("EXPLAIN " + sql)) plan += row[0].as<std::string>() + "\n";
  return plan;
}

// The dashboard's lists walk an index in submission order (migration 9's expressions,
// internal::kNewestFirst) and stop at their limit: no sort of every job, whatever state is asked.
TEST(PgStore, ListsOfTheNewestJobsWalkTheirIndexes) {
  std::string error;
  auto* server = testing::SharedPgServer(&error);
  ASSERT_NE(server, nullptr) << error;
  auto url = server->CreateDatabase("list_plans");
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  ASSERT_TRUE(Store::Open(*url).ok());
  // 100,000 jobs, a fifth of them ended, ten to a millisecond.
  ASSERT_TRUE(internal::ExecSql(
                  *url,
                  "INSERT INTO jobs (id, queue, identity, group_name, state, spec, placement, "
                  "submit_ms, update_ms, ended_ms) SELECT 'j-' || g, 'q', 'alice', 'g', CASE WHEN "
                  "g % 5 = 0 THEN 'succeeded' ELSE 'running' END, '{}', '{}', 1000000 + g / 10, "
                  "0, CASE WHEN g % 5 = 0 THEN 5 ELSE 0 END FROM generate_series(1, 100000) g;"
                  "ANALYZE jobs;")
                  .ok());
  const std::string columns = std::string("SELECT ") + internal::kJobColumns + " FROM jobs WHERE ";
  for (const std::string state : {"", "succeeded"}) {
    SCOPED_TRACE("state '" + state + "'");
    const std::string ended = Plan(*url, columns + internal::kEndedJobListWhere, state, 1500);
    EXPECT_NE(ended.find("Index Scan Backward using jobs_ended_submit"), std::string::npos)
        << ended;
    EXPECT_EQ(ended.find("Sort"), std::string::npos) << ended;
    const std::string all = Plan(
        *url, columns + "($1 = '' OR state = $1) ORDER BY " + internal::kNewestFirst + " LIMIT $2",
        state, 500);
    EXPECT_NE(all.find("Index Scan Backward using jobs_submit"), std::string::npos) << all;
    EXPECT_EQ(all.find("Sort"), std::string::npos) << all;
  }
}

}  // namespace
}  // namespace tessera::store
