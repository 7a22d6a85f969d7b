// Device health and isolation grades in the served engine (issue 38), in process with a real
// SQLite store: agents' registrations and heartbeats (protocol 3) say each device's health and
// isolation; an unhealthy device takes no new work and its job is requeued (by policy); a queue's
// `isolation` keeps its shares to devices that give it; the job and node views show both.
#include <gtest/gtest.h>

#include "../support/config_builder.h"
#include "../support/engine_fixture.h"
#include "api/engine.h"

namespace tessera::api {
namespace {

std::string IsoConfig() {
  return tessera::testing::ConfigBuilder()
      .HeartbeatTimeout("10s")
      .Cycle("1s")
      .Profile("nb",
               "gpus: 1, gpu_fraction: 0.1, gpu_memory: 8GiB, cpu: 1, memory: 1GiB, forms: [share]")
      .Profile("card", "gpus: 1, cpu: 1, memory: 1GiB, forms: [whole]")
      .Queue("strict", "nb", {"research"}, "isolation: driver")
      .Queue("loose", "nb", {"research"})
      .Queue("train", "card", {"research"})
      .Yaml();
}

class HealthIsolationTest : public testing::EngineFixture {
 protected:
  void SetUp() override { Start("health_isolation", IsoConfig()); }
  void RegisterWith(const std::vector<std::pair<std::string, std::string>>& devices) {
    Json devs = Json::array();
    for (size_t i = 0; i < devices.size(); ++i) {
      devs.push_back({{"index", i},
                      {"model", "H100-80GB"},
                      {"memory_mib", 81920},
                      {"uuid", "GPU-" + std::to_string(i)},
                      {"health", devices[i].first},
                      {"isolation", devices[i].second}});
    }
    auto r = engine_->agents().RegisterNode(Who("agent"), {{"node", "n1"},
                                                           {"cpu_milli", 32000},
                                                           {"memory_mib", 65536},
                                                           {"protocol", 3},
                                                           {"devices", devs}});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  std::string Submit(const std::string& queue) {
    auto r = engine_->Submit(Who("alice"), {{"queue", queue}, {"command", {"sleep", "100"}}});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? (*r)["id"].get<std::string>() : "";
  }
  Json Job(const std::string& id) { return *engine_->views().GetJob(Who("admin"), id); }
  Json Device(int i) { return (*engine_->views().Nodes(Who("admin")))["nodes"][0]["devices"][i]; }
};

TEST_F(HealthIsolationTest, AQueuesIsolationKeepsItsSharesWhereTheDeviceGivesIt) {
  RegisterWith({{"ok", "preload"}, {"ok", "driver"}});
  EXPECT_EQ(Device(0)["isolation"], "preload");
  EXPECT_EQ(Device(1)["isolation"], "driver");
  EXPECT_EQ(Device(1)["health"], "ok");
  const std::string s = Submit("strict"), l = Submit("loose"), t = Submit("train");
  ASSERT_TRUE(engine_->RunCycle().ok());
  Json sj = Job(s);
  ASSERT_EQ(sj["state"], "placed") << sj.dump();
  EXPECT_EQ(sj["placement"]["devices"][0]["index"], 1);
  EXPECT_EQ(sj["placement"]["isolation"], "driver");
  EXPECT_EQ(sj["placement"]["devices"][0]["isolation"], "driver");
  Json tj = Job(t);
  ASSERT_EQ(tj["state"], "placed") << tj.dump();
  EXPECT_EQ(tj["placement"]["isolation"], "hardware") << "a whole card has nothing beside it";
  EXPECT_EQ(Job(l)["placement"]["isolation"],
            Device(Job(l)["placement"]["devices"][0]["index"].get<int>())["isolation"]);
}

TEST_F(HealthIsolationTest, WithNoDeviceGivingItTheShareWaitsAndSaysWhy) {
  RegisterWith({{"ok", "preload"}, {"ok", "none"}});
  const std::string s = Submit("strict");
  ASSERT_TRUE(engine_->RunCycle().ok());
  Json sj = Job(s);
  EXPECT_EQ(sj["state"], "pending");
  EXPECT_NE(sj["reason"].get<std::string>().find("isolation 'driver' or better"), std::string::npos)
      << sj.dump();
}

TEST_F(HealthIsolationTest, AnUnhealthyDeviceTakesNoWorkAndItsJobIsRequeued) {
  RegisterWith({{"unhealthy", "preload"}, {"ok", "preload"}});
  EXPECT_EQ(Device(0)["health"], "unhealthy");
  EXPECT_EQ(Device(0)["health_reason"], "unhealthy") << "none given: just that";
  const std::string a = Submit("train"), b = Submit("train");
  ASSERT_TRUE(engine_->RunCycle().ok());
  EXPECT_EQ(Job(a)["placement"]["devices"][0]["index"], 1);
  EXPECT_EQ(Job(b)["state"], "pending") << "device 0 is unhealthy";
  // a starts and runs (a job preempted before its start went out is requeued at once instead).
  ASSERT_TRUE(engine_->agents().Heartbeat(Who("agent"), {{"node", "n1"}}).ok());
  ASSERT_TRUE(
      engine_->agents()
          .Heartbeat(Who("agent"), {{"node", "n1"}, {"running", {{{"job", a}, {"pid", 7}}}}})
          .ok());
  ASSERT_EQ(Job(a)["state"], "running") << Job(a).dump();
  // Healthy again: it takes b; then device 1 turns unhealthy with a's job on it.
  auto hb = engine_->agents().Heartbeat(
      Who("agent"), {{"node", "n1"},
                     {"devices", Json::array({{{"index", 0}, {"health", "ok"}},
                                              {{"index", 1},
                                               {"health", "unhealthy"},
                                               {"health_reason",
                                                "XID 79: GPU has fallen off the "
                                                "bus"}}})}});
  ASSERT_TRUE(hb.ok()) << hb.status().ToString();
  EXPECT_EQ(Device(1)["health_reason"], "XID 79: GPU has fallen off the bus");
  EXPECT_EQ(Job(a)["state"], "preempting") << Job(a).dump();
  ASSERT_TRUE(engine_->RunCycle().ok());
  EXPECT_EQ(Job(b)["placement"]["devices"][0]["index"], 0);
  auto events = engine_->views().Events(Who("admin"), 0, 1000,
                                        store::EventFilter{"device.unhealthy", "", ""});
  ASSERT_TRUE(events.ok());
  ASSERT_EQ((*events)["events"].size(), 2u) << events->dump();
  // Refused: a health that is neither ok nor unhealthy.
  auto bad = engine_->agents().Heartbeat(
      Who("agent"),
      {{"node", "n1"}, {"devices", Json::array({{{"index", 0}, {"health", "sick"}}})}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'health' must be \"ok\" or \"unhealthy\""),
            std::string::npos)
      << bad.status().message();
}

// An unhealthy device returns on an administrator's word (uncordon of the device or its node):
// the control plane takes it healthy again at once, tells the agent to start over from what it
// reads now (`health_reset` in heartbeat replies, until the agent says ok), and meanwhile takes
// the agent's same old reason for the one acknowledged. A new reason closes it again.
TEST_F(HealthIsolationTest, AnOperatorReturnsAnUnhealthyDeviceByUncordoningIt) {
  RegisterWith({{"unhealthy", "preload"}, {"ok", "preload"}});
  auto beat = [&](const std::string& health, const std::string& reason) {
    Json d = {{"index", 0}, {"health", health}};
    if (!reason.empty()) d["health_reason"] = reason;
    auto hb =
        engine_->agents().Heartbeat(Who("agent"), {{"node", "n1"}, {"devices", Json::array({d})}});
    EXPECT_TRUE(hb.ok()) << hb.status().ToString();
    return hb.ok() ? *hb : Json();
  };
  auto refused = engine_->AdminNode(Who("alice"), "n1", "uncordon", 0);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(Device(0)["health"], "unhealthy");
  auto back = engine_->AdminNode(Who("admin"), "n1", "uncordon", 0);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ((*back)["devices"][0]["health"], "ok");
  auto events =
      engine_->views().Events(Who("admin"), 0, 1000, store::EventFilter{"device.healthy", "", ""});
  ASSERT_TRUE(events.ok());
  ASSERT_EQ((*events)["events"].size(), 1u) << events->dump();
  const Json ev = (*events)["events"][0];
  EXPECT_EQ(ev["actor"], "admin");
  EXPECT_EQ(ev["subject"], "n1:0");
  EXPECT_EQ(ev["data"]["cleared"], "unhealthy") << ev.dump();
  // The agent has not heard yet: its old reason changes nothing, and it is told to reset.
  Json reply = beat("unhealthy", "unhealthy");
  EXPECT_EQ(reply["health_reset"], Json::array({0})) << reply.dump();
  EXPECT_EQ(Device(0)["health"], "ok");
  const std::string a = Submit("train"), b = Submit("train");
  ASSERT_TRUE(engine_->RunCycle().ok());
  EXPECT_EQ(Job(a)["state"], "placed");
  EXPECT_EQ(Job(b)["state"], "placed") << "device 0 takes work again: " << Job(b).dump();
  // The agent reset and says ok: no more reset orders. A new fault closes the device again.
  EXPECT_FALSE(beat("ok", "").contains("health_reset"));
  beat("unhealthy", "XID 48: double-bit ECC error");
  EXPECT_EQ(Device(0)["health"], "unhealthy");
  EXPECT_EQ(Device(0)["health_reason"], "XID 48: double-bit ECC error");
  // Uncordoning the whole node returns its devices too.
  ASSERT_TRUE(engine_->AdminNode(Who("admin"), "n1", "uncordon", -1).ok());
  EXPECT_EQ(Device(0)["health"], "ok");
}

TEST(HealthIsolationConfig, AQueuesIsolationMustBeAGrade) {
  std::string yaml = IsoConfig();
  yaml.replace(yaml.find("isolation: driver"), 17, "isolation: strong");
  auto c = ParseConfig(yaml);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find(
                "isolation: must be one of hardware, driver, mps, preload, not 'strong'"),
            std::string::npos)
      << c.status().message();
}

}  // namespace
}  // namespace tessera::api
