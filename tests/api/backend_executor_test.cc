// BackendExecutor (api/backend_executor.h) on its own: its passes against a fake scheduler and a
// fake ledger (a JobTable, a fake clock and a commit that can be made to fail), with no engine,
// store or HTTP around it. The real schedulers are driven end to end elsewhere
// (tests/backends: real Slurm; api_e2e_tests: the Kubernetes stand-in; PBS against a fake qsub).
#include "api/backend_executor.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "part_fakes.h"

namespace tessera::api {
namespace {

// A scheduler that answers from tables and records what it was asked.
class FakeScheduler final : public backends::Backend {
 public:
  std::string Name() const override { return "fake"; }
  Result<std::string> Render(const backends::JobRequest& job) const override {
    if (job.command.empty()) return Status::InvalidArgument("no command");
    return std::string("#!/bin/sh\n");
  }
  Result<std::string> Submit(const backends::JobRequest& job, const std::string&) override {
    submitted.push_back(job.name);
    if (!submit_error.ok()) return submit_error;
    return "ext-" + std::to_string(submitted.size());
  }
  Status Cancel(const std::string& external_id) override {
    cancelled.push_back(external_id);
    return Status::Ok();
  }
  Result<std::map<std::string, backends::ExternalJob>> Poll(
      const std::vector<std::string>& ids) override {
    std::map<std::string, backends::ExternalJob> out;
    for (const std::string& id : ids) {
      if (auto it = jobs.find(id); it != jobs.end()) out[id] = it->second;
    }
    return out;
  }
  Result<std::vector<backends::ExternalJob>> List(const std::string& prefix) override {
    std::vector<backends::ExternalJob> out;
    for (const auto& [id, x] : jobs) {
      if (x.name.rfind(prefix, 0) == 0) out.push_back(x);
    }
    return out;
  }
  Status Forget(const std::string& external_id) override {
    forgotten.push_back(external_id);
    return Status::Ok();
  }

  void Has(const std::string& external_id, const std::string& name, const std::string& state,
           const std::string& user = "") {
    backends::ExternalJob x;
    x.external_id = external_id;
    x.name = name;
    x.state = state;
    x.native_state = state;
    x.user = user;
    jobs[external_id] = x;
  }

  std::map<std::string, backends::ExternalJob> jobs;  // by external id
  Status submit_error = Status::Ok();
  std::vector<std::string> submitted, cancelled, forgotten;
};

// The engine as an executor sees it: its jobs, its clock, and commits that succeed or fail.
class FakeLedger final : public LedgerPort {
 public:
  std::unique_lock<std::mutex> Lock() override { return std::unique_lock<std::mutex>(mu); }
  JobTable& JobsToChange() override { return jobs; }
  quota::QuotaEngine& QuotaToChange() override {
    ADD_FAILURE() << "the pass reached the quota engine";
    std::abort();
  }
  bool Transition(const Job& j, JobState to, JobCause cause) override {
    return fakes::Transition(jobs.Own(j), to, cause);
  }
  bool End(const Job& j, JobState state, JobCause cause, const std::string& reason) override {
    return fakes::End(jobs.Own(j), state, cause, reason);
  }
  void Translate(size_t, Batch&) override {}
  void WantCycle() override { ++cycles_wanted; }
  Status Commit(Batch& b, std::unique_lock<std::mutex>& lock) override {
    EXPECT_TRUE(lock.owns_lock());
    if (!commit_error.ok()) return commit_error;
    for (const store::Event& e : b.events) committed.push_back(e.kind + " " + e.subject);
    return Status::Ok();
  }
  int64_t Queue(Batch& b) override {
    ADD_FAILURE() << "the pass queued a batch without waiting for it";
    b = Batch{};
    return 0;
  }
  int64_t LastQueued() override { return 0; }
  int64_t Durable() override { return durable; }
  Status Broken() override { return Status::Ok(); }
  int64_t NowMs() const override { return now_ms; }

  std::mutex mu;
  JobTable jobs;
  int64_t now_ms = 1'000'000;
  int64_t durable = 0;  // the last batch written
  Status commit_error = Status::Ok();
  std::vector<std::string> committed;  // "kind subject" of every event written
  int cycles_wanted = 0;
};

struct Rig {
  Rig() {
    config.cluster = "c1";
    auto owned = std::make_unique<FakeLedger>();
    ledger = owned.get();
    executor = std::make_unique<BackendExecutor>(std::move(owned), config, "/tmp");
    auto sched = std::make_unique<FakeScheduler>();
    scheduler = sched.get();
    executor->AddLane("slurm", std::move(sched), false);
  }
  // A job the cycle admitted to the scheduler: placed, holding its admission, not yet submitted.
  Job& Placed() {
    Job j;
    j.rec.id = ledger->jobs.NewId();
    j.rec.queue = "batch";
    j.ext.backend = "slurm";
    j.state = JobState::kPlaced;
    j.spec = {{"command", {"true"}}};
    Job& in = ledger->jobs.Insert(std::move(j));
    ledger->jobs.Enter(in);
    return in;
  }

  EngineConfig config;
  FakeLedger* ledger;
  FakeScheduler* scheduler;
  std::unique_ptr<BackendExecutor> executor;
};

TEST(BackendExecutor, AnAdmittedJobIsSubmittedOnceAndRecordedAsStartingThroughTheLedger) {
  // The executor sees the jobs read only: it writes its own bookkeeping (ExternalOf), and the
  // job's state and record only through the ledger's named calls.
  static_assert(std::is_same_v<decltype(std::declval<LedgerPort&>().Jobs()), const JobTable&>,
                "an executor's port lends the jobs read only");
  Rig r;
  Job& j = r.Placed();
  ASSERT_TRUE(r.executor->Pass("slurm").ok());
  EXPECT_EQ(r.scheduler->submitted, std::vector<std::string>{"tessera-c1-" + j.rec.id});
  EXPECT_EQ(j.state, JobState::kStarting);
  EXPECT_EQ(j.ext.id, "ext-1");
  EXPECT_EQ(r.ledger->committed, std::vector<std::string>{"job.starting " + j.rec.id});
  // Submitted: the next pass follows it rather than submitting it again.
  r.ledger->now_ms += 10'000;
  ASSERT_TRUE(r.executor->Pass("slurm").ok());
  EXPECT_EQ(r.scheduler->submitted.size(), 1u);
}

// The cycle's placement is queued, not yet written: the scheduler hears of it only once it is
// durable. (A submission made before would run a job whose placement a failed write may undo.)
TEST(BackendExecutor, AJobIsSubmittedOnlyOnceItsPlacementIsDurable) {
  Rig r;
  Job& j = r.Placed();
  j.last_seq = 7;  // the batch that placed it
  r.ledger->durable = 6;
  ASSERT_TRUE(r.executor->Pass("slurm").ok());
  EXPECT_TRUE(r.scheduler->submitted.empty());
  EXPECT_EQ(j.state, JobState::kPlaced);
  r.ledger->durable = 7;
  ASSERT_TRUE(r.executor->Pass("slurm").ok());
  EXPECT_EQ(r.scheduler->submitted, std::vector<std::string>{"tessera-c1-" + j.rec.id});
  EXPECT_EQ(j.state, JobState::kStarting);
}

// A job cancelled (or sent elsewhere) after its submission: its scheduler's job is deleted only
// once the decision is durable.
TEST(BackendExecutor, ADeletionWaitsForItsDecisionToBeDurable) {
  Rig r;
  Job& j = r.Placed();
  ASSERT_TRUE(r.executor->Pass("slurm").ok());
  ASSERT_EQ(j.ext.id, "ext-1");
  {
    auto lock = r.ledger->Lock();
    r.executor->QueueDeleteLocked(j);
  }
  j.last_seq = 3;  // the batch that carries the decision, still being written
  r.ledger->durable = 2;
  r.ledger->now_ms += 10'000;
  ASSERT_TRUE(r.executor->Pass("slurm").ok());
  EXPECT_TRUE(r.scheduler->cancelled.empty());
  r.ledger->durable = 3;
  r.ledger->now_ms += 10'000;
  ASSERT_TRUE(r.executor->Pass("slurm").ok());
  EXPECT_EQ(r.scheduler->cancelled, std::vector<std::string>{"ext-1"});
}

TEST(BackendExecutor, AFailedSubmissionBacksOffAndLooksBeforeSubmittingAgain) {
  Rig r;
  Job& j = r.Placed();
  r.scheduler->submit_error = Status::Internal("sbatch: timed out");
  ASSERT_TRUE(r.executor->Pass("slurm").ok());
  EXPECT_EQ(j.state, JobState::kPlaced);
  EXPECT_EQ(j.ext.submit_attempts, 1);
  EXPECT_TRUE(j.ext.lookup_first);  // it may have gone through
  EXPECT_NE(j.rec.reason.find("sbatch: timed out"), std::string::npos) << j.rec.reason;
  EXPECT_EQ(j.rec.update_ms, r.ledger->now_ms);  // the reason's change is the record's update
  // Within its backoff (1 s) nothing is sent.
  ASSERT_TRUE(r.executor->Pass("slurm").ok());
  EXPECT_EQ(r.scheduler->submitted.size(), 1u);
  // After it, the scheduler is asked first: the timed-out submission did go through, so the job
  // is adopted, never submitted twice.
  r.scheduler->Has("ext-9", "tessera-c1-" + j.rec.id, "pending");
  r.ledger->now_ms += 1'000;
  ASSERT_TRUE(r.executor->Pass("slurm").ok());
  EXPECT_EQ(r.scheduler->submitted.size(), 1u);
  EXPECT_EQ(j.state, JobState::kStarting);
  EXPECT_EQ(j.ext.id, "ext-9");
}

// A scheduler lists every account's jobs, and any of its users may name a job as Tessera does:
// a job of another account was adopted in place of a submission that timed out (the Tessera
// job never ran, and its cancel cancelled the stranger's job as root). Only a job of the
// account Tessera submits as (the job's run_as) is adopted.
TEST(BackendExecutor, AJobOfAnotherAccountWithTheSameNameIsNotAdopted) {
  Rig r;
  Job& j = r.Placed();
  j.spec["run_as"] = "alice";
  r.scheduler->submit_error = Status::Internal("sbatch: timed out");
  ASSERT_TRUE(r.executor->Pass("slurm").ok());
  ASSERT_TRUE(j.ext.lookup_first);
  r.scheduler->submit_error = Status::Ok();
  r.scheduler->Has("ext-66", "tessera-c1-" + j.rec.id, "running", "mallory");
  r.ledger->now_ms += 1'000;
  ASSERT_TRUE(r.executor->Pass("slurm").ok());
  EXPECT_EQ(r.scheduler->submitted.size(), 2u) << "submitted again, not adopted";
  EXPECT_NE(j.ext.id, "ext-66");
  // After a restart too; its own account's job is adopted.
  for (const std::string owner : {"mallory", "alice"}) {
    Rig after;
    Job& k = after.Placed();
    k.spec["run_as"] = "alice";
    k.ext.lookup_first = true;
    after.scheduler->Has("ext-67", "tessera-c1-" + k.rec.id, "running", owner);
    ASSERT_TRUE(after.executor->Pass("slurm").ok());
    EXPECT_EQ(k.ext.id == "ext-67", owner == "alice") << owner;
    EXPECT_EQ(after.scheduler->submitted.empty(), owner == "alice") << owner;
  }
}

TEST(BackendExecutor, AnEndIsForgottenByTheSchedulerOnlyOnceItIsDurable) {
  Rig r;
  Job& j = r.Placed();
  ASSERT_TRUE(r.executor->Pass("slurm").ok());
  ASSERT_EQ(j.ext.id, "ext-1");
  r.scheduler->Has("ext-1", "tessera-c1-" + j.rec.id, "running");
  r.ledger->now_ms += 1'000;
  ASSERT_TRUE(r.executor->Pass("slurm").ok());
  EXPECT_EQ(j.state, JobState::kRunning);

  r.scheduler->Has("ext-1", "tessera-c1-" + j.rec.id, "succeeded");
  r.ledger->commit_error = Status::Internal("disk full");
  r.ledger->now_ms += 1'000;
  EXPECT_FALSE(r.executor->Pass("slurm").ok());
  EXPECT_TRUE(r.scheduler->forgotten.empty()) << "forgotten before its end was written";

  r.ledger->commit_error = Status::Ok();
  j.state = JobState::kRunning;  // what a reload after the failed write rebuilds
  r.ledger->now_ms += 1'000;
  ASSERT_TRUE(r.executor->Pass("slurm").ok());
  EXPECT_EQ(j.state, JobState::kSucceeded);
  EXPECT_EQ(r.scheduler->forgotten, std::vector<std::string>{"ext-1"});
  EXPECT_GT(r.ledger->cycles_wanted, 0);  // its capacity is free for the next cycle
}

TEST(BackendExecutor, AfterOpenAnOrphanIsCancelledAndAnUnsubmittedJobFoundThereIsAdopted) {
  Rig r;
  Job& found = r.Placed();
  found.ext.lookup_first = true;  // its submission may have gone through before the restart
  r.scheduler->Has("ext-7", "tessera-c1-" + found.rec.id, "running");
  r.scheduler->Has("ext-8", "tessera-c1-j-999", "running");   // no Tessera job of that id
  r.scheduler->Has("ext-5", "other-cluster-j-1", "running");  // not ours: left alone
  // Named as Tessera names its jobs by another account: not Tessera's to cancel.
  r.scheduler->Has("ext-9", "tessera-c1-j-998", "running", "mallory");
  ASSERT_TRUE(r.executor->Pass("slurm").ok());
  EXPECT_EQ(r.scheduler->cancelled, std::vector<std::string>{"ext-8"});
  EXPECT_TRUE(r.scheduler->submitted.empty());
  EXPECT_EQ(found.ext.id, "ext-7");
  EXPECT_EQ(found.state, JobState::kRunning);  // adopted (starting), then followed: running
  // Written in the scheduler's order (then this pass follows the adopted job: job.running).
  ASSERT_GE(r.ledger->committed.size(), 2u);
  EXPECT_EQ(r.ledger->committed[0], "job.adopted " + found.rec.id);
  EXPECT_EQ(r.ledger->committed[1], "backend.orphan_cancelled j-999");
}

TEST(BackendExecutor, APassOfAnUnknownBackendIsRefusedByName) {
  Rig r;
  Status st = r.executor->Pass("pbs");
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_NE(st.message().find("pbs"), std::string::npos);
  EXPECT_EQ(r.executor->Names(), std::vector<std::string>{"slurm"});
}

}  // namespace
}  // namespace tessera::api
