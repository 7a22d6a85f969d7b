// The utilization history in the store and usage attribution from the event log, on a real
// engine over SQLite with an injected clock: a scripted history whose figures are worked out by
// hand below.
#include <gtest/gtest.h>

#include <algorithm>

#include "api/engine.h"
#include "engine_fixture.h"
#include "test_dir.h"

namespace tessera::api {
namespace {

const char* kConfig = R"(
idle_after: 60s
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: alice, role: user, groups: [research], token: alice-token-1}
  - {name: bob, role: user, groups: [prod], token: bob-token-12}
  - {name: agent, role: agent, token: agent-token-1}
groups:
  - {name: research}
  - {name: prod}
profiles:
  - {name: nb, gpus: 1, gpu_fraction: 0.1, gpu_memory: 8GiB, max_gpu_memory: 40GiB, cpu: 1, memory: 1GiB, forms: [share]}
  - {name: train, gpus: 1, max_gpus: 4, cpu: 1, memory: 1GiB, forms: [whole]}
queues:
  - {name: notebooks, profile: nb, groups: [research], class: interactive}
  - {name: training, profile: train, groups: [research, prod], class: training}
)";

class HistoryTest : public testing::EngineFixture {
 protected:
  void SetUp() override {
    now_ = 3'000'000;  // on a 5-minute boundary
    Start("history", kConfig);
  }
  std::string Submit(const std::string& who, Json body) {
    auto r = engine_->Submit(Who(who), body);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? (*r)["id"].get<std::string>() : "";
  }
  Json Heartbeat(Json body) {
    body["node"] = "n1";
    auto r = engine_->agents().Heartbeat(Who("agent"), body);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : Json();
  }
  Json Usage(const std::string& who, int64_t since, int64_t until, const std::string& by) {
    auto u = engine_->views().Usage(Who(who), {since, until, by});
    EXPECT_TRUE(u.ok()) << u.status().ToString();
    return u.ok() ? *u : Json();
  }
  static Json Row(const Json& usage, const std::string& key, const std::string& value) {
    for (const auto& r : usage["rows"]) {
      if (r[key] == value) return r;
    }
    return Json();
  }
};

TEST_F(HistoryTest, UtilizationIsKeptInTheStoreRolledUpAndBrokenDown) {
  Register("n1", 2);
  ASSERT_FALSE(Submit("alice", {{"queue", "training"}, {"command", {"sleep", "1000"}}}).empty());
  const int64_t t0 = now_;
  for (int k = 0; k < 36; ++k) {  // six minutes of ticks, one sample every 10 s
    Heartbeat(Json::object());
    ASSERT_TRUE(engine_->Tick().ok());
    now_ += 10'000;
  }
  Views::HistoryQuery q;
  q.since_ms = t0;
  q.until_ms = t0 + 360'000;
  q.by = "group";
  auto u = engine_->views().Utilization(Who("admin"), q);
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  ASSERT_EQ((*u)["samples"].size(), 36u) << u->dump();
  const Json& first = (*u)["samples"][0];
  EXPECT_EQ(first["time_ms"], t0);
  EXPECT_EQ(first["gpu_milli_total"], 2000);
  EXPECT_EQ(first["gpu_milli_allocated"], 1000);
  EXPECT_EQ(first["gpu_memory_mib_allocated"], 81920);
  EXPECT_EQ(first["by"]["research"]["gpu_milli"], 1000);
  // Survives a restart: read back from the store.
  Reopen();
  u = engine_->views().Utilization(Who("admin"), q);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ((*u)["samples"].size(), 36u);
  // Other groups' rows are not shown to bob.
  auto bob = engine_->views().Utilization(Who("bob"), q);
  ASSERT_TRUE(bob.ok());
  EXPECT_FALSE((*bob)["samples"][0]["by"].contains("research")) << bob->dump();
  EXPECT_EQ((*bob)["samples"][0]["gpu_milli_total"], 2000);
  // Nor, by queue, a queue another group uses too (training: research and prod): its total is
  // alice's use. Only queues no other group uses are broken down for a user.
  Views::HistoryQuery by_queue = q;
  by_queue.by = "queue";
  auto admin_q = engine_->views().Utilization(Who("admin"), by_queue);
  ASSERT_TRUE(admin_q.ok());
  EXPECT_EQ((*admin_q)["samples"][0]["by"]["training"]["gpu_milli"], 1000) << admin_q->dump();
  for (const char* user : {"bob", "alice"}) {
    auto u_q = engine_->views().Utilization(Who(user), by_queue);
    ASSERT_TRUE(u_q.ok());
    EXPECT_FALSE((*u_q)["samples"][0]["by"].contains("training")) << user << ": " << u_q->dump();
  }
  // A step of 5 minutes reads the rolled-up averages: the first bucket (t0 .. t0+5min) was
  // complete at the tick at t0+5min and holds the mean of its 30 samples.
  q.step_ms = 300'000;
  u = engine_->views().Utilization(Who("admin"), q);
  ASSERT_TRUE(u.ok());
  ASSERT_EQ((*u)["resolution_ms"], 300'000);
  ASSERT_EQ((*u)["samples"].size(), 1u) << u->dump();
  EXPECT_EQ((*u)["samples"][0]["samples"], 30);
  EXPECT_EQ((*u)["samples"][0]["gpu_milli_allocated"], 1000);
  // A step of 20 s over the fine samples: pairs averaged.
  q.step_ms = 20'000;
  u = engine_->views().Utilization(Who("admin"), q);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ((*u)["samples"].size(), 18u);
  EXPECT_EQ((*u)["samples"][0]["samples"], 2);
  // Bad queries name what is wrong.
  q.by = "planet";
  EXPECT_EQ(engine_->views().Utilization(Who("admin"), q).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(engine_->views().Utilization(Who("agent"), {}).status().code(),
            StatusCode::kPermissionDenied);
}

// A group's row in a sample breaks its holding down by form, with the held-but-idle part where it
// is: a whole card in use, an 8 GiB share held but idle (issue 35: "which team holds idle GPUs").
TEST_F(HistoryTest, AGroupsSampleRowSaysPerFormWhatItHoldsAndWhatOfThatIsIdle) {
  Register("n1", 2);
  const int64_t t0 = now_;
  const std::string a = Submit("alice", {{"queue", "training"}, {"command", {"sleep", "1000"}}});
  Heartbeat(Json::object());  // a's start order
  const std::string b = Submit(
      "alice", {{"queue", "notebooks"}, {"command", {"sleep", "1000"}}, {"gpu_memory", "8GiB"}});
  Heartbeat(Json{{"running", {{{"job", a}, {"pid", 11}, {"active", true}}}}});  // b's start order
  // a active, b never: held but idle after idle_after (60 s).
  for (int k = 1; k <= 9; ++k) {
    now_ = t0 + k * 10'000;
    Heartbeat(Json{{"running",
                    {{{"job", a}, {"pid", 11}, {"active", true}},
                     {{"job", b}, {"pid", 12}, {"active", false}}}}});
  }
  ASSERT_TRUE((*engine_->views().GetJob(Who("admin"), b))["activity"]["idle"].get<bool>());
  ASSERT_TRUE(engine_->Tick().ok());
  Views::HistoryQuery q;
  q.since_ms = t0;
  q.until_ms = now_ + 1;
  q.by = "group";
  auto u = engine_->views().Utilization(Who("admin"), q);
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  ASSERT_FALSE((*u)["samples"].empty()) << u->dump();
  const Json& research = (*u)["samples"].back()["by"]["research"];
  EXPECT_EQ(research["gpu_milli"], 1100) << research.dump();
  EXPECT_EQ(research["gpu_milli_held_idle"], 100) << research.dump();
  EXPECT_EQ(research["form"]["whole"], Json({{"gpu_milli", 1000}, {"gpu_milli_held_idle", 0}}))
      << research.dump();
  EXPECT_EQ(research["form"]["share"], Json({{"gpu_milli", 100}, {"gpu_milli_held_idle", 100}}))
      << research.dump();
  EXPECT_FALSE(research["form"].contains("partition")) << research.dump();
  // The queue and pool rows are not broken down by form.
  q.by = "queue";
  u = engine_->views().Utilization(Who("admin"), q);
  ASSERT_TRUE(u.ok());
  EXPECT_FALSE((*u)["samples"].back()["by"]["training"].contains("form")) << u->dump();
}

// A scripted history: a whole card held 295 s of the window and a 8 GiB share held 190 s, idle
// for 130 s of them. Every figure below is worked out by hand from those times.
TEST_F(HistoryTest, UsageFromTheEventLogMatchesTheJobLifetimes) {
  Register("n1", 2);
  const int64_t t0 = now_;
  const std::string a = Submit("alice", {{"queue", "training"}, {"command", {"sleep", "1000"}}});
  Json hb = Heartbeat(Json::object());
  ASSERT_EQ(hb["start"].size(), 1u);
  now_ = t0 + 10'000;
  const std::string b = Submit(
      "alice", {{"queue", "notebooks"}, {"command", {"sleep", "1000"}}, {"gpu_memory", "8GiB"}});
  Json bj = *engine_->views().GetJob(Who("admin"), b);
  ASSERT_EQ(bj["placement"]["gpu_milli"], 100) << bj.dump();
  ASSERT_EQ(bj["placement"]["gpu_memory_mib"], 8192);
  Json aj = *engine_->views().GetJob(Who("admin"), a);
  ASSERT_EQ(aj["placement"]["gpu_milli"], 1000);
  ASSERT_EQ(aj["placement"]["gpu_memory_mib"], 81920) << aj.dump();
  auto running = [&](bool a_active, bool b_active) {
    return Json{{"running",
                 {{{"job", a}, {"pid", 11}, {"active", a_active}},
                  {{"job", b}, {"pid", 12}, {"active", b_active}}}}};
  };
  Heartbeat(Json{{"running", {{{"job", a}, {"pid", 11}, {"active", true}}}}});  // b's start order
  now_ = t0 + 20'000;
  Heartbeat(running(true, false));  // b running since t0+20s: its activity clock starts there
  now_ = t0 + 70'000;
  Heartbeat(running(true, false));  // 50 s without activity: not yet idle (idle_after 60s)
  EXPECT_FALSE((*engine_->views().GetJob(Who("admin"), b))["activity"]["idle"].get<bool>());
  now_ = t0 + 90'000;
  Heartbeat(running(true, false));  // 70 s: held but idle, since t0+20s
  Json idle = *engine_->views().GetJob(Who("admin"), b);
  EXPECT_TRUE(idle["activity"]["idle"].get<bool>()) << idle.dump();
  EXPECT_EQ(idle["activity"]["last_active_ms"], t0 + 20'000);
  Json nodes = *engine_->views().Nodes(Who("admin"));
  bool marked = false;
  for (const auto& h : nodes["nodes"][0]["devices"][0]["holders"])
    marked = marked || (h["job"] == b && h["idle"] == true);
  for (const auto& h : nodes["nodes"][0]["devices"][1]["holders"])
    marked = marked || (h["job"] == b && h["idle"] == true);
  EXPECT_TRUE(marked) << nodes.dump();
  Json summary = *engine_->views().Summary(Who("admin"));
  EXPECT_EQ(summary["groups"][0]["gpu_milli_held_idle"], 100) << summary.dump();
  now_ = t0 + 150'000;
  Heartbeat(running(true, true));  // active again: idle from t0+20s to t0+150s
  EXPECT_FALSE((*engine_->views().GetJob(Who("admin"), b))["activity"]["idle"].get<bool>());
  now_ = t0 + 200'000;
  Heartbeat(Json{{"running", {{{"job", a}, {"pid", 11}, {"active", true}}}},
                 {"finished", {{{"job", b}, {"exit_code", 0}}}}});
  ASSERT_EQ((*engine_->views().GetJob(Who("admin"), b))["state"], "succeeded");
  ASSERT_TRUE(engine_->Sync().ok());
  now_ = t0 + 300'000;

  // The window [t0+5s, t0+300s): a holds [t0, now) -> 295 s; b holds [t0+10s, t0+200s) -> 190 s,
  // idle [t0+20s, t0+150s) -> 130 s.
  const int64_t since = t0 + 5'000, until = t0 + 300'000;
  const int64_t a_ms = 295'000, b_ms = 190'000, b_idle_ms = 130'000;
  Json g = Usage("admin", since, until, "group");
  Json research = Row(g, "group", "research");
  ASSERT_FALSE(research.is_null()) << g.dump();
  EXPECT_EQ(research["jobs"], 2);
  EXPECT_EQ(research["gpu_milli_ms"], 1000 * a_ms + 100 * b_ms);
  EXPECT_EQ(research["gpu_memory_mib_ms"], 81920 * a_ms + 8192 * b_ms);  // to the MiB-millisecond
  EXPECT_EQ(research["cpu_milli_ms"], 1000 * a_ms + 1000 * b_ms);
  EXPECT_EQ(research["idle_gpu_milli_ms"], 100 * b_idle_ms);
  EXPECT_EQ(research["idle_gpu_memory_mib_ms"], 8192 * b_idle_ms);
  // 1000*295000 + 100*190000 = 314,000,000 milli-GPU-ms = 0.0872... GPU-hours.
  EXPECT_EQ(research["gpu_hours"], "0.087");
  EXPECT_EQ(g["total"]["gpu_milli_ms"], research["gpu_milli_ms"]);
  // By form, split by slice.
  Json f = Usage("admin", since, until, "form");
  Json whole = Row(f, "form", "whole"), share = Row(f, "form", "share");
  EXPECT_EQ(whole["slice"], "1x");
  EXPECT_EQ(whole["gpu_milli_ms"], 1000 * a_ms);
  EXPECT_EQ(share["slice"], "8GiB");
  EXPECT_EQ(share["gpu_memory_mib_ms"], 8192 * b_ms);
  // By identity and by queue the same totals.
  EXPECT_EQ(Row(Usage("admin", since, until, "identity"), "identity", "alice")["gpu_milli_ms"],
            1000 * a_ms + 100 * b_ms);
  EXPECT_EQ(Row(Usage("admin", since, until, "queue"), "queue", "notebooks")["gpu_milli_ms"],
            100 * b_ms);
  // A window inside b's idle stretch: all of b's time there is idle.
  Json mid = Usage("admin", t0 + 30'000, t0 + 40'000, "queue");
  EXPECT_EQ(Row(mid, "queue", "notebooks")["idle_gpu_milli_ms"], 100 * 10'000);
  EXPECT_EQ(Row(mid, "queue", "notebooks")["gpu_milli_ms"], 100 * 10'000);
  // bob sees none of research's usage; bad queries are refused.
  EXPECT_TRUE(Usage("bob", since, until, "group")["rows"].empty());
  EXPECT_EQ(engine_->views().Usage(Who("admin"), {since, until, "planet"}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(engine_->views().Usage(Who("admin"), {until, since, "group"}).status().code(),
            StatusCode::kInvalidArgument);
  // The same after a restart: it is all in the log.
  Reopen();
  EXPECT_EQ(Row(Usage("admin", since, until, "group"), "group", "research")["gpu_memory_mib_ms"],
            81920 * a_ms + 8192 * b_ms);
}

// The replay runs every cycle of its window: GET /v1/whatif without `since` once replayed from
// 1970 (56 years of one-second cycles, an API thread and gigabytes gone). Without `since` it is
// the last 7 days, as `tessera whatif` asks; a window over 31 days is refused, naming `since`.
TEST_F(HistoryTest, TheWhatIfWindowIsSevenDaysUnlessSaidAndAtMostThirtyOne) {
  constexpr int64_t kDayMs = 86'400'000;
  now_ = 40 * kDayMs;
  const int64_t now = now_.NowMs();
  auto absent = engine_->views().WhatIfScenario(Who("admin"), 0, 0);
  ASSERT_TRUE(absent.ok()) << absent.status().ToString();
  EXPECT_EQ((*absent)["since_ms"], now - 7 * kDayMs);
  EXPECT_EQ((*absent)["until_ms"], now);
  auto month = engine_->views().WhatIfScenario(Who("admin"), now - 31 * kDayMs, 0);
  EXPECT_TRUE(month.ok()) << month.status().ToString();
  for (int64_t since : {int64_t{1}, now - 31 * kDayMs - 1}) {
    auto longer = engine_->views().WhatIfScenario(Who("admin"), since, 0);
    ASSERT_FALSE(longer.ok()) << since;
    EXPECT_EQ(longer.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(longer.status().message().find("'since'"), std::string::npos)
        << longer.status().message();
    EXPECT_NE(longer.status().message().find("31 days"), std::string::npos)
        << longer.status().message();
  }
  auto replay = engine_->views().WhatIf(Who("admin"), 1, 0, {"interactive=share"});
  EXPECT_EQ(replay.status().code(), StatusCode::kInvalidArgument);
}

// A job whose queue (or group) the config no longer has is left out of the observed scenario and
// counted, not replayed: a scenario naming a queue its policy lacks is refused, so a queue
// renamed in the window would fail every what-if over it.
TEST_F(HistoryTest, JobsOfAQueueNoLongerConfiguredAreLeftOutOfTheWhatIfAndCounted) {
  Register("n1", 2);
  const std::string nb = Submit("alice", {{"queue", "notebooks"}, {"command", {"sleep", "100"}}});
  const std::string tr = Submit("alice", {{"queue", "training"}, {"command", {"sleep", "100"}}});
  Pass(2000);
  ASSERT_TRUE(engine_->views().WhatIfScenario(Who("admin"), 0, 0).ok());
  auto& queues = config_.policy.queues;
  queues.erase(std::remove_if(queues.begin(), queues.end(),
                              [](const quota::QueueSpec& q) { return q.name == "notebooks"; }),
               queues.end());
  auto& routes = config_.routes;
  routes.erase(std::remove_if(routes.begin(), routes.end(),
                              [](const QueueRoute& r) { return r.queue == "notebooks"; }),
               routes.end());
  config_.source_yaml.clear();
  Reopen();
  Pass(1000);
  auto w = engine_->views().WhatIfScenario(Who("admin"), 0, 0);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ((*w)["jobs"], 1) << w->dump();
  EXPECT_EQ((*w)["jobs_not_replayed"], 1) << w->dump();
  const std::string scenario = (*w)["scenario"];
  EXPECT_EQ(scenario.find("notebooks"), std::string::npos) << scenario;
  EXPECT_NE(scenario.find("training"), std::string::npos) << scenario;
}

// GET /v1/whatif through the thin interface the serving process wires in (the API never
// includes the simulator): without it the engine says so; with it, the replay gets the observed
// scenario and the forms, and its answer is the engine's. Only admins reach it.
TEST_F(HistoryTest, WhatIfReplaysThroughTheWiredInSimulatorOnly) {
  auto unwired = engine_->views().WhatIf(Who("admin"), 0, now_, {"interactive=share"});
  ASSERT_FALSE(unwired.ok());
  EXPECT_EQ(unwired.status().code(), StatusCode::kFailedPrecondition);
  std::vector<std::string> got_forms;
  Json got_observed;
  config_.whatif.replay = [&](const Json& observed, const std::vector<std::string>& forms) {
    got_observed = observed;
    got_forms = forms;
    return Result<Json>(Json{{"returned", 7}});
  };
  Reopen();
  auto denied = engine_->views().WhatIf(Who("alice"), 0, now_, {"interactive=share"});
  ASSERT_FALSE(denied.ok());
  EXPECT_EQ(denied.status().code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(got_forms.empty()) << "the replay ran for a non-admin";
  auto r = engine_->views().WhatIf(Who("admin"), 0, now_, {"interactive=share"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)["returned"], 7);
  EXPECT_EQ(got_forms, std::vector<std::string>{"interactive=share"});
  EXPECT_TRUE(got_observed.contains("scenario")) << got_observed.dump();
}

}  // namespace
}  // namespace tessera::api
