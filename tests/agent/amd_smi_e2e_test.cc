// AMD device health end to end: a real `tessera serve` and a real `tessera agent` that finds two
// MI300X through AMD SMI, the stand-in libamd_smi.so of this directory (fake_amdsmi.cc, found
// through LD_LIBRARY_PATH as ROCm's would be; NVML is pointed at nothing): there is no GPU here.
// A device whose uncorrectable ECC count is above zero when the agent starts registers unhealthy;
// one whose count rises later is reported so in a heartbeat, its job is requeued by policy, and
// neither takes new work. An idle card the cycle splits for inference is switched to CPX through
// amdsmi_set_gpu_compute_partition.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../api/proc.h"
#include "../api/serve_fixture.h"
#include "../support/config_builder.h"
#include "../support/test_dir.h"

namespace tessera {
namespace {

using Json = nlohmann::json;
using testing::kTessera;
using testing::Proc;

std::string Config() {
  return testing::ConfigBuilder()
      .HeartbeatTimeout("5s")
      .Cycle("300ms")
      .Grace("1s")
      .Set("unhealthy_jobs", "requeue")
      .Profile("card")
      .Queue("train", "card", {"research"}, "class: training")
      .Yaml();
}

// Inference asking 10 GB gets a CPX partition (24 GB) of an MI300X in SPX+NPS1.
std::string Inference() {
  return testing::ConfigBuilder()
      .HeartbeatTimeout("5s")
      .Cycle("300ms")
      .Profile("serve",
               "gpus: 1, gpu_fraction: 0.1, gpu_memory: 10GB, cpu: 100m, memory: 64MiB, "
               "forms: [partition]")
      .Queue("inference", "serve", {"research"}, "class: inference")
      .Yaml();
}

class AmdSmiE2eTest : public testing::ServeFixture {
 protected:
  // A server with `config` and an agent whose AMD SMI (the stand-in) starts from `smi`.
  void Start(const std::string& config, const std::string& smi) {
    dir_ = testing::FreshTestDir("amd_smi_e2e");
    smi_file_ = dir_ + "/amdsmi";
    std::ofstream(smi_file_) << smi;
    WriteConfig(config);
    StartServer();
    if (HasFatalFailure()) return;
    agent_ = std::make_unique<Proc>(
        std::vector<std::string>{
            "/usr/bin/env",
            "LD_LIBRARY_PATH=" + std::filesystem::path(FAKE_AMDSMI_PATH).parent_path().string(),
            "FAKE_AMDSMI_CONFIG=" + smi_file_, kTessera, "agent", "--server",
            "http://127.0.0.1:" + std::to_string(port_), "--token-file",
            testing::TokenFile("agent-token-1"), "--node", "amd-1", "--work", dir_ + "/work",
            "--cgroup-root", "", "--nvml-library", dir_ + "/no-nvml.so"},
        dir_ + "/agent.log");
    ASSERT_TRUE(WaitFor([&] { return ReadyNodes() == 1; })) << Logs();
  }
  void TearDown() override {
    if (agent_) agent_->KillOnly(SIGTERM);
    agent_.reset();
    server_.reset();
  }
  std::string Logs() {
    return (server_ ? server_->Log() : "") + "\n--- agent\n" + (agent_ ? agent_->Log() : "");
  }
  Json Device(int index) {
    Json nodes = Nodes();
    if (!nodes.is_array() || nodes.empty()) return Json();
    return nodes[0]["devices"][index];
  }
  std::string Submit(const std::string& queue = "train",
                     const std::string& shell = "echo started; while true; do sleep 0.1; done") {
    Json r = Call("POST", "/v1/jobs", {{"queue", queue}, {"command", {"sh", "-c", shell}}});
    EXPECT_TRUE(r.is_object() && r.contains("id")) << r.dump();
    return r.is_object() ? r.value("id", "") : "";
  }
  std::string smi_file_;
  std::unique_ptr<Proc> agent_;
};

TEST_F(AmdSmiE2eTest, AnAmdDeviceWithUncorrectableEccErrorsGetsNoNewWork) {
  ASSERT_NO_FATAL_FAILURE(Start(Config(),
                                "device 0 GPU-amd-e2e-0 196608 AMD Instinct MI300X\n"
                                "device 1 GPU-amd-e2e-1 196608 AMD Instinct MI300X\n"
                                "ecc 1 0 4\n"));  // device 1 has had errors before the agent
  Json nodes = Nodes();
  ASSERT_EQ(nodes[0]["devices"].size(), 2u) << nodes.dump();
  EXPECT_EQ(nodes[0]["devices"][0]["model"], "MI300X");
  EXPECT_EQ(nodes[0]["devices"][0]["uuid"], "GPU-amd-e2e-0");
  EXPECT_EQ(nodes[0]["devices"][0]["health"], "ok");
  // Registered unhealthy: the count was read before the agent registered.
  EXPECT_EQ(nodes[0]["devices"][1]["health"], "unhealthy");
  EXPECT_EQ(nodes[0]["devices"][1]["health_reason"], "uncorrectable ECC errors: 4 (AMD SMI)");
  EXPECT_NE(Logs().find("2 device(s) from amdsmi"), std::string::npos) << Logs();
  EXPECT_NE(Logs().find("health read (uncorrectable ECC counts (AMD SMI))"), std::string::npos);

  const std::string a = Submit();
  ASSERT_TRUE(WaitFor([&] { return State(a) == "running"; })) << Job(a).dump() << Logs();
  EXPECT_EQ(Job(a)["placement"]["devices"][0]["index"], 0) << "not on the unhealthy device";

  std::ofstream(smi_file_, std::ios::app) << "ecc 0 3 1\n";
  ASSERT_TRUE(WaitFor([&] { return Device(0).value("health", "") == "unhealthy"; })) << Logs();
  EXPECT_EQ(Device(0)["health_reason"], "uncorrectable ECC errors: 1 (AMD SMI)");
  // Its job is requeued, and no device takes it.
  ASSERT_TRUE(WaitFor([&] { return State(a) == "pending"; })) << Job(a).dump() << Logs();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(State(a), "pending") << Job(a).dump();
  Json ev = Events("kind=device.unhealthy");
  ASSERT_EQ(ev.size(), 2u) << ev.dump();
  EXPECT_NE(Logs().find("device 0 (GPU-amd-e2e-0) is unhealthy"), std::string::npos);
}

// The cycle splits the idle card for two inference jobs; the agent switches the real device's
// compute mode through AMD SMI (once: the second partition finds it in CPX) and exposes each
// partition as a logical GPU.
TEST_F(AmdSmiE2eTest, AnAmdCardIsSplitThroughAmdSmiForInference) {
  ASSERT_NO_FATAL_FAILURE(
      Start(Inference(), "device 0 GPU-amd-e2e-0 196608 AMD Instinct MI300X\n"));
  const std::string show = "echo rocr=$ROCR_VISIBLE_DEVICES; sleep 30";
  const std::string a = Submit("inference", show), b = Submit("inference", show);
  for (const std::string& id : {a, b}) {
    ASSERT_TRUE(WaitFor([&] { return Output(id).find("rocr=") != std::string::npos; }))
        << Job(id).dump() << Logs();
    Json j = Job(id);
    EXPECT_EQ(j["placement"]["form"], "partition") << j.dump();
    EXPECT_EQ(j["placement"]["devices"][0].value("partition", "").rfind("CPX#", 0), 0u) << j.dump();
  }
  EXPECT_NE(Output(a), Output(b)) << "two partitions";
  const std::string smi = testing::ReadFile(smi_file_);
  EXPECT_NE(smi.find("call amdsmi_set_gpu_compute_partition 0 CPX\n"), std::string::npos) << smi;
  EXPECT_EQ(smi.find("call amdsmi_set_gpu_compute_partition 0 CPX\n"),
            smi.rfind("call amdsmi_set_gpu_compute_partition"))
      << "one call: " << smi;
  EXPECT_NE(Logs().find("partition CPX#"), std::string::npos) << Logs();
}

}  // namespace
}  // namespace tessera
