// The engine against a real SQLite store, with an injected clock: job lists, idempotency keys,
// the accounts jobs run as, per-identity limits, names, events, order watches and cycle budgets.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

#include "api/engine.h"
#include "api/submit_request.h"
#include "engine_fixture.h"
#include "engine_test.h"
#include "model/agent_protocol.h"
#include "support/wait.h"
#include "test_dir.h"

namespace tessera::api {
namespace {

using engine_test::EngineTest;
using engine_test::kConfig;

// Job lists are cut from a cached rendering of 100 or 1000 (or rendered whole past 1000): any
// limit gives the newest jobs first, the same whichever rendering it came from.
TEST_F(EngineTest, JobListsOfAnyLimitAreTheNewestFirst) {
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i)
    ids.push_back(Submit("alice", {{"queue", "training"}, {"command", {"true"}}})["id"]);
  auto names = [&](int limit) {
    std::vector<std::string> out;
    const Result<Json> list = engine_->views().ListJobs(Who("admin"), "", limit);
    if (!list.ok()) return out;
    for (const auto& j : (*list)["jobs"]) out.push_back(j["id"]);
    return out;
  };
  const std::vector<std::string> newest_two = {ids[4], ids[3]};
  EXPECT_EQ(names(2), newest_two);
  EXPECT_EQ(names(100).size(), 5u);
  EXPECT_EQ(names(2), newest_two) << "cut from the cached rendering of 100";
  EXPECT_EQ(names(500).size(), 5u);
  EXPECT_EQ(names(5000).size(), 5u);
  EXPECT_EQ(names(0).size(), 0u);
}

// A state filter that names no state is refused, naming it and the states there are: an empty
// list would read as "no such jobs" when the filter was a typo.
TEST_F(EngineTest, AJobListsStateFilterThatIsNoStateIsRefusedByName) {
  Submit("alice", {{"queue", "training"}, {"command", {"true"}}});
  const Result<Json> bad = engine_->views().ListJobs(Who("admin"), "runing", 100);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'state'"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("'runing'"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("running"), std::string::npos) << bad.status().message();
  const Result<Json> good = engine_->views().ListJobs(Who("admin"), "pending", 100);
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ((*good)["jobs"].size(), 1u);
}

// A key names one request: reused for a different one, it is refused (409), naming the key and
// the job it made, in memory and from the store after a restart. It once answered with the first
// job, and the second request was lost without a word.
TEST_F(EngineTest, AnIdempotencyKeyReusedForADifferentRequestIsRefused) {
  const Json body = {{"queue", "training"}, {"command", {"true"}}};
  const Json other = {{"queue", "training"}, {"command", {"echo", "different"}}};
  bool replayed = false;
  auto first = engine_->Submit(Who("alice"), body, "key-9", &replayed);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const std::string id = (*first)["id"];
  for (int restarted = 0; restarted < 2; ++restarted) {
    auto again = engine_->Submit(Who("alice"), other, "key-9", &replayed);
    ASSERT_FALSE(again.ok()) << "restarted " << restarted << ": " << again->dump();
    EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(again.status().message().find("'key-9'"), std::string::npos)
        << again.status().message();
    EXPECT_NE(again.status().message().find(id), std::string::npos) << again.status().message();
    // The same request again is still the first job's answer.
    auto same = engine_->Submit(Who("alice"), body, "key-9", &replayed);
    ASSERT_TRUE(same.ok()) << same.status().ToString();
    EXPECT_TRUE(replayed);
    EXPECT_EQ((*same)["id"], id);
    ASSERT_TRUE(engine_->Cancel(Who("alice"), id).ok() || restarted == 1);
    Reopen();
  }
  EXPECT_EQ((*engine_->views().ListJobs(Who("admin"), "", 100))["jobs"].size(), 1u);
  // Another queue with the very same spec is another request too (the queue and group are the
  // job's record, not its spec).
  const Json training = {{"queue", "training"}, {"class", "training"}, {"command", {"true"}}};
  const Json fragile = {{"queue", "fragile"}, {"class", "training"}, {"command", {"true"}}};
  auto t = engine_->Submit(Who("alice"), training, "key-10", &replayed);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto f = engine_->Submit(Who("alice"), fragile, "key-10", &replayed);
  ASSERT_FALSE(f.ok()) << f->dump();
  EXPECT_EQ(f.status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(EngineTest, ARepeatedIdempotencyKeyReturnsTheFirstJob) {
  const Json body = {{"queue", "training"}, {"command", {"true"}}};
  bool replayed = false;
  auto first = engine_->Submit(Who("alice"), body, "key-1", &replayed);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_FALSE(replayed);
  const std::string id = (*first)["id"];
  auto again = engine_->Submit(Who("alice"), body, "key-1", &replayed);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(replayed);
  EXPECT_EQ((*again)["id"], id);
  // Keys belong to their identity: bob's "key-1" is his own.
  replayed = false;
  auto bobs = engine_->Submit(Who("bob"), body, "key-1", &replayed);
  ASSERT_TRUE(bobs.ok());
  EXPECT_FALSE(replayed);
  EXPECT_NE((*bobs)["id"], id);
  auto bad = engine_->Submit(Who("alice"), body, "not a key", &replayed);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("Idempotency-Key"), std::string::npos);
  EXPECT_EQ((*engine_->views().ListJobs(Who("admin"), "", 100))["jobs"].size(), 2u);
  // Ended and not loaded after a restart: found in the store.
  ASSERT_TRUE(engine_->Cancel(Who("alice"), id).ok());
  Reopen();
  replayed = false;
  auto stored = engine_->Submit(Who("alice"), body, "key-1", &replayed);
  ASSERT_TRUE(stored.ok());
  EXPECT_TRUE(replayed);
  EXPECT_EQ((*stored)["id"], id);
  EXPECT_EQ((*stored)["state"], "cancelled");
  // After the window, the key makes a new job.
  now_ += kIdempotencyWindowMs + 1000;
  replayed = false;
  auto later = engine_->Submit(Who("alice"), body, "key-1", &replayed);
  ASSERT_TRUE(later.ok());
  EXPECT_FALSE(replayed);
  EXPECT_NE((*later)["id"], id);
}

TEST_F(EngineTest, JobsRunAsTheIdentitysAccountOrItsGroupsOrItsNameAndRootOnlyOnARunAsRootQueue) {
  const std::string text =
      std::string(kConfig) + "  - {name: ops, profile: train, groups: [prod], run_as_root: true}\n";
  auto c = ParseConfig(text);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  for (Identity& i : c->identities) {
    if (i.name == "alice") i.run_as = "alice-unix";
  }
  for (auto& g : c->policy.groups) {
    if (g.name == "prod") g.run_as = "prod-svc";
  }
  config_ = *c;
  Reopen();
  Register("n1", 4);
  const std::string a = Submit("alice", {{"queue", "training"}, {"command", {"true"}}})["id"];
  const std::string b = Submit("bob", {{"queue", "training"}, {"command", {"true"}}})["id"];
  const std::string k = Submit("carol", {{"queue", "training"}, {"command", {"true"}}})["id"];
  const std::string r = Submit("bob", {{"queue", "ops"}, {"command", {"true"}}})["id"];
  Json hb = Heartbeat("n1");
  ASSERT_EQ(hb["start"].size(), 4u) << hb.dump();
  std::map<std::string, std::string> run_as;
  for (const auto& s : hb["start"]) run_as[s["job"]] = s.value("run_as", "<none>");
  EXPECT_EQ(run_as[a], "alice-unix");  // the identity's own
  EXPECT_EQ(run_as[b], "prod-svc");    // bob has none: his group's
  EXPECT_EQ(run_as[k], "carol");       // neither: her own name, never the agent's account (root)
  EXPECT_EQ(run_as[r], "root");        // the run_as_root queue
  // Config: names are checked; root is never an identity's or a group's account.
  auto bad =
      ParseConfig(std::string(kConfig).replace(std::string(kConfig).find("{name: bob, role: user"),
                                               22, "{name: bob, run_as: 'x y', role: user"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("identities[2].run_as"), std::string::npos)
      << bad.status().message();
  for (const std::string root : {"run_as: root,", "run_as_root: true,"}) {
    auto refused = ParseConfig(
        std::string(kConfig).replace(std::string(kConfig).find("{name: bob, role: user"), 22,
                                     "{name: bob, " + root + " role: user"));
    ASSERT_FALSE(refused.ok()) << root;
    EXPECT_NE(refused.status().message().find("queue"), std::string::npos)
        << refused.status().message();
  }
  auto group_root = ParseConfig(std::string(kConfig).replace(
      std::string(kConfig).find("{name: prod}"), 12, "{name: prod, run_as: root}"));
  ASSERT_FALSE(group_root.ok());
  // An identity whose name is no account and that sets none: its submissions are refused.
  auto odd = ParseConfig(std::string(kConfig).replace(std::string(kConfig).find("{name: carol,"),
                                                      13, "{name: Carol.Smith,"));
  ASSERT_TRUE(odd.ok()) << odd.status().ToString();
  bool warned = false;
  for (const std::string& w : odd->warnings)
    warned = warned || w.find("'Carol.Smith' has no Unix account") != std::string::npos;
  EXPECT_TRUE(warned);
}

TEST_F(EngineTest, ConfigWarnsOfSharedAccountsAndAgentsForEveryNode) {
  auto c = ParseConfig(std::string(kConfig).replace(std::string(kConfig).find("{name: prod}"), 12,
                                                    "{name: prod, run_as: svc}"));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  std::string all;
  for (const std::string& w : c->warnings) all += w + "\n";
  EXPECT_NE(all.find("group 'prod' sets run_as 'svc' for all its members"), std::string::npos)
      << all;
  EXPECT_NE(all.find("identity 'agent' (agent) has no nodes"), std::string::npos) << all;
  EXPECT_EQ(all.find("'rack1' (agent) has no nodes"), std::string::npos) << all;
  auto shared = ParseConfig(std::string(kConfig).replace(std::string(kConfig).find("{name: carol,"),
                                                         13, "{name: carol, run_as: alice,"));
  ASSERT_TRUE(shared.ok());
  all.clear();
  for (const std::string& w : shared->warnings) all += w + "\n";
  EXPECT_NE(all.find("identities 'alice', 'carol' run their jobs as the one Unix account 'alice'"),
            std::string::npos)
      << all;
}

// One identity cannot flood the queue: past max_jobs_per_identity jobs not yet ended, its
// submissions are refused (429 over HTTP) until some end; other identities are not affected; the
// count survives a restart.
TEST_F(EngineTest, AnIdentityHasAtMostMaxJobsNotYetEnded) {
  auto c = ParseConfig(std::string(kConfig) + "max_jobs_per_identity: 2\n");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  config_ = *c;
  Reopen();
  const Json body = {{"queue", "training"}, {"command", {"true"}}};
  const std::string a = Submit("alice", body)["id"];
  ASSERT_FALSE(Submit("alice", body)["id"].get<std::string>().empty());
  auto third = engine_->Submit(Who("alice"), body);
  EXPECT_EQ(third.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(third.status().message().find("max_jobs_per_identity"), std::string::npos)
      << third.status().message();
  EXPECT_TRUE(engine_->Submit(Who("carol"), body).ok());  // her own count
  Reopen();
  EXPECT_EQ(engine_->Submit(Who("alice"), body).status().code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(engine_->Cancel(Who("alice"), a).ok());
  EXPECT_TRUE(engine_->Submit(Who("alice"), body).ok()) << "an ended job makes room";
  EXPECT_EQ(engine_->Submit(Who("alice"), body).status().code(), StatusCode::kResourceExhausted);
  auto bad = ParseConfig(std::string(kConfig) + "max_jobs_per_identity: 0\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("max_jobs_per_identity"), std::string::npos);
}

// The red team: 3,000 waiting jobs of 254 KiB of environment each took 1.6 GB of the server (5.3
// GB at max_jobs_per_identity). The bytes of command and environment one identity's jobs not
// yet ended hold are bounded too (max_command_bytes_per_identity), counted again after a
// restart, and an ended job gives its bytes back.
TEST_F(EngineTest, AnIdentitysJobsHoldAtMostMaxCommandBytes) {
  auto c = ParseConfig(std::string(kConfig) + "max_command_bytes_per_identity: 1MiB\n");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  config_ = *c;
  Reopen();
  const Json body = {{"queue", "training"},
                     {"command", {"true"}},
                     {"env", {{"A", std::string(120000, 'x')}, {"B", std::string(120000, 'y')}}}};
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(Submit("alice", body)["id"]);
  auto fifth = engine_->Submit(Who("alice"), body);
  ASSERT_EQ(fifth.status().code(), StatusCode::kResourceExhausted) << fifth.status().ToString();
  EXPECT_NE(fifth.status().message().find("max_command_bytes_per_identity (1MiB)"),
            std::string::npos)
      << fifth.status().message();
  EXPECT_TRUE(engine_->Submit(Who("carol"), body).ok());  // her own count
  Reopen();
  EXPECT_EQ(engine_->Submit(Who("alice"), body).status().code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(engine_->Cancel(Who("alice"), ids[0]).ok());
  EXPECT_TRUE(engine_->Submit(Who("alice"), body).ok()) << "an ended job gives its bytes back";
  EXPECT_TRUE(engine_->Submit(Who("alice"), {{"queue", "training"}, {"command", {"true"}}}).ok())
      << "a small job still fits";
  auto bad = ParseConfig(std::string(kConfig) + "max_command_bytes_per_identity: 0B\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("max_command_bytes_per_identity"), std::string::npos);
}

TEST_F(EngineTest, NamesAndArgumentsThatCannotBeShownOrRunAsStoredAreRefused) {
  Register("n1", 1);
  std::string nul_arg = "a";
  nul_arg += '\0';
  nul_arg += "rm -rf";
  auto r = engine_->Submit(Who("alice"), {{"queue", "training"}, {"command", {"echo", nul_arg}}});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("argument 1 contains a NUL byte"), std::string::npos)
      << r.status().message();
  r = engine_->Submit(Who("alice"),
                      {{"queue", "training"}, {"command", {"true"}}, {"name", "\x1b]0;owned\x07"}});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("'name'"), std::string::npos) << r.status().message();
  // A node named with a terminal escape is refused at registration.
  auto reg = engine_->agents().RegisterNode(
      Who("admin"), {{"node", "n\x1b[2J"}, {"cpu_milli", 1000}, {"memory_mib", 1024}});
  EXPECT_EQ(reg.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(reg.status().message().find("printable ASCII"), std::string::npos)
      << reg.status().message();
}

TEST_F(EngineTest, EventsPageByCursorAndFilter) {
  Register("n1", 1);
  for (int i = 0; i < 5; ++i) Submit("alice", {{"queue", "notebooks"}, {"command", {"true"}}});
  Json p1 = *engine_->views().Events(Who("admin"), 0, 3, {});
  ASSERT_EQ(p1["events"].size(), 3u);
  Json p2 = *engine_->views().Events(Who("admin"), p1["next"], 3, {});
  EXPECT_GT(p2["events"][0]["seq"].get<int64_t>(), p1["events"][2]["seq"].get<int64_t>());
  Json submitted =
      *engine_->views().Events(Who("admin"), 0, 100, store::EventFilter{"job.submitted", "", ""});
  EXPECT_EQ(submitted["events"].size(), 5u);
  // bob sees none of alice's job events.
  Json bob = *engine_->views().Events(Who("bob"), 0, 100, store::EventFilter{"job.", "", ""});
  EXPECT_TRUE(bob["events"].empty());
  // Nor their numbers through the cursor (the red team): a filter for alice's job answered
  // "next" with the seq of its last event, one for no job with 0; bob learned which jobs and
  // identities exist and when another group's jobs changed. Both answer the same now.
  const std::string alices = submitted["events"][0]["subject"];
  Json by_job = *engine_->views().Events(Who("bob"), 0, 100, store::EventFilter{"", alices, ""});
  Json by_none = *engine_->views().Events(Who("bob"), 0, 100, store::EventFilter{"", "j-99", ""});
  Json by_actor = *engine_->views().Events(Who("bob"), 0, 100, store::EventFilter{"", "", "alice"});
  EXPECT_TRUE(by_job["events"].empty());
  EXPECT_EQ(by_job["next"], by_none["next"]);
  EXPECT_EQ(by_actor["next"], by_none["next"]);
  // And a poll from there misses nothing bob may see.
  Register("n2", 1);
  ASSERT_TRUE(engine_->Tick().ok());
  Json later = *engine_->views().Events(Who("bob"), by_none["next"], 100, {});
  ASSERT_FALSE(later["events"].empty());
  EXPECT_EQ(later["events"].back()["subject"], "n2");
}

// An agent's order watch (the long poll behind GET /v1/agent/orders) wakes as soon as a durable
// decision gives its node new orders (a start, a cancel), and not for what the node's own
// heartbeats changed; a newer watch answers the older with 0; other nodes' agents are refused.
TEST_F(EngineTest, AnOrderWatchWakesForNewOrdersOnly) {
  Register("n1", 1);
  std::mutex m;
  std::vector<int64_t> woke;
  auto watch = [&](int64_t after) {
    return engine_->agents().WatchOrders(Who("agent"), "n1", after, [&](int64_t s) {
      std::lock_guard<std::mutex> g(m);
      woke.push_back(s);
    });
  };
  auto woken = [&](size_t n) {  // waits up to 2 s for the n-th call
    int64_t seq = -1;
    tessera::testing::WaitFor(
        [&] {
          std::lock_guard<std::mutex> g(m);
          if (woke.size() < n) return false;
          seq = woke[n - 1];
          return true;
        },
        std::chrono::seconds(2));
    return seq;
  };
  Json hb = Heartbeat("n1");
  ASSERT_TRUE(hb["seq"].is_number_integer()) << hb.dump();
  auto t = watch(hb["seq"]);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_NE(*t, 0u) << "nothing new for n1: the watch waits";
  // A start order: the watch wakes with a sequence past what the agent knew.
  const std::string id =
      Submit("alice", {{"queue", "training"}, {"command", {"sleep", "60"}}})["id"];
  const int64_t s1 = woken(1);
  ASSERT_GT(s1, hb["seq"].get<int64_t>()) << "no wake for a job placed on n1";
  hb = Heartbeat("n1");
  ASSERT_EQ(hb["start"].size(), 1u) << hb.dump();
  EXPECT_GE(hb["seq"].get<int64_t>(), s1);
  // The node's own heartbeats (starting, then running) are no news to its agent.
  ASSERT_TRUE(watch(hb["seq"]).ok());
  hb = Heartbeat("n1", {{"running", {{{"job", id}, {"pid", 42}}}}});
  EXPECT_EQ(State(id), "running");
  ASSERT_TRUE(engine_->Sync().ok());
  EXPECT_EQ(woken(2), -1) << "woken by the node's own heartbeat";
  // A cancel is an order: the same watch wakes.
  ASSERT_TRUE(engine_->Cancel(Who("alice"), id).ok());
  EXPECT_GT(woken(2), s1);
  // Asked after an older sequence, a watch answers at once (ticket 0).
  auto at_once = watch(0);
  ASSERT_TRUE(at_once.ok());
  EXPECT_EQ(*at_once, 0u);
  EXPECT_GT(woken(3), 0);
  // A newer watch replaces an older one, which is answered with 0.
  hb = Heartbeat("n1");
  ASSERT_TRUE(watch(hb["seq"]).ok());
  ASSERT_TRUE(watch(hb["seq"]).ok());
  EXPECT_EQ(woken(4), 0);
  // Only the agents of n1 may watch n1; unknown nodes are named.
  EXPECT_EQ(engine_->agents().WatchOrders(Who("rack1"), "n1", 0, [](int64_t) {}).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(engine_->agents().WatchOrders(Who("alice"), "n1", 0, [](int64_t) {}).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(engine_->agents().WatchOrders(Who("agent"), "n9", 0, [](int64_t) {}).status().code(),
            StatusCode::kNotFound);
  engine_->agents().UnwatchAll();
  EXPECT_EQ(woken(5), 0);
}

// Cycles on submission: a cheap one, or one that leaves no backlog, never holds the next back;
// after one of 2 ms or more that left 1,000 or more jobs waiting, none runs before nine times
// its length has passed, so they hold the engine at most a tenth of the time.
TEST(CycleBudgetTest, OnlyLongCyclesOverABacklogHoldTheNextBackForNineTimesTheirLength) {
  CycleBudget b;
  EXPECT_TRUE(b.Allows(0));
  b.Ran(/*end_us=*/1'000'000, /*took_us=*/1'999, /*left_waiting=*/50'000);
  EXPECT_TRUE(b.Allows(1'000'000)) << "a cycle under 2 ms holds nothing back";
  b.Ran(/*end_us=*/1'500'000, /*took_us=*/300'000, /*left_waiting=*/999);
  EXPECT_TRUE(b.Allows(1'500'000)) << "a long cycle without a backlog (an index rebuild) neither";
  b.Ran(/*end_us=*/2'000'000, /*took_us=*/20'000, /*left_waiting=*/1'000);
  EXPECT_FALSE(b.Allows(2'000'000));
  EXPECT_FALSE(b.Allows(2'179'999));
  EXPECT_TRUE(b.Allows(2'180'000));
  b.Ran(/*end_us=*/3'000'000, /*took_us=*/500, /*left_waiting=*/10'000);  // a cheap one lifts it
  EXPECT_TRUE(b.Allows(3'000'000));
}

}  // namespace
}  // namespace tessera::api
