// Three of the engine's parts on their own: AuditTrail (api/audit_trail.h) against a fake
// ledger that records what is queued; Housekeeping (api/housekeeping.h) against a fake
// LedgerReads over a real SQLite store in a scratch directory and a fake clock; Recovery
// (api/recovery.h) from a real SQLite store.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "api/audit_trail.h"
#include "api/housekeeping.h"
#include "api/recovery.h"
#include "api/views.h"
#include "part_fakes.h"
#include "store/store.h"

namespace tessera::api {
namespace {

using Json = nlohmann::json;

class QueueLedger final : public LedgerPort {
 public:
  std::unique_lock<std::mutex> Lock() override { return std::unique_lock<std::mutex>(mu); }
  JobTable& JobsToChange() override { return jobs; }
  quota::QuotaEngine& QuotaToChange() override {
    ADD_FAILURE() << "the audit trail reached the quota engine";
    std::abort();
  }
  bool Transition(const Job&, JobState, JobCause) override { return false; }
  bool End(const Job&, JobState, JobCause, const std::string&) override { return false; }
  void Translate(size_t, Batch&) override {}
  void WantCycle() override {}
  Status Commit(Batch&, std::unique_lock<std::mutex>&) override {
    ADD_FAILURE() << "an audit event is queued, never waited for";
    return Status::Ok();
  }
  int64_t Queue(Batch& b) override {
    EXPECT_FALSE(mu.try_lock()) << "queued without the engine's lock";
    for (store::Event& e : b.events) queued.push_back(std::move(e));
    b = Batch{};
    return static_cast<int64_t>(queued.size());
  }
  int64_t LastQueued() override { return static_cast<int64_t>(queued.size()); }
  int64_t Durable() override { return LastQueued(); }
  int64_t NowMs() const override { return now_ms; }
  Status Broken() override { return broken; }

  std::mutex mu;
  JobTable jobs;
  int64_t now_ms = 5'000'000;
  Status broken = Status::Ok();
  std::vector<store::Event> queued;
};

TEST(AuditTrail, AFloodOfRefusalsIsCappedPerSecondAndTheRestCountedIntoTheNext) {
  auto owned = std::make_unique<QueueLedger>();
  QueueLedger* ledger = owned.get();
  AuditTrail audit(std::move(owned));
  for (int i = 0; i < AuditTrail::kPerSecond + 5; ++i)
    audit.AuthFailure("GET", "/v1/jobs", "unknown token");
  ASSERT_EQ(ledger->queued.size(), static_cast<size_t>(AuditTrail::kPerSecond));
  EXPECT_EQ(ledger->queued[0].kind, "auth.failed");
  EXPECT_EQ(ledger->queued[0].actor, "-");
  EXPECT_EQ(ledger->queued[0].subject, "/v1/jobs");
  // The next second: one event, carrying how many were left out.
  ledger->now_ms += 1000;
  audit.AuthFailure("GET", "/v1/nodes", "unknown token");
  ASSERT_EQ(ledger->queued.size(), static_cast<size_t>(AuditTrail::kPerSecond) + 1);
  EXPECT_EQ(Json::parse(ledger->queued.back().data)["suppressed"], 5);
  // A sign-in is not a refusal: never capped, and it names the identity and its role.
  Identity alice;
  alice.name = "alice";
  alice.role = Role::kUser;
  for (int i = 0; i < AuditTrail::kPerSecond + 1; ++i)
    audit.IdentityEvent("auth.signin", alice, "sub-1", "signed in", Json::object());
  EXPECT_EQ(ledger->queued.size(), static_cast<size_t>(2 * AuditTrail::kPerSecond) + 2);
  EXPECT_EQ(ledger->queued.back().actor, "alice");
  EXPECT_EQ(Json::parse(ledger->queued.back().data)["role"], "user");
  // An agent speaking for nodes it is not bound to is capped too (the red team: 3,000 refused
  // heartbeats in 0.6 s wrote 3,000 events), on a budget of its own: failed sign-ins in the same
  // second are still recorded (the review).
  ledger->now_ms += 1000;
  const size_t before = ledger->queued.size();
  {
    auto lock = ledger->Lock();  // RecordLocked's callers hold the engine's lock
    for (int i = 0; i < AuditTrail::kPerSecond + 7; ++i)
      audit.RecordLocked("agent2", "agent.refused", "node-" + std::to_string(i),
                         "may not heartbeat for this node", Json::object());
  }
  EXPECT_EQ(ledger->queued.size(), before + AuditTrail::kPerSecond);
  audit.AuthFailure("GET", "/v1/jobs", "unknown token");
  EXPECT_EQ(ledger->queued.back().kind, "auth.failed");
  EXPECT_EQ(ledger->queued.size(), before + AuditTrail::kPerSecond + 1);
  ledger->now_ms += 1000;
  {
    auto lock = ledger->Lock();
    audit.RecordLocked("agent2", "agent.refused", "n", "may not heartbeat for this node",
                       Json::object());
  }
  EXPECT_EQ(Json::parse(ledger->queued.back().data)["suppressed"], 7);
  const size_t capped = ledger->queued.size();
  // Memory that could not be rebuilt queues nothing more.
  ledger->broken = Status::Internal("reload failed");
  audit.AuthFailure("GET", "/v1/jobs", "unknown token");
  EXPECT_EQ(ledger->queued.size(), capped);
}

// Memory as the views read it: an engine's config, an empty quota engine and jobs, a real store.
class FakeReads final : public LedgerReads {
 public:
  FakeReads(const EngineConfig& c, std::unique_ptr<store::Store> s)
      : config(c), store(std::move(s)) {
    qe = fakes::NewQuota(config);
  }
  Status ReadDurable(const std::function<Status(const ReadModel&)>& read) override {
    std::lock_guard<std::mutex> lock(mu);
    return read(Model());
  }
  void Read(const std::function<void(const ReadModel&)>& read) override {
    std::lock_guard<std::mutex> lock(mu);
    ++reads;
    read(Model());
  }
  bool TryRead(const std::function<void(const ReadModel&)>& read) override {
    Read(read);
    return true;
  }
  int64_t MemoryVersion() const override { return 0; }
  store::StoreReader& DurableStore() override { return *store; }
  int64_t NowMs() const override { return now_ms; }
  ReadModel Model() { return ReadModel{config, *qe, jobs, nodes, admin, counters, broken, 0}; }

  std::mutex mu;
  const EngineConfig& config;
  std::unique_ptr<store::Store> store;
  std::unique_ptr<quota::QuotaEngine> qe;
  JobTable jobs;
  std::map<std::string, NodeInfo> nodes;
  NodeAdminTable admin;
  DecisionCounters counters;
  Status broken = Status::Ok();
  int reads = 0;
  int64_t now_ms = 1'800'000'000'000;  // on a 5-minute boundary
};

struct ChoresRig {
  ChoresRig() {
    config = fakes::Config(testing::ConfigBuilder());
    reads = std::make_unique<FakeReads>(config, fakes::ScratchStore("chores"));
    chores = std::make_unique<Housekeeping>(*reads, *reads->store, config);
  }
  size_t Samples(int resolution_s) {
    auto got = reads->store->ListSamples(resolution_s, 0, reads->now_ms + 1);
    EXPECT_TRUE(got.ok());
    return got.ok() ? got->size() : 0;
  }
  EngineConfig config;
  std::unique_ptr<FakeReads> reads;
  std::unique_ptr<Housekeeping> chores;
};

// What can write to a store: commit, upsert a setting or a sample, prune.
template <class S>
concept WritesStore = requires(S& s, store::Store::Sample sample) {
  s.Commit({}, {}, nullptr);
  s.PutSetting("", "");
  s.PutSample(1, sample);
  s.Prune(0);
};

// The views' and the chores' reads lend the store's reads only: its writes are the ledger's
// (the commit pipeline) and, for history, settings and retention, the store the chores are lent.
TEST(Housekeeping, OneSampleEveryIntervalAndCompleteBucketsRolledUp) {
  static_assert(WritesStore<store::Store>);
  static_assert(
      !WritesStore<std::remove_reference_t<decltype(std::declval<LedgerReads&>().DurableStore())>>,
      "a reader of the ledger cannot write the store");
  ChoresRig r;
  const int fine_s = static_cast<int>(r.config.history.utilization_sample_ms / 1000);
  ASSERT_GT(fine_s, 0);
  ASSERT_TRUE(r.chores->Tick().ok());
  EXPECT_EQ(r.Samples(fine_s), 1u);
  // Within the interval: no second sample.
  r.reads->now_ms += r.config.history.utilization_sample_ms / 2;
  ASSERT_TRUE(r.chores->Tick().ok());
  EXPECT_EQ(r.Samples(fine_s), 1u);
  r.reads->now_ms += r.config.history.utilization_sample_ms;
  ASSERT_TRUE(r.chores->Tick().ok());
  EXPECT_EQ(r.Samples(fine_s), 2u);
  // Once the 5-minute bucket they fell in is complete, it is one average.
  EXPECT_EQ(r.Samples(static_cast<int>(kCoarseSampleMs / 1000)), 0u);
  r.reads->now_ms += kCoarseSampleMs;
  ASSERT_TRUE(r.chores->Tick().ok());
  EXPECT_EQ(r.Samples(static_cast<int>(kCoarseSampleMs / 1000)), 1u);
  // Memory that could not be rebuilt: no sample, and the tick says why.
  r.reads->broken = Status::Internal("reload failed");
  r.reads->now_ms += r.config.history.utilization_sample_ms;
  EXPECT_FALSE(r.chores->Tick().ok());
}

TEST(Housekeeping, TheFairShareHistoryIsSavedOnlyOnceACycleMadeOne) {
  ChoresRig r;
  ASSERT_TRUE(r.chores->SaveFairShare(true).ok());
  auto stored = r.reads->store->GetSetting(Housekeeping::kFairShareKey);
  ASSERT_TRUE(stored.ok());
  EXPECT_FALSE(stored->has_value());  // no cycle yet: nothing to say
  // A history from an earlier run is restored, and saved again as it is.
  ASSERT_TRUE(r.reads->store
                  ->PutSetting(Housekeeping::kFairShareKey,
                               R"({"as_of": 1800000000, "groups": {"research": [8, 0, 0, 0]}})")
                  .ok());
  ASSERT_TRUE(r.chores->RestoreFairShare(*r.reads->qe, r.reads->now_ms / 1000).ok());
  ASSERT_TRUE(r.chores->SaveFairShare(true).ok());
  stored = r.reads->store->GetSetting(Housekeeping::kFairShareKey);
  ASSERT_TRUE(stored.ok() && stored->has_value());
  const Json saved = Json::parse(**stored);
  EXPECT_TRUE(saved["groups"].contains("research")) << saved.dump();
  // An unreadable history is ignored: a fresh start, not a refusal to start.
  ASSERT_TRUE(r.reads->store->PutSetting(Housekeeping::kFairShareKey, "{not json").ok());
  EXPECT_TRUE(r.chores->RestoreFairShare(*r.reads->qe, r.reads->now_ms / 1000).ok());
}

}  // namespace
}  // namespace tessera::api

namespace tessera::api {
namespace {

// Recovery (api/recovery.h): memory from a real SQLite store, with no engine around it.
struct RecoveryRig {
  RecoveryRig() {
    config = fakes::Config(testing::ConfigBuilder());
    store = fakes::ScratchStore("recovery");
  }
  void Job(const std::string& id, const std::string& queue) {
    store::JobRecord r;
    r.id = id;
    r.queue = queue;
    r.identity = "alice";
    r.group = "research";
    r.state = "pending";
    r.spec = R"({"command": ["true"]})";
    r.submit_ms = r.update_ms = 1'000'000;
    EXPECT_TRUE(store->Commit({}, {r}, nullptr).ok());
  }
  Result<Memory> Recover() {
    return api::Recover(*store, config, 2'000'000, 77, [&](quota::QuotaEngine&) {
      ++fair_share_restored;
      return Status::Ok();
    });
  }
  EngineConfig config;
  std::unique_ptr<store::Store> store;
  int fair_share_restored = 0;
};

TEST(Recovery, NodesAndLiveJobsComeBackAndAJobItsQueueNoLongerTakesIsFailed) {
  RecoveryRig r;
  ASSERT_TRUE(r.store
                  ->PutSetting("node/n1", R"({"node": "n1", "cpu_milli": 8000, "memory_mib": 65536,
                     "devices": [{"index": 0, "model": "H100-80GB", "memory_mib": 81920}]})")
                  .ok());
  r.Job("j-7", "training");
  r.Job("j-9", "gone");
  Result<Memory> m = r.Recover();
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(r.fair_share_restored, 1);
  ASSERT_EQ(m->nodes.count("n1"), 1u);
  EXPECT_EQ(m->nodes["n1"].heard_mono_ms, 77);  // a fresh heartbeat window from the load
  EXPECT_EQ(m->nodes["n1"].devices.size(), 1u);
  const api::Job* kept = m->jobs.Find("j-7");
  ASSERT_NE(kept, nullptr);
  EXPECT_EQ(kept->state, JobState::kPending);
  EXPECT_GE(kept->handle, 0);
  const api::Job* failed = m->jobs.Find("j-9");
  ASSERT_NE(failed, nullptr);
  EXPECT_EQ(failed->state, JobState::kFailed);
  EXPECT_NE(failed->rec.reason.find("no longer schedulable after a restart"), std::string::npos);
  EXPECT_EQ(m->failed_on_load, std::vector<std::string>{"j-9"});
  EXPECT_EQ(m->jobs.NewId(), "j-10");  // no id handed out twice
  EXPECT_TRUE(m->quota->CheckInvariants().ok());
}

TEST(Recovery, ACorruptInventoryIsRefusedByName) {
  RecoveryRig r;
  ASSERT_TRUE(r.store->PutSetting("node/bad", "{not json").ok());
  Result<Memory> m = r.Recover();
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().message(), "stored inventory 'node/bad' is corrupt");
}

}  // namespace
}  // namespace tessera::api
