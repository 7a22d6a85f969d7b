// CycleDriver (api/cycle_driver.h) on its own: a real quota engine with one node, jobs in a
// JobTable, and a fake ledger (the job state table's checks, a queue that records what it is
// given, a fake clock): no engine, store or writer thread. The served cycle is checked end to end
// against the simulator by api_same_decisions_tests.
#include "api/cycle_driver.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "part_fakes.h"

namespace tessera::api {
namespace {

class FakeLedger final : public CyclePort {
 public:
  explicit FakeLedger(const EngineConfig& config) : qe(fakes::NewQuota(config)) {}
  std::unique_lock<std::mutex> Lock() override { return std::unique_lock<std::mutex>(mu); }
  JobTable& JobsToChange() override { return jobs; }
  quota::QuotaEngine& QuotaToChange() override { return *qe; }
  bool Transition(const Job& j, JobState to, JobCause cause) override {
    return fakes::Transition(jobs.Own(j), to, cause);
  }
  bool End(const Job& j, JobState state, JobCause cause, const std::string& reason) override {
    if (!fakes::End(jobs.Own(j), state, cause, reason)) return false;
    jobs.NoteEnded(j.rec.id);
    return true;
  }
  void Translate(size_t, Batch&) override { ADD_FAILURE() << "the driver translates itself"; }
  void WantCycle() override {}
  Status Commit(Batch&, std::unique_lock<std::mutex>&) override {
    ADD_FAILURE() << "the driver commits nothing: its caller does";
    return Status::Ok();
  }
  int64_t Queue(Batch& b) override {
    if (b.empty()) return 0;
    b = Batch{};
    return ++queued;
  }
  int64_t LastQueued() override { return queued; }
  int64_t Durable() override { return LastQueued(); }
  Status Broken() override { return Status::Ok(); }
  int64_t NowMs() const override { return now_ms; }

  std::mutex mu;
  JobTable jobs;
  std::unique_ptr<quota::QuotaEngine> qe;
  int64_t queued = 0;
  int64_t now_ms = 1'000'000;
};

struct Rig {
  Rig() {
    config = fakes::Config(testing::ConfigBuilder());
    auto owned = std::make_unique<FakeLedger>(config);
    ledger = owned.get();
    driver = std::make_unique<CycleDriver>(std::move(owned), config, counters,
                                           [this](const Job& j) { deleted.push_back(j.rec.id); });
    quota::NodeSpec n;
    n.name = "n1";
    n.pool = "default";
    n.cpu_milli = 8000;
    n.memory_mib = 65536;
    n.gpu_count = 1;
    n.gpu_model = "H100-80GB";
    n.gpu_memory_mib = 81920;
    EXPECT_TRUE(ledger->qe->AddNode(n, 1000).ok());
  }
  // A job of the default queue (training: one whole card), pending.
  Job& Pending() {
    Job j;
    j.rec.id = ledger->jobs.NewId();
    j.rec.identity = "alice";
    j.rec.group = "research";
    j.rec.queue = "training";
    j.spec = {{"command", {"true"}}};
    quota::JobSpec q;
    q.id = j.rec.id;
    q.identity = j.rec.identity;
    q.group = j.rec.group;
    q.queue = j.rec.queue;
    auto h = ledger->qe->Submit(q, 1000);
    EXPECT_TRUE(h.ok()) << h.status().message();
    j.handle = *h;
    Job& in = ledger->jobs.Insert(std::move(j));
    ledger->jobs.Enter(in);
    return in;
  }
  std::vector<std::string> Kinds(const Batch& b) {
    std::vector<std::string> out;
    for (const store::Event& e : b.events) out.push_back(e.kind + " " + e.subject);
    return out;
  }

  EngineConfig config;
  DecisionCounters counters;
  FakeLedger* ledger;
  std::unique_ptr<CycleDriver> driver;
  std::vector<std::string> deleted;
};

TEST(CycleDriver, APlacementBecomesTheJobsGrantsAndOneEventCountedWithItsBatch) {
  Rig r;
  Job& j = r.Pending();
  EXPECT_TRUE(r.driver->pacer().Due(r.ledger->now_ms, 60'000));  // wanted from the start
  Batch b;
  r.driver->RunLocked(b);
  EXPECT_EQ(j.state, JobState::kPlaced);
  EXPECT_EQ(j.node, "n1");
  EXPECT_EQ(j.form, "whole");
  ASSERT_EQ(j.grants.size(), 1u);
  EXPECT_EQ(j.grants[0].device, 0);
  EXPECT_EQ(r.Kinds(b), std::vector<std::string>{"job.placed " + j.rec.id});
  EXPECT_EQ(r.ledger->jobs.OnNode("n1"), std::vector<std::string>{j.rec.id});
  // Counted with the batch that will carry it (the next one queued): not durable before that.
  EXPECT_TRUE(r.counters.durable().admissions.empty());
  r.counters.Settle([](int64_t seq) {
    return seq == 1 ? std::optional<Status>(Status::Ok()) : std::optional<Status>();
  });
  EXPECT_EQ(r.counters.durable().admissions.size(), 1u);
  // Ran: not due again until something changes or the period passes.
  EXPECT_FALSE(r.driver->pacer().Due(r.ledger->now_ms, 60'000));
  EXPECT_TRUE(r.deleted.empty());
}

TEST(CycleDriver, AJobThatDoesNotFitWaitsWithItsPlaceAndTheStepThatHoldsIt) {
  Rig r;
  Job& first = r.Pending();
  Job& second = r.Pending();
  Batch b;
  r.driver->RunLocked(b);
  EXPECT_EQ(first.state, JobState::kPlaced);
  EXPECT_EQ(second.state, JobState::kPending);
  EXPECT_EQ(second.wait_position, 1);
  EXPECT_FALSE(second.rec.reason.empty());
  EXPECT_NE(second.rec.reason.find(": "), std::string::npos) << second.rec.reason;
  EXPECT_EQ(r.Kinds(b), std::vector<std::string>{"job.placed " + first.rec.id});
}

TEST(CycleDriver, AnEvictionMadeOutsideACycleIsTranslatedIntoARequeue) {
  Rig r;
  Job& j = r.Pending();
  Batch placed;
  r.driver->RunLocked(placed);
  ASSERT_TRUE(r.ledger->Transition(j, JobState::kStarting, JobCause::kStarted));
  ASSERT_TRUE(r.ledger->Transition(j, JobState::kRunning, JobCause::kRunning));
  const size_t mark = r.ledger->qe->events().size();
  r.ledger->qe->Evict(j.handle, 1001, "device n1:0 unhealthy");
  Batch b;
  r.driver->TranslateLocked(mark, b);
  EXPECT_EQ(j.state, JobState::kPreempting);
  EXPECT_EQ(r.Kinds(b), std::vector<std::string>{"job.preempted " + j.rec.id});
  // Its processes gone: pending again, its grants and node cleared, its nodes touched.
  const size_t mark2 = r.ledger->qe->events().size();
  r.ledger->qe->Stopped(j.handle, 1002);
  Batch b2;
  r.driver->TranslateLocked(mark2, b2);
  EXPECT_EQ(j.state, JobState::kPending);
  EXPECT_TRUE(j.grants.empty());
  EXPECT_TRUE(j.node.empty());
  EXPECT_EQ(b2.nodes, std::vector<std::string>{"n1"});
  EXPECT_EQ(r.Kinds(b2), std::vector<std::string>{"job.requeued " + j.rec.id});
  EXPECT_TRUE(r.ledger->qe->events().empty());  // recorded: marks start again from 0
}

}  // namespace
}  // namespace tessera::api
