// Issue 31's scheduling promises through the served product, with real processes: `tessera
// serve` and `tessera agent --simulate` (declared inventories: there is no GPU here).
//
// The liveness bound (docs/scheduling.md): a job its pools could hold in some allowed form,
// counting a device returned to unsplit (MIG off; an AMD card back to SPX+NPS1), and that nothing
// of higher standing needs, starts within 3 cycles + grace + drain. The cards here are idle when
// the partition jobs end, so the drain is 0. Measured on the server's own clock: from the event
// of the last partition job's end to the waiting job's `job.placed` (the decision); its
// `job.running` (the agent started it) is allowed the agents' round trip on top.
//
// And reclaim stops at the reservation: 22 jobs against a reservation of 16 on a full cluster
// preempt exactly 16 borrowers, counting the claims in flight while the grace runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>

#include "../support/config_builder.h"
#include "../support/test_dir.h"
#include "proc.h"
#include "serve_fixture.h"

namespace tessera {
namespace {

using Json = nlohmann::json;

// The server's timings, written into each config below; the bound is computed from them.
constexpr int kCycleMs = 300;
constexpr int kGraceMs = 1000;
constexpr int kDrainMs = 0;  // the split cards are idle when the partition jobs end
constexpr int kBoundMs = 3 * kCycleMs + kGraceMs + kDrainMs;
// From the decision to the agent's report that the job runs: the order watch wakes the agent at
// once and it reports a start at once; a heartbeat period (1 s) of slack, and one more for load.
constexpr int kStartSlackMs = 2000;

// Inference (never preempted: nothing drains the card under it) on MIG instances or AMD
// partitions; training on whole cards, up to 2; notebooks on shares too large for any instance
// but the whole card's.
tessera::testing::ConfigBuilder Forms() {
  return tessera::testing::ConfigBuilder()
      .Profile("serve",
               "gpus: 1, gpu_fraction: 0.1, gpu_memory: 10GB, cpu: 100m, memory: 64MiB, "
               "forms: [partition]")
      .Profile("train", "gpus: 1, max_gpus: 2, cpu: 100m, memory: 64MiB, forms: [whole]")
      .Profile("nb",
               "gpus: 1, gpu_fraction: 0.3, gpu_memory: 30GiB, cpu: 100m, memory: 64MiB, "
               "forms: [share]")
      .Queue("inference", "serve", {"research"}, "class: inference")
      .Queue("training", "train", {"research"}, "class: training")
      .Queue("notebooks", "nb", {"research"}, "class: interactive");
}

// A short inference job: says so, runs a moment (long enough for the test to see the waiting job
// wait behind it), and ends by itself.
const std::vector<std::string> kShortJob = {"sh", "-c", "echo started; sleep 3"};
const std::vector<std::string> kShow = {
    "sh", "-c", "echo devices=$CUDA_VISIBLE_DEVICES rocr=$ROCR_VISIBLE_DEVICES; sleep 600"};

class PromisesE2eTest : public testing::ServeFixture {
 protected:
  // `config` with the server's timings above.
  void Start(tessera::testing::ConfigBuilder config,
             const std::vector<std::pair<std::string, std::string>>& agents) {
    dir_ = tessera::testing::FreshTestDir("promises_e2e");
    WriteConfig(config.HeartbeatTimeout("5s")
                    .Cycle(std::to_string(kCycleMs) + "ms")
                    .Grace(std::to_string(kGraceMs) + "ms")
                    .Yaml());
    StartServer();
    if (HasFatalFailure()) return;  // no server: start no agents
    for (const auto& [node, simulate] : agents) StartAgent(node, simulate);
    ASSERT_TRUE(WaitFor([&] { return ReadyNodes() == static_cast<int>(agents.size()); })) << Logs();
  }
  // Started and not ended (its running report may not be in yet).
  bool Live(const std::string& id) {
    const std::string s = AdminState(id);
    return s == "starting" || s == "running";
  }
  // The server's time of `job`'s one event of `kind` (-1 when there is none).
  int64_t EventMs(const std::string& kind, const std::string& job) {
    Json ev;
    // The state is served from memory; its event is readable once its batch is committed.
    WaitFor([&] { return !(ev = Events("kind=" + kind + "&subject=" + job)).empty(); }, 5000);
    EXPECT_EQ(ev.size(), 1u) << kind << " " << job << ": " << ev.dump();
    return ev.empty() ? -1 : ev[0]["time_ms"].get<int64_t>();
  }
  Json Device(int node, int index) {
    Json n = Call("GET", "/v1/nodes", {}, "admin-token-1");
    return n.is_object() ? n["nodes"][node]["devices"][index] : Json();
  }
  // Checks that each of `waiting` was placed within the bound after `ended_ms`, and reported
  // running within the bound plus the agents' slack; says how long each took.
  void ExpectWithinBound(const std::vector<std::string>& waiting, int64_t ended_ms,
                         const std::string& what) {
    for (const std::string& id : waiting) {
      ASSERT_TRUE(WaitFor([&] { return AdminState(id) == "running"; }, 15000))
          << what << " " << id << "\n"
          << AdminJob(id).dump() << "\n"
          << Call("GET", "/v1/nodes", {}, "admin-token-1").dump() << "\n"
          << Events("kind=device").dump();
      const int64_t placed = EventMs("job.placed", id) - ended_ms;
      const int64_t running = EventMs("job.running", id) - ended_ms;
      std::cout << "[ measured ] " << what << " " << id << ": placed " << placed << " ms, running "
                << running << " ms after the partition job ended (bound " << kBoundMs
                << " ms = 3 x " << kCycleMs << " ms cycle + " << kGraceMs << " ms grace + "
                << kDrainMs << " ms drain)\n";
      EXPECT_GE(placed, 0) << id;
      EXPECT_LE(placed, kBoundMs) << what << " " << id << " was placed " << placed
                                  << " ms after the end";
      EXPECT_LE(running, kBoundMs + kStartSlackMs)
          << what << " " << id << " ran " << running << " ms after the end";
    }
  }
  // The `device.repartitioned` events whose reason has `text`.
  int Repartitions(const std::string& text) {
    int n = 0;
    for (const auto& e : Events("kind=device.repartitioned"))
      n += e.value("reason", "").find(text) != std::string::npos;
    return n;
  }
  void TearDown() override {
    StopAgents();  // SIGTERM first: an agent stops its jobs before it exits
    server_.reset();
  }
};

// 2 x A100-80GB: a short inference job gets a 1g.10gb instance; a 2-card training job waits
// behind it ("no room for 2 x whole"). When the inference job ends, the card goes back to MIG
// off and the training job runs on both cards within the bound.
TEST_F(PromisesE2eTest, ACardSplitForInferenceServesATwoCardJobAfterIt) {
  ASSERT_NO_FATAL_FAILURE(Start(Forms(), {{"a100", "2xA100-80GB"}}));
  const std::string inf = Submit("alice-token-1", {{"queue", "inference"}, {"command", kShortJob}});
  ASSERT_TRUE(WaitFor([&] { return AdminOutput(inf).find("started") != std::string::npos; }))
      << Logs();
  Json i = AdminJob(inf);
  ASSERT_EQ(i["placement"]["form"], "partition") << i.dump();
  ASSERT_EQ(i["placement"]["devices"][0].value("partition", "").rfind("1g.10gb@", 0), 0u)
      << i.dump();
  const std::string train =
      Submit("alice-token-1", {{"queue", "training"}, {"gpus", 2}, {"command", kShow}});
  ASSERT_TRUE(WaitFor([&] {
    return AdminJob(train).value("reason", "").find("2 x whole") != std::string::npos;
  })) << AdminJob(train).dump();
  ASSERT_TRUE(Live(inf)) << "the inference job ended before the training job waited behind it";
  ASSERT_TRUE(WaitFor([&] { return AdminState(inf) == "succeeded"; })) << Logs();
  ASSERT_NO_FATAL_FAILURE(
      ExpectWithinBound({train}, EventMs("job.succeeded", inf), "2-card job after MIG"));
  EXPECT_EQ(Repartitions("MIG off on an idle device for " + train), 1)
      << Events("kind=device.repartitioned").dump();
  for (int d = 0; d < 2; ++d) {
    Json dev = Device(0, d);
    EXPECT_FALSE(dev.value("mig", true)) << dev.dump();
    EXPECT_TRUE(dev["partitions"].empty()) << dev.dump();
  }
  // The agent gave it both whole cards, no MIG instance.
  ASSERT_TRUE(WaitFor([&] { return AdminOutput(train).find("devices=") != std::string::npos; }))
      << Logs();
  const std::string out = AdminOutput(train);
  EXPECT_EQ(out.find("MIG-"), std::string::npos) << out;
  EXPECT_NE(out.find("devices=GPU-"), std::string::npos) << out;
  EXPECT_NE(out.find(",GPU-"), std::string::npos) << out;
}

// 1 x A100-80GB: the same with shares. Two notebooks of 30GiB each wait behind a 1g.10gb
// instance; when the inference job ends the card comes back and both share it.
TEST_F(PromisesE2eTest, ACardSplitForInferenceServesSharesAfterIt) {
  ASSERT_NO_FATAL_FAILURE(Start(Forms(), {{"a100", "1xA100-80GB"}}));
  const std::string inf = Submit("alice-token-1", {{"queue", "inference"}, {"command", kShortJob}});
  ASSERT_TRUE(WaitFor([&] { return AdminOutput(inf).find("started") != std::string::npos; }))
      << Logs();
  ASSERT_EQ(AdminJob(inf)["placement"]["form"], "partition") << AdminJob(inf).dump();
  const std::string nb1 = Submit("alice-token-1", {{"queue", "notebooks"}, {"command", kShow}});
  const std::string nb2 = Submit("alice-token-1", {{"queue", "notebooks"}, {"command", kShow}});
  for (const std::string& id : {nb1, nb2}) {
    ASSERT_TRUE(WaitFor([&] { return AdminJob(id)["wait"].value("step", "") == "Placement"; }))
        << AdminJob(id).dump();
  }
  ASSERT_TRUE(Live(inf)) << "the inference job ended before the notebooks waited behind it";
  ASSERT_TRUE(WaitFor([&] { return AdminState(inf) == "succeeded"; })) << Logs();
  ASSERT_NO_FATAL_FAILURE(
      ExpectWithinBound({nb1, nb2}, EventMs("job.succeeded", inf), "shares after MIG"));
  EXPECT_EQ(Repartitions("MIG off on an idle device"), 1)
      << Events("kind=device.repartitioned").dump();
  Json dev = Device(0, 0);
  EXPECT_FALSE(dev.value("mig", true)) << dev.dump();
  EXPECT_EQ(dev["holders"].size(), 2u) << dev.dump();
  for (const std::string& id : {nb1, nb2}) {
    Json j = AdminJob(id);
    EXPECT_EQ(j["placement"]["form"], "share") << j.dump();
    EXPECT_EQ(j["placement"]["devices"][0]["gpu_memory_mib"], 30 * 1024) << j.dump();
    ASSERT_TRUE(WaitFor([&] { return AdminOutput(id).find("devices=GPU-") != std::string::npos; }))
        << Logs();
  }
}

// 1 x MI300X: two inference jobs get CPX partitions (the card switched to CPX). A whole-card job
// waits; when both end, the card goes back to SPX+NPS1, on the server and on the agent, and the
// job runs within the bound.
TEST_F(PromisesE2eTest, AnAmdCardSplitIntoCpxServesAWholeJobAfterIt) {
  ASSERT_NO_FATAL_FAILURE(Start(Forms(), {{"mi300", "1xMI300X"}}));
  const std::string a = Submit("alice-token-1", {{"queue", "inference"}, {"command", kShortJob}});
  const std::string b = Submit("alice-token-1", {{"queue", "inference"}, {"command", kShortJob}});
  for (const std::string& id : {a, b}) {
    ASSERT_TRUE(WaitFor([&] { return AdminOutput(id).find("started") != std::string::npos; }))
        << Logs();
    Json j = AdminJob(id);
    ASSERT_EQ(j["placement"]["devices"][0].value("partition", "").rfind("CPX#", 0), 0u) << j.dump();
  }
  ASSERT_EQ(Device(0, 0).value("amd_mode", ""), "CPX+NPS1") << Device(0, 0).dump();
  const std::string train = Submit("alice-token-1", {{"queue", "training"}, {"command", kShow}});
  ASSERT_TRUE(WaitFor([&] { return AdminJob(train)["wait"].value("step", "") == "Placement"; }))
      << AdminJob(train).dump();
  ASSERT_TRUE(Live(a) || Live(b))
      << AdminJob(a).dump() << AdminJob(b).dump() << AdminJob(train).dump() << Logs()
      << "the inference jobs ended before the training job waited behind them";
  ASSERT_TRUE(WaitFor([&] { return AdminState(a) == "succeeded" && AdminState(b) == "succeeded"; }))
      << Logs();
  const int64_t ended = std::max(EventMs("job.succeeded", a), EventMs("job.succeeded", b));
  ASSERT_NO_FATAL_FAILURE(ExpectWithinBound({train}, ended, "whole AMD card after CPX"));
  EXPECT_EQ(Repartitions("compute mode CPX+NPS1 -> SPX+NPS1 on an idle device for " + train), 1)
      << Events("kind=device.repartitioned").dump();
  EXPECT_EQ(Device(0, 0).value("amd_mode", ""), "SPX+NPS1") << Device(0, 0).dump();
  // The agent switched the card back before it started the job on it.
  ASSERT_TRUE(WaitFor([&] {
    return agents_[0]->Log().find("job " + train + " started") != std::string::npos;
  })) << Logs();
  EXPECT_NE(agents_[0]->Log().find("device 0: CPX+NPS1 -> SPX+NPS1 for job " + train),
            std::string::npos)
      << Logs();
}

// 4 nodes x 8 cards, all held by group b's preemptible jobs; group a (reservation 16) submits 22
// jobs: exactly 16 of b's jobs are preempted (not 22: claims in flight during the grace count),
// a ends holding 16 and b keeps 16, and it stays so.
TEST_F(PromisesE2eTest, TwentyTwoJobsAgainstAReservationOfSixteenPreemptSixteen) {
  const auto kReclaim = tessera::testing::ConfigBuilder()
                            .WithoutIdentity("alice")
                            .User("ann", {"a"}, "a-token-1")
                            .User("bob", {"b"}, "b-token-1")
                            .Group("a", "gpu: 16")
                            .Group("b")
                            .Profile("card", "gpus: 1, cpu: 10m, memory: 16MiB, forms: [whole]")
                            .Queue("a", "card", {"a"}, "class: training")
                            .Queue("b", "card", {"b"}, "preemptible: true, class: training");
  ASSERT_NO_FATAL_FAILURE(Start(kReclaim, {{"n1", "8xH100-80GB"},
                                           {"n2", "8xH100-80GB"},
                                           {"n3", "8xH100-80GB"},
                                           {"n4", "8xH100-80GB"}}));
  // `sleep` leaves at SIGTERM; no shell loop: 54 jobs on a small machine.
  const std::vector<std::string> sleeper = {"sleep", "600"};
  std::vector<std::string> b, a;
  for (int i = 0; i < 32; ++i)
    b.push_back(Submit("b-token-1", {{"queue", "b"}, {"command", sleeper}}));
  auto running = [&](const std::vector<std::string>& jobs) {
    int n = 0;
    for (const auto& id : jobs) n += AdminState(id) == "running";
    return n;
  };
  ASSERT_TRUE(WaitFor([&] { return running(b) == 32; }, 30000)) << Logs();
  for (int i = 0; i < 22; ++i)
    a.push_back(Submit("a-token-1", {{"queue", "a"}, {"command", sleeper}}));
  ASSERT_TRUE(WaitFor([&] { return running(a) >= 16; }, 30000)) << Logs();
  // Past the grace again, and a few cycles: nothing more is taken. (A sleep on purpose: what is
  // checked is that nothing more happens while time passes.)
  std::this_thread::sleep_for(std::chrono::milliseconds(kBoundMs + kGraceMs));
  const Json preempted = Events("kind=job.preempted");
  std::set<std::string> victims;
  for (const auto& e : preempted) victims.insert(e["subject"].get<std::string>());
  EXPECT_EQ(preempted.size(), 16u) << preempted.dump();
  for (const auto& v : victims)
    EXPECT_NE(std::find(b.begin(), b.end(), v), b.end()) << v << " is not b's";
  EXPECT_EQ(victims.size(), 16u);
  EXPECT_EQ(running(a), 16);
  EXPECT_EQ(running(b), 16);
  int waiting_b = 0;
  for (const auto& id : b) {
    Json j = AdminJob(id);
    if (j["preemptions"].get<int>() > 0) waiting_b += j["state"] == "pending";
  }
  EXPECT_EQ(waiting_b, 16);
  Json summary = Call("GET", "/v1/summary", {}, "admin-token-1");
  int seen = 0;
  for (const auto& g : summary["groups"]) {
    if (g["group"] != "a") continue;
    ++seen;
    EXPECT_EQ(g["gpu_milli_total"], 16000) << summary.dump();
  }
  EXPECT_EQ(seen, 1) << summary.dump();
  std::cout << "[ measured ] reclaim: " << preempted.size() << " preempted, a running "
            << running(a) << ", b running " << running(b) << "\n";
}

// Issue 37: a reservation per GPU model is a promise too. 8 H100 and 8 A100 cards, all held by
// group b's preemptible jobs; group a reserves 12 GPUs, 4 of them H100 ("4 H100 and 8 of
// anything"), and its queue takes A100 first, then H100. It submits 14 jobs: exactly 12 of b's
// jobs are preempted, a ends holding 4 H100 (its per-model reservation, reclaimed first) and
// 8 A100 (the rest, in its queue's order), its 2 other jobs wait, and it stays so.
TEST_F(PromisesE2eTest, AGroupReserving4H100And8OfAnythingGetsExactlyThatBack) {
  const auto kModels =
      tessera::testing::ConfigBuilder()
          .WithoutIdentity("alice")
          .User("ann", {"a"}, "a-token-1")
          .User("bob", {"b"}, "b-token-1")
          .Group("a", "gpu: 12, models: {H100-80GB: 4}")
          .Group("b")
          .Profile("card", "gpus: 1, cpu: 10m, memory: 16MiB, forms: [whole]")
          .Queue("a", "card", {"a"}, "class: training, models: [A100-80GB, H100-80GB]")
          .Queue("b", "card", {"b"}, "preemptible: true, class: training");
  ASSERT_NO_FATAL_FAILURE(Start(kModels, {{"nh", "8xH100-80GB"}, {"na", "8xA100-80GB"}}));
  const std::vector<std::string> sleeper = {"sleep", "600"};
  std::vector<std::string> b, a;
  for (int i = 0; i < 16; ++i)
    b.push_back(Submit("b-token-1", {{"queue", "b"}, {"command", sleeper}}));
  auto running_on = [&](const std::vector<std::string>& jobs, const std::string& node) {
    int n = 0;
    for (const auto& id : jobs) {
      Json j = AdminJob(id);
      if (j["state"] != "running") continue;
      const std::string where = j.dump();
      n += node.empty() || where.find("\"" + node + "\"") != std::string::npos;
    }
    return n;
  };
  ASSERT_TRUE(WaitFor([&] { return running_on(b, "") == 16; }, 30000)) << Logs();
  for (int i = 0; i < 14; ++i)
    a.push_back(Submit("a-token-1", {{"queue", "a"}, {"command", sleeper}}));
  ASSERT_TRUE(WaitFor([&] { return running_on(a, "") >= 12; }, 30000)) << Logs();
  // Past the grace again, and a few cycles: nothing more is taken.
  std::this_thread::sleep_for(std::chrono::milliseconds(kBoundMs + kGraceMs));
  EXPECT_EQ(Events("kind=job.preempted").size(), 12u);
  EXPECT_EQ(running_on(a, "nh"), 4) << Logs();
  EXPECT_EQ(running_on(a, "na"), 8);
  EXPECT_EQ(running_on(b, "nh"), 4);
  EXPECT_EQ(running_on(b, "na"), 0);
  // GET /v1/groups says it per model.
  const Json groups = Call("GET", "/v1/groups", {}, "admin-token-1");
  bool seen = false;
  for (const auto& g : groups["groups"]) {
    if (g["name"] != "a") continue;
    for (const auto& m : g["models"]) {
      if (m["model"] != "H100-80GB") continue;
      seen = true;
      EXPECT_EQ(m["gpu_milli_usage"], 4000) << groups.dump();
      EXPECT_EQ(m["gpu_milli_reservation"], 4000) << groups.dump();
    }
  }
  EXPECT_TRUE(seen) << groups.dump();
  std::cout << "[ measured ] per-model reclaim: a holds " << running_on(a, "nh") << " H100 + "
            << running_on(a, "na") << " A100, b holds " << running_on(b, "") << "\n";
}

}  // namespace
}  // namespace tessera
