// The store suite against a private PostgreSQL server (tests/store/pg_harness.h), started once
// for the process.
#include <gtest/gtest.h>

#include "pg_harness.h"
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

}  // namespace
}  // namespace tessera::store
