// Views and /metrics show durable decisions only (issue 32): while a submission's commit (its job
// and the placement of the cycle it ran) is being written, and that write then fails, no view
// (jobs, one job, nodes, summary) and no /metrics rendering made meanwhile shows the job or
// counts its admission. Before, memory ran ahead of the store and the views read memory: they
// showed the placement at once, and /metrics kept counting it after the reload.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <mutex>

#include "api/engine.h"
#include "forwarding_store.h"
#include "support/config_builder.h"
#include "support/engine_fixture.h"

namespace tessera::api {
namespace {

// A real SQLite store whose next commit, once armed, waits for Release() and then fails without
// writing anything.
class HeldStore : public tessera::testing::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  void Arm() {
    std::lock_guard<std::mutex> l(mu_);
    armed_ = true;
  }
  void WaitHeld() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [this] { return held_; });
  }
  void Release() {
    std::lock_guard<std::mutex> l(mu_);
    released_ = true;
    cv_.notify_all();
  }
  // Loads of the live jobs fail (a reload after the failed write fails too) until told otherwise.
  void FailLoads(bool fail) {
    std::lock_guard<std::mutex> l(mu_);
    fail_loads_ = fail;
  }
  Result<std::vector<store::JobRecord>> LoadLiveJobs() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (fail_loads_) return Status::Internal("disk unreadable (injected, loading jobs)");
    }
    return ForwardingStore::LoadLiveJobs();
  }
  Status Commit(const std::vector<store::Event>& events, const std::vector<store::JobRecord>& jobs,
                std::vector<int64_t>* seqs) override {
    {
      std::unique_lock<std::mutex> l(mu_);
      if (armed_) {
        armed_ = false;
        held_ = true;
        cv_.notify_all();
        cv_.wait(l, [this] { return released_; });
        return Status::Internal("disk full (injected, after a wait)");
      }
    }
    return ForwardingStore::Commit(events, jobs, seqs);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool armed_ = false, held_ = false, released_ = false, fail_loads_ = false;
};

class ViewDurabilityTest : public testing::EngineFixture {
 protected:
  void SetUp() override {
    // SQLite in the test's directory, behind a HeldStore.
    Start("view_durability",
          tessera::testing::ConfigBuilder()
              .Profile("train", "gpus: 1, cpu: 1, memory: 16MiB, forms: [whole]")
              .Yaml(),
          [this](const std::string& dir) -> Result<std::unique_ptr<store::Store>> {
            auto inner = store::Store::Open(dir + "/tessera.db");
            if (!inner.ok()) return inner.status();
            auto held = std::make_unique<HeldStore>(std::move(*inner));
            store_ = held.get();
            return std::unique_ptr<store::Store>(std::move(held));
          });
    if (HasFatalFailure()) return;
    Register("n1", 1, 8000);
  }
  void TearDown() override {
    if (store_ != nullptr) store_->Release();
    engine_.reset();
    std::filesystem::remove_all(dir_);
  }
  // What a rendering says of job j-1: shown as a job, holding the card, counted as admitted.
  static std::string Shows(const Result<Json>& view) {
    return view.ok() ? view->dump() : "(error) " + view.status().message();
  }

  HeldStore* store_ = nullptr;
};

TEST_F(ViewDurabilityTest, ViewsAndMetricsNeverShowADecisionWhoseCommitThenFails) {
  store_->Arm();
  std::promise<Result<Json>> submitted;
  engine_->SubmitAsync(Who("alice"), Json{{"queue", "training"}, {"command", {"true"}}}, "",
                       [&](Result<Json> r, bool) { submitted.set_value(std::move(r)); });
  store_->WaitHeld();  // the job and its placement are in memory; their write is in progress
  const Identity admin = Who("admin");
  auto jobs =
      std::async(std::launch::async, [&] { return engine_->views().ListJobs(admin, "", 100); });
  auto job = std::async(std::launch::async, [&] { return engine_->views().GetJob(admin, "j-1"); });
  auto nodes = std::async(std::launch::async, [&] { return engine_->views().Nodes(admin); });
  auto summary = std::async(std::launch::async, [&] { return engine_->views().Summary(admin); });
  auto metrics = std::async(std::launch::async, [&] { return engine_->views().Metrics(admin); });
  // Give the renderings time to be made while the write is held (a view that read memory has
  // its answer by then; one that waits for durability still waits), then fail the write. A wait
  // on time, not on a condition: what is checked is that nothing shows in the meantime.
  metrics.wait_for(std::chrono::milliseconds(300));
  store_->Release();
  Result<Json> sub = submitted.get_future().get();
  ASSERT_FALSE(sub.ok()) << "the submission's commit failed: it is not acknowledged";

  const Result<Json> j = jobs.get(), one = job.get(), n = nodes.get(), s = summary.get();
  const Result<std::string> m = metrics.get();
  if (j.ok()) {
    EXPECT_TRUE((*j)["jobs"].empty()) << Shows(j);
  }
  EXPECT_FALSE(one.ok()) << "j-1 was never durable: " << Shows(one);
  if (n.ok()) {
    EXPECT_TRUE((*n)["nodes"][0]["devices"][0]["holders"].empty()) << Shows(n);
  }
  if (s.ok()) {
    EXPECT_EQ(s->dump().find("\"running\":1"), std::string::npos) << Shows(s);
  }
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->find("tessera_admissions_total{"), std::string::npos)
      << "an admission that was never durable is counted:\n"
      << *m;

  // After the reload, /metrics still counts nothing of it; a new submission is shown and counted.
  auto again = engine_->views().Metrics(admin);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->find("tessera_admissions_total{"), std::string::npos) << *again;
  auto next = engine_->Submit(Who("alice"), Json{{"queue", "training"}, {"command", {"true"}}});
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  auto shown = engine_->views().ListJobs(admin, "", 100);
  ASSERT_TRUE(shown.ok());
  EXPECT_EQ((*shown)["jobs"].size(), 1u) << shown->dump();
  auto counted = engine_->views().Metrics(admin);
  ASSERT_TRUE(counted.ok());
  EXPECT_NE(counted->find("tessera_admissions_total{"), std::string::npos) << *counted;
}

// The write fails and so does the reload after it: the memory that ran ahead of the store is
// dropped, not kept. Nothing of the decision is shown (or handed to a backend) while nothing is
// served, and it is not there once the store reads again and memory is rebuilt from it.
TEST_F(ViewDurabilityTest, AReloadThatFailsTooKeepsNothingOfTheFailedDecision) {
  store_->Arm();
  store_->FailLoads(true);
  std::promise<Result<Json>> submitted;
  engine_->SubmitAsync(Who("alice"), Json{{"queue", "training"}, {"command", {"true"}}}, "",
                       [&](Result<Json> r, bool) { submitted.set_value(std::move(r)); });
  store_->WaitHeld();
  store_->Release();
  Result<Json> sub = submitted.get_future().get();
  ASSERT_FALSE(sub.ok());
  const Identity admin = Who("admin");
  const Result<Json> one = engine_->views().GetJob(admin, "j-1");
  EXPECT_FALSE(one.ok()) << "j-1 was never durable: " << Shows(one);
  const Result<Json> jobs = engine_->views().ListJobs(admin, "", 100);
  if (jobs.ok()) {
    EXPECT_TRUE((*jobs)["jobs"].empty()) << Shows(jobs);
  }
  const Result<Json> nodes = engine_->views().Nodes(admin);
  if (nodes.ok()) {
    for (const Json& n : (*nodes)["nodes"])
      for (const Json& d : n["devices"]) EXPECT_TRUE(d["holders"].empty()) << Shows(nodes);
  }
  // The store reads again: a tick rebuilds memory from it, with the node and without j-1, and
  // says it is well again (the failed write is not its own).
  store_->FailLoads(false);
  const Status tick = engine_->Tick();
  EXPECT_TRUE(tick.ok()) << tick.ToString();
  EXPECT_TRUE(engine_->Tick().ok());
  const Result<Json> back = engine_->views().Nodes(admin);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ((*back)["nodes"].size(), 1u) << back->dump();
  EXPECT_TRUE((*back)["nodes"][0]["devices"][0]["holders"].empty()) << back->dump();
  EXPECT_FALSE(engine_->views().GetJob(admin, "j-1").ok());
  EXPECT_TRUE(engine_->CheckInvariants().ok());
}

}  // namespace
}  // namespace tessera::api
