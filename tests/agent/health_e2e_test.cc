// Device health end to end: a real `tessera serve` and a real `tessera agent` that finds its two
// devices through NVML. NVML is the stand-in library of this directory (fake_nvml.cc, loaded as
// libnvidia-ml.so.1 through LD_LIBRARY_PATH as the driver's would be): there is no GPU here. The
// test writes a double-bit ECC error into the stand-in's health file; the agent reads it
// (nvmlDeviceGetTotalEccErrors), reports the device unhealthy in its heartbeat (agent protocol
// 3), and the control plane shows it, gives the device no new work and, by policy
// (`unhealthy_jobs`), requeues its job or lets it finish.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../api/proc.h"
#include "../api/serve_fixture.h"
#include "../support/config_builder.h"
#include "../support/shell.h"
#include "../support/test_dir.h"

namespace tessera {
namespace {

using Json = nlohmann::json;
using testing::kTessera;
using testing::Proc;

const std::vector<std::string> kLongJob = {"sh", "-c",
                                           "trap 'echo got-SIGTERM; exit 143' TERM; echo started; "
                                           "while true; do sleep 0.1; done"};

std::string Config(const std::string& unhealthy_jobs) {
  return testing::ConfigBuilder()
      .HeartbeatTimeout("5s")
      .Cycle("300ms")
      .Grace("1s")
      .Set("unhealthy_jobs", unhealthy_jobs)
      .Profile("card")
      .Queue("train", "card", {"research"}, "class: training")
      .Yaml();
}

class HealthE2eTest : public testing::ServeFixture {
 protected:
  void Start(const std::string& unhealthy_jobs) {
    dir_ = testing::FreshTestDir("health_e2e");
    health_file_ = dir_ + "/nvml-health";
    std::ofstream(health_file_).close();
    // The stand-in NVML where the agent looks for the driver's library.
    std::filesystem::create_directories(dir_ + "/lib");
    std::filesystem::create_symlink(FAKE_NVML_PATH, dir_ + "/lib/libnvidia-ml.so.1");
    WriteConfig(Config(unhealthy_jobs));
    StartServer();
    if (HasFatalFailure()) return;
    agents_.push_back(std::make_unique<Proc>(
        std::vector<std::string>{"/usr/bin/env", "LD_LIBRARY_PATH=" + dir_ + "/lib",
                                 "FAKE_NVML_HEALTH=" + health_file_, "FAKE_NVML_ALL_H100=1",
                                 kTessera, "agent", "--server",
                                 "http://127.0.0.1:" + std::to_string(port_), "--token-file",
                                 testing::TokenFile("agent-token-1"), "--node", "gpu-1", "--work",
                                 dir_ + "/work", "--cgroup-root", ""},
        dir_ + "/agent.log"));
    ASSERT_TRUE(WaitFor([&] { return ReadyNodes() == 1; })) << Logs();
  }
  void TearDown() override {
    for (auto& a : agents_) a->KillOnly(SIGTERM);
    agents_.clear();
    server_.reset();
  }
  Json Device(int index) {
    Json nodes = Nodes();
    if (!nodes.is_array() || nodes.empty()) return Json();
    return nodes[0]["devices"][index];
  }
  std::string Submit() {
    Json r = Call("POST", "/v1/jobs", {{"queue", "train"}, {"command", kLongJob}});
    EXPECT_TRUE(r.is_object() && r.contains("id")) << r.dump();
    return r.is_object() ? r.value("id", "") : "";
  }
  int DeviceOf(const std::string& id) {
    Json j = Job(id);
    if (!j.is_object() || !j.contains("placement")) return -1;
    for (const auto& d : j["placement"].value("devices", Json::array()))
      if (d.contains("index")) return d["index"].get<int>();
    return -1;
  }
  std::string health_file_;
};

TEST_F(HealthE2eTest, ADoubleBitEccErrorClosesTheDeviceAndRequeuesItsJob) {
  ASSERT_NO_FATAL_FAILURE(Start("requeue"));
  Json nodes = Nodes();
  ASSERT_EQ(nodes[0]["devices"].size(), 2u) << nodes.dump();
  EXPECT_EQ(nodes[0]["devices"][0]["uuid"], "GPU-fake-agent-0");
  EXPECT_EQ(nodes[0]["devices"][0]["health"], "ok");
  EXPECT_FALSE(nodes[0]["devices"][0].contains("health_reason"));
  // MIG off: a share there has the cap library's isolation where the agent finds the library
  // beside its binary (a full build has it), and none where it does not.
  const bool cap =
      std::filesystem::exists(std::filesystem::path(kTessera).parent_path().parent_path() /
                              "capgpu" / "libtessera_capgpu.so");
  EXPECT_EQ(nodes[0]["devices"][0]["isolation"], cap ? "preload" : "none");
  const std::string a = Submit(), b = Submit();
  ASSERT_TRUE(WaitFor([&] {
    return State(a) == "running" && State(b) == "running" &&
           Output(a).find("started") != std::string::npos;
  })) << Logs();
  EXPECT_EQ(Job(a)["placement"]["isolation"], "hardware") << "a whole card";
  const std::string on0 = DeviceOf(a) == 0 ? a : b, on1 = on0 == a ? b : a;
  ASSERT_EQ(DeviceOf(on0), 0) << Job(a).dump() << Job(b).dump();

  std::ofstream(health_file_, std::ios::app) << "ecc 0 1\n";
  ASSERT_TRUE(WaitFor([&] { return Device(0).value("health", "") == "unhealthy"; })) << Logs();
  EXPECT_EQ(Device(0)["health_reason"], "double-bit ECC errors: 1 since the driver loaded");
  EXPECT_EQ(Device(1)["health"], "ok");
  // Its job is stopped through the preemption path and waits again; the other runs on.
  ASSERT_TRUE(WaitFor([&] { return State(on0) == "pending"; })) << Job(on0).dump() << Logs();
  EXPECT_GE(Job(on0)["preemptions"].get<int>(), 1);
  EXPECT_NE(Output(on0).find("got-SIGTERM"), std::string::npos) << Output(on0);
  EXPECT_EQ(State(on1), "running");
  Json ev = Events("kind=device.unhealthy");
  ASSERT_EQ(ev.size(), 1u) << ev.dump();
  EXPECT_EQ(ev[0]["subject"], "gpu-1:0");
  EXPECT_EQ(ev[0]["data"]["policy"], "requeue");
  EXPECT_EQ(ev[0]["data"]["jobs"], Json::array({on0}));
  // Device 0 takes no new work: the requeued job waits while device 1 is busy ...
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(State(on0), "pending") << Job(on0).dump();
  // ... and runs on device 1 once that one is free.
  Call("POST", "/v1/jobs/" + on1 + "/cancel");
  ASSERT_TRUE(WaitFor([&] { return State(on0) == "running"; })) << Job(on0).dump() << Logs();
  EXPECT_EQ(DeviceOf(on0), 1);
  EXPECT_NE(Logs().find("device 0 (GPU-fake-agent-0) is unhealthy"), std::string::npos);
  // The CLI says both: the job's isolation, the device's health.
  const std::string flags = " --url http://127.0.0.1:" + std::to_string(port_) + " --token-file " +
                            testing::TokenFile("admin-token-1") + " 2>&1";
  testing::ShellResult job = testing::RunShell(kTessera + " job " + on0 + flags);
  EXPECT_NE(job.out.find("isolation: hardware"), std::string::npos) << job.out;
  testing::ShellResult table = testing::RunShell(kTessera + " nodes" + flags);
  EXPECT_NE(table.out.find("unhealthy: double-bit ECC errors: 1 since the driver loaded"),
            std::string::npos)
      << table.out;
}

TEST_F(HealthE2eTest, AnXidLetsItsJobFinishByPolicyAndTakesNoNewWork) {
  ASSERT_NO_FATAL_FAILURE(Start("finish"));
  const std::string a = Submit();
  ASSERT_TRUE(WaitFor([&] { return State(a) == "running"; })) << Logs();
  const int dev = DeviceOf(a);
  ASSERT_GE(dev, 0);
  std::ofstream(health_file_, std::ios::app) << "xid " << dev << " 79\n";
  ASSERT_TRUE(WaitFor([&] { return Device(dev).value("health", "") == "unhealthy"; })) << Logs();
  EXPECT_EQ(Device(dev)["health_reason"], "XID 79: GPU has fallen off the bus");
  const std::string b = Submit();
  ASSERT_TRUE(WaitFor([&] { return State(b) == "running"; })) << Logs();
  EXPECT_EQ(DeviceOf(b), 1 - dev) << "not on the unhealthy device";
  const std::string c = Submit();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(State(a), "running") << "policy finish: it runs on";
  EXPECT_EQ(State(c), "pending") << "no device takes it: one busy, one unhealthy";
  Json ev = Events("kind=device.unhealthy");
  ASSERT_EQ(ev.size(), 1u) << ev.dump();
  EXPECT_EQ(ev[0]["data"]["policy"], "finish");
}

// The way back (issue 38): an administrator's uncordon returns the device (the agent, told
// health_reset, starts over from the ECC count it reads then); more errors close it again; a
// clean reset (the volatile counters cleared) returns it through the agent alone.
TEST_F(HealthE2eTest, AnUnhealthyDeviceReturnsOnAnAdminsWordOrAfterACleanReset) {
  ASSERT_NO_FATAL_FAILURE(Start("requeue"));
  std::ofstream(health_file_, std::ios::app) << "ecc 1 2\n";
  ASSERT_TRUE(WaitFor([&] { return Device(1).value("health", "") == "unhealthy"; })) << Logs();
  Json refused = Call("POST", "/v1/nodes/gpu-1/uncordon", {{"device", 1}});
  EXPECT_EQ(Device(1)["health"], "unhealthy") << "a user's word is not enough: " << refused.dump();
  Json back = Call("POST", "/v1/nodes/gpu-1/uncordon", {{"device", 1}}, "admin-token-1");
  EXPECT_EQ(back["devices"][1]["health"], "ok") << back.dump();
  ASSERT_TRUE(WaitFor([&] {
    return Logs().find("device 1: returned by an administrator") != std::string::npos;
  })) << Logs();
  // The agent says ok now, and keeps it (the 2 errors are acknowledged): both devices take work.
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  EXPECT_EQ(Device(1)["health"], "ok") << Logs();
  const std::string a = Submit(), b = Submit();
  ASSERT_TRUE(WaitFor([&] { return State(a) == "running" && State(b) == "running"; })) << Logs();
  Json ev = Events("kind=device.healthy");
  ASSERT_EQ(ev.size(), 1u) << ev.dump();
  EXPECT_EQ(ev[0]["actor"], "admin");
  EXPECT_EQ(ev[0]["data"]["cleared"], "double-bit ECC errors: 2 since the driver loaded");
  // One more error: unhealthy again, its job requeued.
  std::ofstream(health_file_, std::ios::app) << "ecc 1 3\n";
  ASSERT_TRUE(WaitFor([&] { return Device(1).value("health", "") == "unhealthy"; })) << Logs();
  EXPECT_EQ(Device(1)["health_reason"], "double-bit ECC errors: 3 since the driver loaded");
  // A reset clears the counters: the agent returns it by itself.
  std::ofstream(health_file_, std::ios::app) << "ecc 1 0\n";
  ASSERT_TRUE(WaitFor([&] { return Device(1).value("health", "") == "ok"; })) << Logs();
  ev = Events("kind=device.healthy");
  ASSERT_EQ(ev.size(), 2u) << ev.dump();
  EXPECT_EQ(ev[1]["actor"], "agent:gpu-1");
  EXPECT_NE(Logs().find("device 1: ECC counters cleared (a reset): healthy again"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera
