// Bounded memory and retention: ended jobs leave memory once durable (the newest thousand or so
// stay), and every view still finds them in the store; a restart loads only the live jobs and
// numbering continues; `retention` deletes what ended before the cut, and old events.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <thread>

#include "api/engine.h"
#include "support/config_builder.h"
#include "support/engine_fixture.h"

namespace tessera::api {
namespace {

// The config less its retention (set by each test).
tessera::testing::ConfigBuilder Config() {
  return tessera::testing::ConfigBuilder()
      .WithoutIdentity("agent")
      .User("bob", {"other"})
      .Group("research")
      .Group("other")
      .Profile("card", "gpus: 1, cpu: 1, memory: 1GiB, forms: [whole]")
      .Queue("train", "card", {"research", "other"});
}

// A job id's number ("j-12": 12), its place in submission order.
int64_t Number(const Json& id) { return std::stoll(id.get<std::string>().substr(2)); }

class RetentionTest : public testing::EngineFixture {
 protected:
  void SetUp() override {
    now_ = 1'000'000'000'000;
    Start("retention", Config().Set("retention", "1h").Yaml());
  }
  void TearDown() override {
    engine_.reset();
    std::filesystem::remove_all(dir_);
  }
  const Identity& admin() { return Who("admin"); }
  const Identity& alice() { return Who("alice"); }
  const Identity& bob() { return Who("bob"); }
  std::string Submit(const Identity& who) {
    auto r = engine_->Submit(who, {{"queue", "train"}, {"command", {"true"}}});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? (*r)["id"].get<std::string>() : "";
  }
  int64_t InMemory() { return engine_->views().Health()["jobs_in_memory"].get<int64_t>(); }
};

TEST_F(RetentionTest, EndedJobsLeaveMemoryButNotTheViews) {
  // No nodes: every job waits; cancelling ends it. Eight threads, so that commits are shared.
  std::vector<std::string> ids(3000);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = t; i < 3000; i += 8) {
        ids[i] = Submit(i % 2 ? alice() : bob());
        EXPECT_TRUE(engine_->Cancel(admin(), ids[i]).ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  // Submission order is id order (the clock stands still here).
  std::sort(ids.begin(), ids.end(), [](const std::string& a, const std::string& b) {
    return std::stoll(a.substr(2)) < std::stoll(b.substr(2));
  });
  const std::string live = Submit(alice());
  EXPECT_LE(InMemory(), 2 * 1000 + 1) << "ended jobs stay in memory";
  EXPECT_GE(InMemory(), 1000 + 1);
  // The oldest, out of memory, is still there for whoever may see it.
  auto first = engine_->views().GetJob(admin(), ids.front());
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ((*first)["state"], "cancelled");
  const Identity& other = (*first)["identity"] == "bob" ? alice() : bob();
  EXPECT_EQ(engine_->views().GetJob(other, ids.front()).status().code(), StatusCode::kNotFound);
  // A short list: memory's newest, in order (its walk stops once it has them).
  auto newest = engine_->views().ListJobs(admin(), "", 7);
  ASSERT_TRUE(newest.ok());
  ASSERT_EQ((*newest)["jobs"].size(), 7u);
  EXPECT_EQ((*newest)["jobs"][0]["id"], live);
  for (size_t k = 1; k < 7; ++k) EXPECT_EQ((*newest)["jobs"][k]["id"], ids[3000 - k]) << k;
  // Listing: newest first over memory and store together, each job once, by state.
  auto all = engine_->views().ListJobs(admin(), "", 100000);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ((*all)["jobs"].size(), 3001u);
  EXPECT_EQ((*all)["jobs"][0]["id"], live);
  EXPECT_EQ((*all)["jobs"][3000]["id"], ids.front());
  std::set<std::string> seen;
  for (const auto& j : (*all)["jobs"]) seen.insert(j["id"].get<std::string>());
  EXPECT_EQ(seen.size(), 3001u);
  // Newest first throughout, memory's and the store's alike: submitted in the same millisecond
  // (the clock stands still), j-10 is newer than j-9.
  for (size_t k = 1; k < 3001; ++k) {
    ASSERT_LT(Number((*all)["jobs"][k]["id"]), Number((*all)["jobs"][k - 1]["id"])) << k;
  }
  auto cancelled = engine_->views().ListJobs(admin(), "cancelled", 5);
  ASSERT_TRUE(cancelled.ok());
  ASSERT_EQ((*cancelled)["jobs"].size(), 5u);
  EXPECT_EQ((*cancelled)["jobs"][0]["id"], ids.back());
  auto mine = engine_->views().ListJobs(alice(), "cancelled", 100000);
  ASSERT_TRUE(mine.ok());
  EXPECT_EQ((*mine)["jobs"].size(), 1500u);
  auto pending = engine_->views().ListJobs(admin(), "pending", 10);
  ASSERT_TRUE(pending.ok());
  ASSERT_EQ((*pending)["jobs"].size(), 1u);
  // A restart loads the live job only; numbering continues after the highest stored id.
  Reopen();
  EXPECT_EQ(InMemory(), 1);
  EXPECT_EQ((*engine_->views().GetJob(admin(), ids.front()))["state"], "cancelled");
  const std::string next = Submit(alice());
  EXPECT_EQ(next, "j-" + std::to_string(3002));
}

TEST_F(RetentionTest, RetentionDeletesWhatEndedBeforeTheCut) {
  const std::string old_job = Submit(alice());
  ASSERT_TRUE(engine_->Cancel(admin(), old_job).ok());
  const std::string waiting = Submit(alice());  // live: never pruned however old
  now_ += 2 * 3600 * 1000;                      // past the 1h retention
  const std::string recent = Submit(alice());
  ASSERT_TRUE(engine_->Cancel(admin(), recent).ok());
  ASSERT_TRUE(engine_->Tick().ok());
  Reopen();  // what the store holds now
  EXPECT_EQ(engine_->views().GetJob(admin(), old_job).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(engine_->views().GetJob(admin(), waiting).ok());
  EXPECT_EQ((*engine_->views().GetJob(admin(), recent))["state"], "cancelled");
  auto events = engine_->views().Events(admin(), 0, 1000, {});
  ASSERT_TRUE(events.ok());
  for (const auto& e : (*events)["events"]) {
    EXPECT_GE(e["time_ms"].get<int64_t>(), now_ - 3600 * 1000)
        << "an event older than the retention: " << e.dump();
  }
  EXPECT_FALSE((*events)["events"].empty());
}

// auth.failed events (up to 20 a second from anyone) are kept for auth_failed_retention (30 days
// by default) even where nothing else is ever pruned; other events stay.
TEST_F(RetentionTest, FailedAuthenticationsAreKeptForTheirOwnTimeOnly) {
  auto c = ParseConfig(Config().Set("auth_failed_retention", "1d").Yaml());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->history.retention_ms, 0);
  config_ = *c;
  Reopen();
  engine_->audit().AuthFailure("GET", "/v1/jobs", "unknown token");
  const std::string job = Submit(alice());
  ASSERT_TRUE(engine_->Tick().ok());
  now_ += 2 * 24 * 3600 * 1000LL;  // two days on
  engine_->audit().AuthFailure("GET", "/v1/nodes", "unknown token");
  ASSERT_TRUE(engine_->Tick().ok());
  auto events = engine_->views().Events(admin(), 0, 1000, {});
  ASSERT_TRUE(events.ok());
  std::vector<std::string> failed;
  bool submitted = false;
  for (const auto& e : (*events)["events"]) {
    if (e["kind"] == "auth.failed") failed.push_back(e["subject"]);
    submitted = submitted || (e["kind"] == "job.submitted" && e["subject"] == job);
  }
  EXPECT_EQ(failed, std::vector<std::string>{"/v1/nodes"}) << events->dump();
  EXPECT_TRUE(submitted) << "an event of another kind was pruned without a retention";
  EXPECT_EQ(ParseConfig(Config().Set("retention", "1h").Set("auth_failed_retention", "1d").Yaml())
                .value()
                .history.auth_failed_retention_ms,
            24 * 3600 * 1000LL);
  EXPECT_EQ(
      ParseConfig(Config().Set("retention", "1h").Yaml()).value().history.auth_failed_retention_ms,
      30 * 24 * 3600 * 1000LL);
}

TEST(RetentionConfig, ABadRetentionIsRefusedNamed) {
  auto c = ParseConfig(Config().Set("retention", "forever").Yaml());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("retention"), std::string::npos) << c.status().message();
}

// Found by fuzz/config_fuzz: a duration or size too large for int64 once in ms or bytes
// overflowed; each is refused, naming its field.
TEST(RetentionConfig, TooLargeForMillisecondsOrBytesIsRefusedNamed) {
  for (const std::string field :
       {"retention: 1099511627776d", "retention: 36501d", "max_output: 9999999TiB"}) {
    auto c = ParseConfig(
        Config().Set(field.substr(0, field.find(':')), field.substr(field.find(':') + 2)).Yaml());
    ASSERT_FALSE(c.ok()) << field;
    EXPECT_NE(c.status().message().find(field.substr(0, field.find(':'))), std::string::npos)
        << c.status().message();
  }
  // The longest duration of the one grammar (model/duration.h): 36500 days.
  auto c = ParseConfig(Config().Set("retention", "36500d").Yaml());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->history.retention_ms, int64_t{36500} * 86400000);
}

}  // namespace
}  // namespace tessera::api
