// Group commit in Engine::Submit: concurrent submissions share store transactions, every one of
// them lands exactly once, and a failed transaction acknowledges none of its submissions and
// leaves no usage behind. Runs against a real SQLite store, wrapped to count (and, on demand,
// fail or slow down) its commits.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <set>
#include <thread>

#include "api/engine.h"
#include "forwarding_store.h"
#include "support/config_builder.h"
#include "support/engine_fixture.h"
#include "support/wait.h"

namespace tessera::api {
namespace {

// Forwards to a real store; counts commits, can fail them, can make them slow (so that
// submissions arriving meanwhile queue up behind one).
class CountingStore : public tessera::testing::ForwardingStore {
 public:
  CountingStore(std::unique_ptr<store::Store> inner, std::atomic<int>* commits,
                std::atomic<bool>* fail, std::atomic<int>* delay_ms)
      : ForwardingStore(std::move(inner)), commits_(commits), fail_(fail), delay_ms_(delay_ms) {}
  Status Commit(const std::vector<store::Event>& events, const std::vector<store::JobRecord>& jobs,
                std::vector<int64_t>* seqs) override {
    const int n = ++*commits_;
    if (fail_nth_ != nullptr && n == fail_nth_->load())
      return Status::Internal("disk full (injected, once)");
    if (delay_ms_->load() > 0)  // a slow disk: time passing is the point
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_->load()));
    if (fail_->load()) return Status::Internal("disk full (injected)");
    return ForwardingStore::Commit(events, jobs, seqs);
  }

 private:
  std::atomic<int>* commits_;
  std::atomic<bool>* fail_;
  std::atomic<int>* delay_ms_;

 public:
  std::atomic<int>* fail_nth_ = nullptr;  // fail only the commit with this number
};

// A PBS queue: its jobs are admitted against the group's limit in the submission's own commit
// (nothing runs qsub here: no Tick is called).
class GroupCommitTest : public testing::EngineFixture {
 protected:
  void SetUp() override {
    // A PBS queue: its jobs are admitted against the group's limit in the submission's own
    // commit (nothing runs qsub here: no Tick is called).
    Start("group_commit",
          tessera::testing::ConfigBuilder()
              .WithoutIdentity("admin")
              .Group("research", "", "cpu: 2")
              .Profile("cpu", "gpus: 0, cpu: 1, memory: 16MiB, forms: [whole]")
              .Queue("hpc", "cpu", {"research"}, "backend: pbs")
              .Queue("local", "cpu", {"research"})
              .Yaml(),
          [this](const std::string& dir) -> Result<std::unique_ptr<store::Store>> {
            auto inner = store::Store::Open(dir + "/tessera.db");
            if (!inner.ok()) return inner.status();
            auto store =
                std::make_unique<CountingStore>(std::move(*inner), &commits_, &fail_, &delay_ms_);
            store->fail_nth_ = &fail_nth_;
            return std::unique_ptr<store::Store>(std::move(store));
          });
  }
  void TearDown() override {
    engine_.reset();
    std::filesystem::remove_all(dir_);
  }
  Result<Json> Submit(const std::string& queue) {
    return engine_->Submit(Who("alice"), Json{{"queue", queue}, {"command", {"true"}}});
  }
  size_t JobCount() {
    auto r = engine_->views().ListJobs(Who("alice"), "", 100000);
    EXPECT_TRUE(r.ok());
    return r.ok() ? (*r)["jobs"].size() : 0;
  }

  std::atomic<int> commits_{0};
  std::atomic<bool> fail_{false};
  std::atomic<int> delay_ms_{0};
  std::atomic<int> fail_nth_{-1};
};

TEST_F(GroupCommitTest, ConcurrentSubmissionsShareCommitsAndEveryOneLands) {
  delay_ms_ = 2;  // a slow disk: submissions pile up behind each commit
  constexpr int kThreads = 8, kEach = 25;
  commits_ = 0;
  std::vector<std::thread> threads;
  std::mutex mu;
  std::set<std::string> ids;
  std::atomic<int> failed{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        auto r = Submit("local");
        if (!r.ok()) {
          ++failed;
          continue;
        }
        std::lock_guard<std::mutex> lock(mu);
        ids.insert((*r)["id"].get<std::string>());
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(ids.size(), size_t{kThreads * kEach});  // distinct ids, one per acknowledgement
  // Fewer transactions than submissions: they were grouped.
  EXPECT_LT(commits_.load(), kThreads * kEach);
  // Every acknowledged job is durable: all of them are there after a restart.
  delay_ms_ = 0;
  Reopen();
  EXPECT_EQ(JobCount(), size_t{kThreads * kEach});
  for (const std::string& id : ids)
    EXPECT_TRUE(engine_->views().GetJob(Who("alice"), id).ok()) << id;
}

// SubmitAsync returns while the store still writes, and answers from the commit writer once the
// job is durable (or with the write's error, leaving nothing behind): no caller's thread waits.
TEST_F(GroupCommitTest, AnAsynchronousSubmissionIsAnsweredByTheWriterOnceDurable) {
  delay_ms_ = 300;  // a slow disk: the answer cannot come before the write ends
  std::promise<std::pair<Result<Json>, std::thread::id>> answered;
  std::atomic<bool> called{false};
  engine_->SubmitAsync(Who("alice"), Json{{"queue", "local"}, {"command", {"true"}}}, "",
                       [&](Result<Json> r, bool replayed) {
                         EXPECT_FALSE(replayed);
                         called = true;
                         answered.set_value({std::move(r), std::this_thread::get_id()});
                       });
  EXPECT_FALSE(called.load()) << "answered before its write ended";
  auto [r, thread] = answered.get_future().get();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)["id"], "j-1");
  EXPECT_NE(thread, std::this_thread::get_id()) << "answered on the caller's thread, which waited";
  delay_ms_ = 0;
  Reopen();
  EXPECT_TRUE(engine_->views().GetJob(Who("alice"), "j-1").ok()) << "acknowledged but not durable";

  // A failed write answers with its error; once memory catches up the job is gone.
  fail_ = true;
  std::promise<Result<Json>> refused;
  engine_->SubmitAsync(Who("alice"), Json{{"queue", "local"}, {"command", {"true"}}}, "",
                       [&](Result<Json> r2, bool) { refused.set_value(std::move(r2)); });
  Result<Json> r2 = refused.get_future().get();
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.status().message().find("disk full"), std::string::npos) << r2.status().ToString();
  fail_ = false;
  (void)engine_->Sync();
  EXPECT_EQ(JobCount(), 1u);
  Reopen();
  EXPECT_EQ(JobCount(), 1u);
}

TEST_F(GroupCommitTest, AFailedCommitAcknowledgesNoneAndLeavesNoUsage) {
  // Two submissions in one failing transaction: both get the error, neither is visible.
  fail_ = true;
  delay_ms_ = 20;
  Result<Json> first = Status::Internal("unset"), second = Status::Internal("unset");
  std::thread a([&] { first = Submit("hpc"); });
  std::thread b([&] { second = Submit("hpc"); });
  a.join();
  b.join();
  ASSERT_FALSE(first.ok());
  ASSERT_FALSE(second.ok());
  EXPECT_NE(first.status().message().find("disk full"), std::string::npos)
      << first.status().ToString();
  EXPECT_EQ(JobCount(), 0u);
  // Their tentative admission was undone: the group's whole cpu limit (2) is free again, so the
  // next two submissions are both admitted, and a third waits on the limit.
  fail_ = false;
  delay_ms_ = 0;
  for (int i = 0; i < 2; ++i) {
    auto r = Submit("hpc");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ((*r)["state"], "placed") << r->dump();
  }
  auto third = Submit("hpc");
  ASSERT_TRUE(third.ok());
  EXPECT_EQ((*third)["state"], "pending") << third->dump();
  EXPECT_EQ(JobCount(), 3u);
}

TEST_F(GroupCommitTest, AScheduleRebuildDuringACommitKeepsTheInFlightUsage) {
  // A submission to the PBS queue (1 of the group's 2 CPUs, counted tentatively) is being
  // committed when a node registers and the engine rebuilds its state, group usage included.
  delay_ms_ = 300;
  Result<Json> first = Status::Internal("unset");
  const int before = commits_.load();
  std::thread a([&] { first = Submit("hpc"); });
  EXPECT_TRUE(
      tessera::testing::WaitFor([&] { return commits_.load() > before; }, std::chrono::seconds(10)))
      << "the submission's commit never started";
  Json devs =
      Json::array({{{"index", 0}, {"model", "H100-80GB"}, {"memory_mib", 81920}, {"uuid", "g0"}}});
  auto reg = engine_->agents().RegisterNode(
      Who("agent"), {{"node", "n1"}, {"cpu_milli", 2000}, {"memory_mib", 4096}, {"devices", devs}});
  ASSERT_TRUE(reg.ok()) << reg.status().ToString();
  a.join();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ((*first)["state"], "placed");
  // The first job still counts: one more fits the limit, a third waits.
  delay_ms_ = 0;
  auto second = Submit("hpc");
  ASSERT_TRUE(second.ok());
  EXPECT_EQ((*second)["state"], "placed") << second->dump();
  auto third = Submit("hpc");
  ASSERT_TRUE(third.ok());
  EXPECT_EQ((*third)["state"], "pending") << third->dump();
}

TEST_F(GroupCommitTest, AFailedPlacementCommitLeavesTheJobPendingAndTheNodeFree) {
  // Jobs wait for the periodic cycle here, so that the submission and the placement are
  // separate commits whatever the timing.
  config_.schedule_on_submit = false;
  Reopen();
  // A node with room for two 1-CPU jobs of the local queue.
  Json devs =
      Json::array({{{"index", 0}, {"model", "H100-80GB"}, {"memory_mib", 81920}, {"uuid", "g0"}}});
  auto reg = engine_->agents().RegisterNode(
      Who("agent"), {{"node", "n1"}, {"cpu_milli", 2000}, {"memory_mib", 4096}, {"devices", devs}});
  ASSERT_TRUE(reg.ok()) << reg.status().ToString();
  auto first = Submit("local");
  ASSERT_TRUE(first.ok()) << first.status().ToString();  // acknowledged: the submission is durable
  EXPECT_EQ((*first)["state"], "pending") << first->dump();
  // The cycle's commit, the placement, fails.
  fail_nth_ = commits_.load() + 1;
  EXPECT_FALSE(engine_->RunCycle().ok());
  auto after = engine_->views().GetJob(Who("alice"), (*first)["id"]);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ((*after)["state"], "pending") << after->dump();
  EXPECT_NE((*after)["reason"].get<std::string>().find("could not be recorded"), std::string::npos)
      << after->dump();
  // The failed placement reserved nothing: the next cycle places it, and a second job still
  // fits, but a third does not.
  ASSERT_TRUE(engine_->RunCycle().ok());
  auto again = engine_->views().GetJob(Who("alice"), (*first)["id"]);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)["state"], "placed") << again->dump();
  auto second = Submit("local");
  auto third = Submit("local");
  ASSERT_TRUE(second.ok() && third.ok());
  ASSERT_TRUE(engine_->RunCycle().ok());
  EXPECT_EQ((*engine_->views().GetJob(Who("alice"), (*second)["id"]))["state"], "placed");
  EXPECT_EQ((*engine_->views().GetJob(Who("alice"), (*third)["id"]))["state"], "pending");
  // And after a restart the store agrees: two placed, one pending.
  Reopen();
  int placed = 0;
  auto list = engine_->views().ListJobs(Who("alice"), "", 100);
  ASSERT_TRUE(list.ok());
  for (const auto& j : (*list)["jobs"]) placed += j["state"] == "placed";
  EXPECT_EQ(placed, 2) << list->dump();
}

// A job's first record and its placement, queued behind one slow write, are written together:
// the placement updates the row its submission inserts in the same transaction. `fail`: that
// transaction fails. Returns the second submission's answer and the cycle's outcome.
class GroupedWriteTest : public GroupCommitTest {
 protected:
  struct Grouped {
    Result<Json> second = Status::Internal("unset");
    Status cycle;
  };
  Grouped SubmitAndPlaceBehindASlowWrite(bool fail) {
    config_.schedule_on_submit = false;  // placed by the cycle below, not at submission
    Reopen();
    Grouped g;
    Json devs = Json::array(
        {{{"index", 0}, {"model", "H100-80GB"}, {"memory_mib", 81920}, {"uuid", "g0"}}});
    auto reg = engine_->agents().RegisterNode(
        Who("agent"),
        {{"node", "n1"}, {"cpu_milli", 2000}, {"memory_mib", 4096}, {"devices", devs}});
    EXPECT_TRUE(reg.ok()) << reg.status().ToString();
    delay_ms_ = 300;  // the write in flight below holds the next ones back
    const int before = commits_.load();
    std::promise<Result<Json>> first, second;
    engine_->SubmitAsync(Who("alice"), Json{{"queue", "local"}, {"command", {"true"}}}, "",
                         [&](Result<Json> r, bool) { first.set_value(std::move(r)); });
    EXPECT_TRUE(tessera::testing::WaitFor([&] { return commits_.load() > before; },
                                          std::chrono::seconds(10)));
    // The second submission and the cycle's placement of both queue while it is written.
    engine_->SubmitAsync(Who("alice"), Json{{"queue", "local"}, {"command", {"echo", "two"}}}, "",
                         [&](Result<Json> r, bool) { second.set_value(std::move(r)); });
    if (fail) fail_nth_ = commits_.load() + 1;
    g.cycle = engine_->RunCycle();
    const Result<Json> first_answer = first.get_future().get();
    EXPECT_TRUE(first_answer.ok()) << first_answer.status().ToString();
    g.second = second.get_future().get();
    EXPECT_EQ(commits_.load(), before + 2) << "the second submission and the cycle not grouped";
    delay_ms_ = 0;
    fail_nth_ = -1;
    return g;
  }
};

TEST_F(GroupedWriteTest, ASubmissionAndItsPlacementWrittenInOneTransactionBothLand) {
  const Grouped g = SubmitAndPlaceBehindASlowWrite(false);
  ASSERT_TRUE(g.cycle.ok()) << g.cycle.ToString();
  ASSERT_TRUE(g.second.ok()) << g.second.status().ToString();
  Reopen();
  auto job = engine_->views().GetJob(Who("alice"), (*g.second)["id"]);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ((*job)["state"], "placed") << job->dump();
  EXPECT_EQ((*job)["spec"]["command"], Json({"echo", "two"})) << job->dump();
}

// When that transaction fails, neither lands, memory forgets the second job, and the next
// cycle's writes succeed: none updates a row that was never written.
TEST_F(GroupedWriteTest, WhenTheSharedTransactionFailsNeitherLandsAndTheNextCycleWrites) {
  const Grouped g = SubmitAndPlaceBehindASlowWrite(true);
  EXPECT_FALSE(g.cycle.ok());
  ASSERT_FALSE(g.second.ok());
  EXPECT_NE(g.second.status().message().find("disk full"), std::string::npos)
      << g.second.status().ToString();
  const Status next = engine_->RunCycle();
  ASSERT_TRUE(next.ok()) << next.ToString();
  EXPECT_EQ((*engine_->views().GetJob(Who("alice"), "j-1"))["state"], "placed");
  Reopen();
  EXPECT_EQ(JobCount(), 1u);
  EXPECT_EQ((*engine_->views().GetJob(Who("alice"), "j-1"))["state"], "placed");
}

}  // namespace
}  // namespace tessera::api
