// The served control plane schedules with the quota cycle, with real processes: `tessera serve`
// and `tessera agent --simulate` (declared inventories: there is no GPU here). Reclaim with the
// borrowers' processes really signalled, the class-to-form policy making a MIG instance, gangs
// across agents, backfill by declared walltime, priority preemption.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "proc.h"
#include "serve_fixture.h"
#include "test_dir.h"

namespace tessera {
namespace {

using Json = nlohmann::json;
using testing::kTessera;
using testing::Proc;

// A job that says when it gets SIGTERM (and leaves), else runs until killed.
const std::vector<std::string> kLongJob = {"sh", "-c",
                                           "trap 'echo got-SIGTERM; exit 143' TERM; echo started; "
                                           "while true; do sleep 0.1; done"};

class CycleE2eTest : public testing::ServeFixture {
 protected:
  void Start(const std::string& config,
             const std::vector<std::pair<std::string, std::string>>& agents) {
    dir_ = tessera::testing::FreshTestDir("cycle_e2e");
    std::ofstream(dir_ + "/config.yaml") << tessera::testing::WithJobAccounts(config);
    StartServer();
    if (HasFatalFailure()) return;  // no server: start no agents
    for (const auto& [node, simulate] : agents) StartAgent(node, simulate);
    ASSERT_TRUE(WaitFor([&] { return ReadyNodes() == static_cast<int>(agents.size()); }))
        << server_->Log();
  }
  void TearDown() override {
    // SIGTERM first: an agent stops its jobs (each in a session of its own) before it exits; a
    // SIGKILLed agent would leave them running after the test.
    for (auto& a : agents_) a->KillOnly(SIGTERM);
    agents_.clear();
    server_.reset();
  }
};

const char* kReclaim = R"(
heartbeat_timeout: 5s
cycle: 300ms
grace: 2s
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: vee, role: user, groups: [vision], token: vision-token-1}
  - {name: sam, role: user, groups: [speech], token: speech-token-1}
  - {name: agent, role: agent, token: agent-token-1}
groups:
  - {name: vision, reservation: {gpu: 2}}
  - {name: speech, reservation: {gpu: 2}}
profiles:
  - {name: card, gpus: 1, cpu: 100m, memory: 64MiB, forms: [whole]}
queues:
  - {name: vision, profile: card, groups: [vision], preemptible: true, class: training}
  - {name: speech, profile: card, groups: [speech], class: training}
)";

// 4 cards; vision borrows all 4 with preemptible jobs; speech (reservation 2) submits 2 jobs: the
// cycle reclaims two cards, the borrowers get SIGTERM and go back to pending, and both speech jobs
// run within one cycle plus the grace (plus the agents' heartbeat and start-up slack).
TEST_F(CycleE2eTest, ReclaimSignalsBorrowersAndGivesTheReservationBack) {
  ASSERT_NO_FATAL_FAILURE(Start(kReclaim, {{"n1", "4xH100-80GB"}}));
  std::vector<std::string> vision;
  for (int i = 0; i < 4; ++i)
    vision.push_back(Submit("vision-token-1", {{"queue", "vision"}, {"command", kLongJob}}));
  for (const auto& id : vision) {
    ASSERT_TRUE(WaitFor([&] { return AdminOutput(id).find("started") != std::string::npos; }))
        << Logs();
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::string s1 = Submit("speech-token-1", {{"queue", "speech"}, {"command", kLongJob}});
  std::string s2 = Submit("speech-token-1", {{"queue", "speech"}, {"command", kLongJob}});
  ASSERT_TRUE(
      WaitFor([&] { return AdminState(s1) == "running" && AdminState(s2) == "running"; }, 15000))
      << Logs();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // cycle 0.3 s + grace 2 s, plus heartbeats (1 s) for the stop, the exit and the start.
  EXPECT_LT(took, 0.3 + 2 + 4) << "reclaim took " << took << " s";
  int preempted = 0;
  for (const auto& id : vision) {
    Json j = AdminJob(id);
    if (j["preemptions"].get<int>() == 0) continue;
    ++preempted;
    EXPECT_EQ(j["state"], "pending") << j.dump();
    EXPECT_NE(j["reason"].get<std::string>().find(":"), std::string::npos)
        << j.dump();  // step: reason
    EXPECT_NE(AdminOutput(id).find("got-SIGTERM"), std::string::npos)
        << id << ": " << AdminOutput(id);
  }
  EXPECT_EQ(preempted, 2);
  // The events say who was preempted, for whom and why.
  Json ev = Call("GET", "/v1/events?kind=job.preempted", {}, "admin-token-1");
  ASSERT_EQ(ev["events"].size(), 2u) << ev.dump();
  EXPECT_NE(ev["events"][0]["reason"].get<std::string>().find("speech"), std::string::npos)
      << ev.dump();
}

const char* kForms = R"(
heartbeat_timeout: 5s
cycle: 300ms
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: alice, role: user, groups: [research], token: alice-token-1}
  - {name: agent, role: agent, token: agent-token-1}
groups: [{name: research}]
profiles:
  - {name: serve, gpus: 1, gpu_fraction: 0.1, gpu_memory: 10GB, cpu: 100m, memory: 64MiB, forms: [partition, share, whole]}
  - {name: nb, gpus: 1, gpu_fraction: 0.1, gpu_memory: 8GiB, cpu: 100m, memory: 64MiB, forms: [share]}
  - {name: train, gpus: 1, cpu: 100m, memory: 64MiB, forms: [whole]}
class_forms:
  inference: [partition, share, whole]
queues:
  - {name: inference, profile: serve, groups: [research], class: inference}
  - {name: notebooks, profile: nb, groups: [research], class: interactive}
  - {name: training, profile: train, groups: [research], class: training}
)";

// On 2 x A100-80GB: inference asking 10 GB (9537 MiB) runs on a 1g.10gb MIG instance (its
// environment names the MIG UUID; `nodes` shows the layout), training on a whole card, then a
// notebook on a share.
TEST_F(CycleE2eTest, TheClassToFormPolicyPicksMigShareAndWhole) {
  ASSERT_NO_FATAL_FAILURE(Start(kForms, {{"a100", "2xA100-80GB"}}));
  const std::vector<std::string> show = {"sh", "-c",
                                         "echo devices=$CUDA_VISIBLE_DEVICES; sleep 30"};
  std::string inf = Submit("alice-token-1", {{"queue", "inference"}, {"command", show}});
  std::string train = Submit(
      "alice-token-1",
      {{"queue", "training"}, {"command", {"sh", "-c", "echo devices=$CUDA_VISIBLE_DEVICES"}}});
  ASSERT_TRUE(WaitFor([&] { return AdminOutput(inf).find("devices=MIG-") != std::string::npos; }))
      << Logs();
  Json j = AdminJob(inf);
  EXPECT_EQ(j["placement"]["form"], "partition") << j.dump();
  const std::string slot = j["placement"]["devices"][0].value("partition", "");
  EXPECT_EQ(slot.rfind("1g.10gb@", 0), 0u) << j.dump();
  ASSERT_TRUE(WaitFor([&] { return AdminState(train) == "succeeded"; })) << Logs();
  EXPECT_NE(AdminOutput(train).find("devices=GPU-"), std::string::npos) << AdminOutput(train);
  EXPECT_EQ(AdminJob(train)["spec"]["gpus"], 1);
  Json nodes = Call("GET", "/v1/nodes", {}, "admin-token-1");
  bool shown = false;
  for (const auto& d : nodes["nodes"][0]["devices"]) {
    for (const auto& p : d["partitions"]) shown = shown || (p["name"] == slot && p["job"] == inf);
  }
  EXPECT_TRUE(shown) << nodes.dump();
  // The CLI shows the layout too.
  {
    Proc cli({kTessera, "nodes", "--url", "http://127.0.0.1:" + std::to_string(port_),
              "--token-file", tessera::testing::TokenFile("admin-token-1")},
             dir_ + "/cli.log");
    ASSERT_TRUE(WaitFor([&] { return !cli.Alive(); }));
    EXPECT_NE(cli.Log().find(slot), std::string::npos) << cli.Log();
  }
  // The training card is free again: a notebook gets a share of it.
  std::string nb = Submit("alice-token-1", {{"queue", "notebooks"}, {"command", show}});
  ASSERT_TRUE(WaitFor([&] { return AdminOutput(nb).find("devices=GPU-") != std::string::npos; }))
      << Logs();
  EXPECT_EQ(AdminJob(nb)["placement"]["form"], "share");
  EXPECT_EQ(AdminJob(nb)["placement"]["devices"][0]["gpu_memory_mib"], 8192);
}

// On 1 x MI300X (SPX+NPS1, not split): inference asking 10 GB gets a CPX partition (24 GB): the
// cycle repartitions the idle card, the agent switches its compute mode under the partition
// engine's rules and exposes the partition as a logical GPU; a second job gets another one.
const char* kAmd = R"(
heartbeat_timeout: 5s
cycle: 300ms
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: alice, role: user, groups: [research], token: alice-token-1}
  - {name: agent, role: agent, token: agent-token-1}
groups: [{name: research}]
profiles:
  - {name: serve, gpus: 1, gpu_fraction: 0.1, gpu_memory: 10GB, cpu: 100m, memory: 64MiB, forms: [partition]}
queues:
  - {name: inference, profile: serve, groups: [research], class: inference}
)";

TEST_F(CycleE2eTest, AnAmdCardIsSplitIntoComputePartitionsForInference) {
  ASSERT_NO_FATAL_FAILURE(Start(kAmd, {{"mi300", "1xMI300X"}}));
  const std::vector<std::string> show = {"sh", "-c", "echo rocr=$ROCR_VISIBLE_DEVICES; sleep 30"};
  std::string a = Submit("alice-token-1", {{"queue", "inference"}, {"command", show}});
  std::string b = Submit("alice-token-1", {{"queue", "inference"}, {"command", show}});
  for (const std::string& id : {a, b}) {
    ASSERT_TRUE(WaitFor([&] { return AdminOutput(id).find("rocr=") != std::string::npos; }, 20000))
        << Logs();
    Json j = AdminJob(id);
    EXPECT_EQ(j["placement"]["form"], "partition") << j.dump();
    EXPECT_EQ(j["placement"]["devices"][0].value("partition", "").rfind("CPX#", 0), 0u) << j.dump();
  }
  const std::string out_a = AdminOutput(a), out_b = AdminOutput(b);
  EXPECT_NE(out_a.find("rocr=0"), std::string::npos)
      << out_a;             // one device: partition i is logical GPU i
  EXPECT_NE(out_a, out_b);  // two different partitions
  EXPECT_NE(agents_[0]->Log().find("partition CPX#"), std::string::npos) << Logs();
}

const char* kGangs = R"(
heartbeat_timeout: 5s
cycle: 300ms
grace: 1s
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: alice, role: user, groups: [research], token: alice-token-1}
  - {name: agent, role: agent, token: agent-token-1}
groups: [{name: research}]
profiles:
  - {name: train, gpus: 1, max_gpus: 2, cpu: 100m, memory: 64MiB, forms: [whole]}
queues:
  - {name: urgent, profile: train, groups: [research], priority: 10, class: training}
  - {name: training, profile: train, groups: [research], priority: 5, class: training}
  - {name: scavenger, profile: train, groups: [research], priority: -5, preemptible: true, class: training}
)";

// Two agents with one card each: a 2-card job is a gang across them. It waits, all or nothing
// (holding nothing), while one card is busy, then starts on both agents at once.
TEST_F(CycleE2eTest, AGangAcrossAgentsStartsAllOrNothing) {
  ASSERT_NO_FATAL_FAILURE(Start(kGangs, {{"a", "1xH100-80GB"}, {"b", "1xH100-80GB"}}));
  std::string busy = Submit("alice-token-1", {{"queue", "training"}, {"command", kLongJob}});
  ASSERT_TRUE(WaitFor([&] { return AdminState(busy) == "running"; })) << Logs();
  std::string gang =
      Submit("alice-token-1", {{"queue", "training"}, {"command", kLongJob}, {"gpus", 2}});
  ASSERT_TRUE(WaitFor([&] {
    return AdminJob(gang).value("reason", "").find("all or nothing") != std::string::npos;
  })) << AdminJob(gang).dump();
  Json g = AdminJob(gang);
  EXPECT_EQ(g["state"], "pending");
  EXPECT_FALSE(g.contains("placement")) << g.dump();  // nothing held while it waits
  ASSERT_TRUE(Call("POST", "/v1/jobs/" + busy + "/cancel", {}, "admin-token-1").is_object());
  ASSERT_TRUE(WaitFor([&] { return AdminState(gang) == "running"; })) << Logs();
  g = AdminJob(gang);
  std::set<std::string> nodes;
  for (const auto& d : g["placement"]["devices"]) nodes.insert(d["node"].get<std::string>());
  EXPECT_EQ(nodes, (std::set<std::string>{"a", "b"})) << g.dump();
  ASSERT_TRUE(WaitFor([&] {
    return agents_[0]->Log().find("job " + gang + " started") != std::string::npos &&
           agents_[1]->Log().find("job " + gang + " started") != std::string::npos;
  })) << Logs();
  // Cancelled, it stops on both.
  Call("POST", "/v1/jobs/" + gang + "/cancel", {}, "admin-token-1");
  ASSERT_TRUE(WaitFor([&] { return AdminState(gang) == "cancelled"; })) << Logs();
}

// One agent with two cards. Backfill: behind a blocked 2-card head, a 1-card job whose walltime
// ends before the head's reserved start runs; one that declares no walltime waits at Backfill.
// Priority: an urgent job preempts a scavenger job of the same group (SIGTERM, then pending).
TEST_F(CycleE2eTest, BackfillByWalltimeAndPriorityPreemption) {
  ASSERT_NO_FATAL_FAILURE(Start(kGangs, {{"a", "2xH100-80GB"}}));
  std::string busy =
      Submit("alice-token-1", {{"queue", "training"}, {"command", kLongJob}, {"walltime", "1h"}});
  ASSERT_TRUE(WaitFor([&] { return AdminState(busy) == "running"; })) << Logs();
  std::string head =
      Submit("alice-token-1", {{"queue", "training"}, {"command", kLongJob}, {"gpus", 2}});
  std::string quick =
      Submit("alice-token-1",
             {{"queue", "training"}, {"command", {"sh", "-c", "echo quick"}}, {"walltime", "10s"}});
  std::string open_ended = Submit("alice-token-1", {{"queue", "training"}, {"command", kLongJob}});
  ASSERT_TRUE(WaitFor([&] { return AdminState(quick) == "succeeded"; })) << Logs();
  EXPECT_EQ(AdminState(head), "pending");
  ASSERT_TRUE(WaitFor([&] { return AdminJob(open_ended)["wait"].value("step", "") == "Backfill"; }))
      << AdminJob(open_ended).dump();
  EXPECT_EQ(AdminState(open_ended), "pending");
  Json placed = Call("GET", "/v1/events?kind=job.placed&subject=" + quick, {}, "admin-token-1");
  ASSERT_EQ(placed["events"].size(), 1u) << placed.dump();
  EXPECT_NE(placed["events"][0]["reason"].get<std::string>().find("[backfill]"), std::string::npos)
      << placed.dump();
  for (const auto& id : {head, open_ended, busy})
    Call("POST", "/v1/jobs/" + id + "/cancel", {}, "admin-token-1");
  ASSERT_TRUE(WaitFor([&] { return AdminState(busy) == "cancelled"; })) << Logs();
  // Priority preemption inside the group.
  std::string scav1 = Submit("alice-token-1", {{"queue", "scavenger"}, {"command", kLongJob}});
  std::string scav2 = Submit("alice-token-1", {{"queue", "scavenger"}, {"command", kLongJob}});
  ASSERT_TRUE(WaitFor([&] {
    return AdminOutput(scav1).find("started") != std::string::npos &&
           AdminOutput(scav2).find("started") != std::string::npos;
  })) << Logs();
  std::string urgent = Submit("alice-token-1", {{"queue", "urgent"}, {"command", kLongJob}});
  ASSERT_TRUE(WaitFor([&] { return AdminState(urgent) == "running"; })) << Logs();
  int preempted = 0;
  for (const auto& id : {scav1, scav2}) {
    Json s = AdminJob(id);
    if (s["preemptions"].get<int>() == 0) continue;
    ++preempted;
    EXPECT_EQ(s["state"], "pending") << s.dump();
    EXPECT_NE(AdminOutput(id).find("got-SIGTERM"), std::string::npos) << AdminOutput(id);
  }
  EXPECT_EQ(preempted, 1);
}

const char* kDrain = R"(
heartbeat_timeout: 30s
cycle: 300ms
grace: 6s
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: alice, role: user, groups: [lab], token: alice-token-1}
  - {name: agent, role: agent, token: agent-token-1}
groups: [{name: lab}]
profiles:
  - {name: card, gpus: 1, cpu: 100m, memory: 64MiB, forms: [whole]}
  - {name: serve, gpus: 1, gpu_fraction: 0.1, gpu_memory: 9GiB, cpu: 100m, memory: 64MiB, forms: [partition]}
queues:
  - {name: batch, profile: card, groups: [lab], preemptible: true, class: batch}
  - {name: serve, profile: serve, groups: [lab], priority: 10, class: inference}
)";

// A repartition with drain across a control-plane restart: a preemptible job holds the only
// A100-80GB whole and ignores SIGTERM; an inference job needs a MIG instance, so the card is
// drained. The server is killed (SIGKILL) mid-drain and started again: the drain is still there,
// nothing is preempted twice, and when the grace ends (SIGKILL) the card gets its MIG instance
// and the inference job runs on it.
TEST_F(CycleE2eTest, ARepartitionWithDrainSurvivesAServerRestart) {
  ASSERT_NO_FATAL_FAILURE(Start(kDrain, {{"n1", "1xA100-80GB"}}));
  const std::vector<std::string> stubborn = {"sh", "-c",
                                             "trap 'echo ignoring-SIGTERM' TERM; echo started; "
                                             "while true; do sleep 0.1; done"};
  std::string batch = Submit("alice-token-1", {{"queue", "batch"}, {"command", stubborn}});
  ASSERT_TRUE(WaitFor([&] { return AdminOutput(batch).find("started") != std::string::npos; }))
      << Logs();
  std::string serve = Submit(
      "alice-token-1", {{"queue", "serve"},
                        {"command", {"sh", "-c", "echo devices=$CUDA_VISIBLE_DEVICES; sleep 30"}}});
  ASSERT_TRUE(WaitFor([&] { return AdminState(batch) == "preempting"; })) << Logs();
  auto draining = [&] {
    Json n = Call("GET", "/v1/nodes", {}, "admin-token-1");
    return n.is_object() && !n["nodes"].empty() &&
           n["nodes"][0]["devices"][0].value("draining", false);
  };
  // A view asked while a cycle holds the lock is the last rendering (views.cc, ViewOf): the drain
  // shows within a moment, not necessarily in the same instant as the job's state.
  ASSERT_TRUE(WaitFor(draining)) << Logs();
  server_->Kill(SIGKILL);
  const int before = port_;
  StartServer();  // same port, same data directory
  ASSERT_EQ(port_, before);
  // The first answer from the new server (a restart takes a moment to accept).
  Json nodes;
  ASSERT_TRUE(WaitFor([&] {
    return (nodes = Call("GET", "/v1/nodes", {}, "admin-token-1")).is_object();
  })) << server_->Log();
  EXPECT_TRUE(nodes["nodes"][0]["devices"][0].value("draining", false))
      << "the drain was forgotten across the restart: " << nodes.dump();
  EXPECT_EQ(AdminState(batch), "preempting");
  ASSERT_TRUE(
      WaitFor([&] { return AdminOutput(serve).find("devices=MIG-") != std::string::npos; }, 25000))
      << Logs();
  Json s = AdminJob(serve);
  EXPECT_EQ(s["placement"]["form"], "partition") << s.dump();
  Json b = AdminJob(batch);
  EXPECT_EQ(b["preemptions"], 1) << b.dump();
  EXPECT_NE(b["state"], "running") << b.dump();
  Json ev = Call("GET", "/v1/events?kind=job.preempted", {}, "admin-token-1");
  EXPECT_EQ(ev["events"].size(), 1u) << ev.dump();
  EXPECT_NE(AdminOutput(batch).find("ignoring-SIGTERM"),
            std::string::npos);  // SIGTERM first, SIGKILL after the grace
}

const char* kTelemetry = R"(
heartbeat_timeout: 5s
cycle: 300ms
idle_after: 2s
utilization_sample: 1s
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: alice, role: user, groups: [research], token: alice-token-1}
  - {name: agent, role: agent, token: agent-token-1}
groups: [{name: research}]
profiles:
  - {name: train, gpus: 1, gpu_fraction: 0.5, gpu_memory: 8GiB, cpu: 100m, memory: 64MiB, forms: [whole, share]}
queues:
  - {name: training, profile: train, groups: [research], class: training}
)";

// Telemetry from a real agent on a simulated node: a job that only sleeps is "held but idle"
// after idle_after (a job.idle event, marked on its device), a job that computes stays active and
// its device shows utilization; `tessera usage` attributes both to the group, with the idle part.
TEST_F(CycleE2eTest, AnIdleHoldingIsMarkedAndUsageCountsIt) {
  ASSERT_NO_FATAL_FAILURE(Start(kTelemetry, {{"a", "2xH100-80GB"}}));
  const std::string sleeper =
      Submit("alice-token-1", {{"queue", "training"}, {"command", {"sleep", "1000"}}});
  const std::string busy = Submit(
      "alice-token-1", {{"queue", "training"}, {"command", {"sh", "-c", "while :; do :; done"}}});
  ASSERT_TRUE(WaitFor([&] {
    Json j = AdminJob(sleeper);
    return j.contains("activity") && j["activity"].value("idle", false);
  })) << AdminJob(sleeper).dump()
      << Logs();
  Json b = AdminJob(busy);
  ASSERT_TRUE(b.contains("activity")) << b.dump();
  EXPECT_FALSE(b["activity"]["idle"].get<bool>()) << b.dump();
  Json idle = Call("GET", "/v1/events?kind=job.idle&subject=" + sleeper, {}, "admin-token-1");
  ASSERT_EQ(idle["events"].size(), 1u) << idle.dump();
  // The device map: the sleeper's holding is marked idle; the busy job's device shows activity.
  Json nodes = Call("GET", "/v1/nodes", {}, "admin-token-1");
  bool marked = false;
  int busy_util = -1;
  for (const auto& d : nodes["nodes"][0]["devices"]) {
    for (const auto& h : d["holders"]) {
      if (h["job"] == sleeper) marked = h["idle"].get<bool>();
      if (h["job"] == busy && d.contains("telemetry"))
        busy_util = d["telemetry"].value("util_pct", -1);
    }
  }
  EXPECT_TRUE(marked) << nodes.dump();
  EXPECT_GT(busy_util, 0) << nodes.dump();
  Json summary = Call("GET", "/v1/summary", {}, "admin-token-1");
  EXPECT_EQ(summary["groups"][0]["gpu_milli_held_idle"], 1000) << summary.dump();
  // Usage from the CLI: two jobs, some of the held time idle. `tessera ARGS` against this server,
  // its exit status and what it printed (stderr too).
  auto run = [&](const std::string& args) {
    FILE* f = ::popen(("TESSERA_TOKEN=admin-token-1 " + std::string(kTessera) + " " + args +
                       " --url http://127.0.0.1:" + std::to_string(port_) + " 2>&1")
                          .c_str(),
                      "r");
    std::string text;
    char chunk[4096];
    for (size_t n = 0; f != nullptr && (n = fread(chunk, 1, sizeof chunk, f)) > 0;)
      text.append(chunk, n);
    const int rc = f != nullptr ? ::pclose(f) : -1;
    return std::make_pair(rc, text);
  };
  auto [usage_rc, out] = run("usage --since 10m --by group --json");
  ASSERT_EQ(usage_rc, 0) << out;
  Json u = Json::parse(out, nullptr, false);
  ASSERT_TRUE(u.is_object()) << out;
  ASSERT_EQ(u["rows"].size(), 1u) << out;
  EXPECT_EQ(u["rows"][0]["group"], "research");
  EXPECT_EQ(u["rows"][0]["jobs"], 2);
  EXPECT_GT(u["rows"][0]["idle_gpu_milli_ms"].get<int64_t>(), 0) << out;
  EXPECT_LT(u["rows"][0]["idle_gpu_milli_ms"].get<int64_t>(),
            u["rows"][0]["gpu_milli_ms"].get<int64_t>())
      << out;
  // The same as CSV (exact integer columns) and as a table for people.
  auto [csv_rc, csv] = run("usage --since 10m --by group --csv");
  ASSERT_EQ(csv_rc, 0) << csv;
  EXPECT_EQ(csv.substr(0, csv.find('\n')),
            "group,jobs,gpu_milli_ms,idle_gpu_milli_ms,gpu_memory_mib_ms,idle_gpu_memory_mib_ms,"
            "cpu_milli_ms,gpu_hours,gpu_hours_used")
      << csv;
  EXPECT_EQ(csv.find("\nresearch,2,"), csv.find('\n')) << csv;
  auto [table_rc, table] = run("usage --since 10m --by form");
  ASSERT_EQ(table_rc, 0) << table;
  EXPECT_NE(table.find("FORM"), std::string::npos) << table;
  EXPECT_NE(table.find("(total)"), std::string::npos) << table;
  auto [bad_rc, bad] = run("usage --since yesterday-ish");
  EXPECT_NE(bad_rc, 0);
  EXPECT_NE(bad.find("'yesterday-ish' is not a time"), std::string::npos) << bad;
  // The history is served from the store.
  Json util = Call("GET", "/v1/utilization?by=group", {}, "admin-token-1");
  ASSERT_FALSE(util["samples"].empty()) << util.dump();
  EXPECT_EQ(util["samples"].back()["gpu_milli_allocated"], 2000) << util.dump();
  // What-if from the CLI: the two jobs replayed with training on shares (the simulator's run
  // beside the as-configured one).
  auto [whatif_rc, wout] = run("whatif --since 10m --forms training=share --json");
  ASSERT_EQ(whatif_rc, 0) << wout;
  Json w = Json::parse(wout, nullptr, false);
  ASSERT_TRUE(w.is_object()) << wout;
  EXPECT_EQ(w["jobs"], 2) << wout;
  EXPECT_EQ(w["classes"]["training"]["observed_cards"], 2) << wout;
  EXPECT_EQ(w["classes"]["training"]["as_configured_cards"], 2) << wout;
  EXPECT_EQ(w["classes"]["training"]["what_if_cards"], 1) << wout;  // two shares on one card
  for (const auto& id : {sleeper, busy})
    Call("POST", "/v1/jobs/" + id + "/cancel", {}, "admin-token-1");
}

}  // namespace
}  // namespace tessera
