// Preemption by swapping end to end (issue 36): a real `tessera serve` and a real `tessera
// agent --simulate 1xH100-80GB`; the job is a CUDA driver client (capgpu_swap_probe) under the
// cap library, on the stand-in driver of tests/capgpu (fake_cuda.cc, loaded through
// LD_LIBRARY_PATH as the driver's library would be): there is no GPU here. A guest's share on a
// swapping queue is reclaimed for a group below its reservation: the server holds it swapped out
// (heartbeat order "swap": "out"), its agent moves its memory off the card and keeps its driver
// calls waiting at the gate; when the claimant ends the share resumes on its card ("in"). The
// job's own checks of its data run before, across and after the hold and never see an error,
// and the preemption is recorded with 0 work lost.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../api/proc.h"
#include "../api/serve_fixture.h"
#include "../support/config_builder.h"
#include "../support/test_dir.h"

namespace tessera {
namespace {

using Json = nlohmann::json;

// Owners reserve a card; guests borrow it; the notebooks queue swaps its shares.
testing::ConfigBuilder Config() {
  testing::ConfigBuilder c;
  c.HeartbeatTimeout("5s")
      .Cycle("300ms")
      .Grace("1s")
      .User("alice", {"guests"})
      .User("bob", {"owners"})
      .Group("owners", "gpu: 1")
      .Group("guests")
      .Profile(
          "nb",
          "gpus: 1, gpu_fraction: 1, gpu_memory: 8GiB, cpu: 100m, memory: 64MiB, forms: [share]")
      .Queue("notebooks", "nb", {"owners", "guests"},
             "class: interactive, preemptible: true, swap: true, overcommit: 1, "
             "swap_hold_limit: 10m");
  return c;
}

class SwapE2eTest : public testing::ServeFixture {
 protected:
  void SetUp() override { Start(Config().Yaml()); }
  void Start(const std::string& config) {
    if (server_) {  // a test's own config: the fixture's server and agent go first
      StopAgents();
      server_.reset();
    }
    dir_ = testing::FreshTestDir("swap_e2e");
    WriteConfig(config);
    StartServer();
    if (HasFatalFailure()) return;
    StartAgent("gpu-1");
    ASSERT_TRUE(WaitFor([&] { return ReadyNodes() == 1; })) << Logs();
  }
  void TearDown() override {
    StopAgents();
    server_.reset();
  }
  // The guest's job: 4 MiB filled with a pattern, one thread checking it in a loop for `seconds`
  // (across a hold), then a last check; its driver calls go through the cap library. Its id, once
  // it has filled its memory ("" and a failure otherwise).
  std::string SubmitGuest(int seconds) {
    const std::string script =
        "(echo 'alloc x 4MiB'; echo 'fill x 7'; echo 'threads 1 x 7'; "
        "sleep " +
        std::to_string(seconds) + "; echo stop; echo 'check x 7'; echo quit) | " +
        CAPGPU_SWAP_PROBE;
    Json guest = Call("POST", "/v1/jobs",
                      {{"queue", "notebooks"},
                       {"env", {{"LD_LIBRARY_PATH", CAPGPU_FAKE_DRIVER_DIR}}},
                       {"command", {"sh", "-c", script}}});
    EXPECT_TRUE(guest.contains("id")) << guest.dump();
    const std::string id = guest.value("id", "");
    EXPECT_TRUE(WaitFor([&] { return Output(id).find("fill x 0") != std::string::npos; }))
        << Output(id) << Logs();
    return id;
  }
  // The guest resumes on its card (job.swapped_in) and finishes without an error, preempted once.
  void ExpectResumedIntact(const std::string& id) {
    ASSERT_TRUE(
        WaitFor([&] { return !Events("kind=job.swapped_in&subject=" + id).empty(); }, 30000))
        << Job(id).dump() << Logs();
    ASSERT_TRUE(WaitFor([&] { return State(id) == "succeeded"; }, 30000))
        << State(id) << Output(id) << Logs();
    const std::string text = Output(id);
    EXPECT_NE(text.find("errors=0"), std::string::npos) << text;
    EXPECT_NE(text.find("check x ok"), std::string::npos) << text;
    EXPECT_EQ(text.find("fill x 0"), text.rfind("fill x 0")) << "it ran once: " << text;
    EXPECT_EQ(Job(id).value("preemptions", -1), 1) << Job(id).dump();
  }
};

TEST_F(SwapE2eTest, AShareReclaimedOnASwappingQueueIsHeldSwappedOutAndResumesIntact) {
  const std::string id = SubmitGuest(15);
  if (HasFailure()) return;
  ASSERT_TRUE(WaitFor([&] { return State(id) == "running"; })) << State(id) << Logs();
  const Json started = Job(id).value("start_ms", Json());
  // The owners' job needs the card: reclaim takes the guest's share back, holding it swapped out.
  Json owner = Call("POST", "/v1/jobs", {{"queue", "notebooks"}, {"command", {"sleep", "3"}}},
                    "bob-token-1");
  ASSERT_TRUE(owner.contains("id")) << owner.dump();
  const std::string oid = owner["id"];
  ASSERT_TRUE(WaitFor([&] { return !Events("kind=job.swapped_out&subject=" + id).empty(); }))
      << Job(id).dump() << Logs();
  const Json out = Events("kind=job.swapped_out&subject=" + id)[0];
  EXPECT_NE(out["reason"].get<std::string>().find("lost 0 GPU-s"), std::string::npos) << out;
  EXPECT_EQ(out["data"]["lost_gpu_s"], 0) << out;
  EXPECT_EQ(out["data"]["for_job"], oid) << out;
  EXPECT_TRUE(Events("kind=job.preempted&subject=" + id).empty()) << "held, not stopped";
  // While held: pending, told why, and its memory off the card by its agent's word.
  Json held = Job(id);
  EXPECT_EQ(held["state"], "pending") << held;
  EXPECT_EQ(held.value("reason", "").rfind("SwappedOut: held swapped out since", 0), 0u) << held;
  ASSERT_TRUE(WaitFor([&] {
    return Job(id).value("activity", Json::object()).value("swap", "") == "swapped";
  })) << Job(id).dump()
      << Logs();
  auto owner_state = [&] {
    return Call("GET", "/v1/jobs/" + oid, {}, "bob-token-1").value("state", "");
  };
  ASSERT_TRUE(WaitFor([&] { return owner_state() == "succeeded"; })) << owner_state() << Logs();
  // Capacity returns: it resumes on its card, and its job finishes without an error.
  ExpectResumedIntact(id);
  // It ran from its first start (a new user saw STARTED reset to the time it resumed).
  EXPECT_EQ(Job(id).value("start_ms", Json()).get<int64_t>() / 1000, started.get<int64_t>() / 1000)
      << Job(id).dump();
  if (HasFatalFailure()) return;
  Json metrics = Call("GET", "/metrics", {}, "admin-token-1");
  const std::string m = metrics.is_string() ? metrics.get<std::string>() : metrics.dump();
  EXPECT_NE(m.find("tessera_preemptions_total{reason=\"held_swapped\"} 1"), std::string::npos)
      << m.substr(0, 4000);
  EXPECT_NE(agents_[0]->Log().find("swap out (ordered by the control plane)"), std::string::npos)
      << Logs();
}

// idle_timeout on a swapping queue (issue 37): a share its agent reports idle for the queue's
// idle_timeout is swapped out by the server's order ("swap": "idle"), not killed nor requeued:
// it keeps running, and the event names its idle time.
TEST_F(SwapE2eTest, AnIdleShareOfASwappingQueueIsSwappedOutNotKilled) {
  Start(Config()
            .Queue("idle-nb", "nb", {"guests"},
                   "class: interactive, swap: true, idle_timeout: 2s, preemptible: true")
            .Set("idle_after", "1s")
            .Yaml());
  if (HasFatalFailure()) return;
  Json j = Call("POST", "/v1/jobs",
                {{"queue", "idle-nb"},
                 {"env", {{"LD_LIBRARY_PATH", CAPGPU_FAKE_DRIVER_DIR}}},
                 {"command", {"sleep", "30"}}});
  ASSERT_TRUE(j.contains("id")) << j.dump();
  const std::string id = j["id"];
  ASSERT_TRUE(WaitFor([&] { return !Events("kind=job.swapped_out&subject=" + id).empty(); }, 20000))
      << Job(id).dump() << Logs();
  const Json out = Events("kind=job.swapped_out&subject=" + id)[0];
  EXPECT_EQ(out["reason"].get<std::string>().rfind("idle_timeout: idle ", 0), 0u) << out;
  EXPECT_NE(out["reason"].get<std::string>().find("swapped out, not stopped"), std::string::npos)
      << out;
  EXPECT_EQ(State(id), "running");
  EXPECT_TRUE(Events("kind=job.preempted&subject=" + id).empty());
  EXPECT_TRUE(Events("kind=job.stopping&subject=" + id).empty());
  ASSERT_TRUE(WaitFor([&] {
    return agents_[0]->Log().find("job " + id + ": swap idle (ordered by the control plane)") !=
           std::string::npos;
  })) << Logs();
  EXPECT_EQ(State(id), "running");
}

// A server restart keeps a hold: the share stays held swapped out on its card (its processes
// paused there, told to stay out) and resumes there when capacity returns, with no work lost.
// The hold lived only in the server's memory: after a restart the job was a plain pending job,
// its agent was no longer told to keep the paused process, which was killed, and the job ran
// again from its start.
TEST_F(SwapE2eTest, AHoldSurvivesAServerRestartAndTheShareResumesIntact) {
  const std::string id = SubmitGuest(20);
  if (HasFailure()) return;
  Json owner = Call("POST", "/v1/jobs", {{"queue", "notebooks"}, {"command", {"sleep", "6"}}},
                    "bob-token-1");
  ASSERT_TRUE(owner.contains("id")) << owner.dump();
  const std::string oid = owner["id"];
  ASSERT_TRUE(WaitFor([&] {
    return Job(id).value("activity", Json::object()).value("swap", "") == "swapped";
  })) << Job(id).dump()
      << Logs();
  server_.reset();  // stopped while the share is held swapped out
  StartServer();
  if (HasFatalFailure()) return;
  ASSERT_TRUE(WaitFor([&] { return !State(id).empty(); })) << Logs();  // answering again
  Json held = Job(id);
  EXPECT_EQ(held["state"], "pending") << held;
  EXPECT_EQ(held.value("held_swapped_on", ""), "gpu-1") << held;
  EXPECT_EQ(held.value("reason", "").rfind("SwappedOut: held swapped out since", 0), 0u) << held;
  ExpectResumedIntact(id);
}

// A new user: a drain of the card a share was held on left it held there ("drained" though it
// waited for it) until its hold limit stopped it as failed, other cards free. The drain requeues
// it: its agent stops the paused processes, the card holds nothing, and once the card takes work
// again the job runs there from its start.
TEST_F(SwapE2eTest, ADrainRequeuesAShareHeldOnItsCard) {
  const std::string id = SubmitGuest(30);
  if (HasFailure()) return;
  Json owner = Call("POST", "/v1/jobs", {{"queue", "notebooks"}, {"command", {"sleep", "4"}}},
                    "bob-token-1");
  ASSERT_TRUE(owner.contains("id")) << owner.dump();
  ASSERT_TRUE(WaitFor([&] {
    return Job(id).value("activity", Json::object()).value("swap", "") == "swapped";
  })) << Job(id).dump()
      << Logs();
  Call("POST", "/v1/nodes/gpu-1/drain", Json{{"device", 0}}, "admin-token-1");
  ASSERT_TRUE(WaitFor([&] { return !Events("kind=job.requeued&subject=" + id).empty(); }))
      << Job(id).dump() << Logs();
  const Json requeued = Events("kind=job.requeued&subject=" + id)[0];
  EXPECT_NE(requeued["reason"].get<std::string>().find("drain of gpu-1:0 by admin"),
            std::string::npos)
      << requeued;
  Json j = Job(id);
  EXPECT_EQ(j["state"], "pending") << j;
  EXPECT_FALSE(j.contains("held_swapped_on")) << j;
  // Its paused processes are stopped on the node: the agent no longer lists it.
  ASSERT_TRUE(WaitFor(
      [&] {
        return agents_[0]->Log().find("job " + id + " is not in may_run: stopping it") !=
               std::string::npos;
      },
      20000))
      << Logs();
  Call("POST", "/v1/nodes/gpu-1/uncordon", Json{{"device", 0}}, "admin-token-1");
  ASSERT_TRUE(WaitFor([&] { return State(id) == "running"; }, 30000)) << Job(id).dump() << Logs();
  EXPECT_TRUE(Events("kind=job.stopped&subject=" + id).empty()) << "requeued, not stopped";
}

}  // namespace
}  // namespace tessera
