// Compute mode sm-sharing end to end (issue 38): a real `tessera serve` and a real `tessera agent
// --simulate 2xH100-80GB --mps-control` the stand-in control program of this directory
// (fake_mps_control.cc, which follows nvidia-cuda-mps-control's documented interface): there is
// no GPU here. The agent offers MPS on its devices ("mps": true, agent protocol 4); shares of a
// `compute: sm-sharing` queue at 40% are placed two to a card (40 + 40 <= 100, a third would make
// 120), each started with its device's MPS daemon running and the client's variables in its
// environment (the job writes its environment to its output file); the API and `tessera job` show
// the compute mode and the grade mps. A control program that cannot start a daemon fails the start:
// exit 127, the output naming MPS and the device.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

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

std::string Config() {
  return testing::ConfigBuilder()
      .HeartbeatTimeout("5s")
      .Cycle("300ms")
      .Grace("1s")
      .Profile("small",
               "gpus: 1, gpu_fraction: 0.25, gpu_memory: 8GiB, cpu: 100m, memory: 64MiB, "
               "forms: [share]")
      .Queue("serving", "small", {"research"},
             "class: interactive, compute: sm-sharing, compute_percent: 40")
      .Yaml();
}

class MpsE2eTest : public testing::ServeFixture {
 protected:
  void Start(const std::string& control) {
    dir_ = testing::FreshTestDir("mps_e2e");
    WriteConfig(Config());
    StartServer();
    if (HasFatalFailure()) return;
    agents_.push_back(std::make_unique<Proc>(
        std::vector<std::string>{
            kTessera, "agent", "--server", "http://127.0.0.1:" + std::to_string(port_),
            "--token-file", testing::TokenFile("agent-token-1"), "--node", "gpu-1", "--simulate",
            "2xH100-80GB", "--work", dir_ + "/work", "--cgroup-root", "", "--mps-control", control},
        dir_ + "/agent.log"));
    ASSERT_TRUE(WaitFor([&] { return ReadyNodes() == 1; })) << Logs();
  }
  void TearDown() override {
    StopAgents();
    server_.reset();
  }
  // A job that writes its environment to its output file (it runs as the fixture's job account,
  // which may write nowhere else here), says so, and runs until stopped.
  std::string Submit() {
    Json r = Call("POST", "/v1/jobs",
                  {{"queue", "serving"},
                   {"command", {"sh", "-c", "env; echo started; while true; do sleep 0.1; done"}}});
    EXPECT_TRUE(r.is_object() && r.contains("id")) << r.dump();
    return r.is_object() ? r.value("id", "") : "";
  }
  // The value of `key` in the environment the job wrote ("" when absent).
  std::string EnvOf(const std::string& id, const std::string& key) {
    std::istringstream in(Output(id));
    for (std::string line; std::getline(in, line);) {
      if (line.rfind(key + "=", 0) == 0) return line.substr(key.size() + 1);
    }
    return "";
  }
};

// (A short name: the daemon's socket path, under the test's directory, has 108 bytes at most.)
TEST_F(MpsE2eTest, SmSharesRunAsMpsClients) {
  ASSERT_NO_FATAL_FAILURE(Start(FAKE_MPS_CONTROL));
  Json nodes = Nodes();
  ASSERT_EQ(nodes[0]["devices"].size(), 2u) << nodes.dump();
  EXPECT_EQ(nodes[0]["devices"][0]["mps"], true) << nodes.dump();
  const std::string a = Submit(), b = Submit(), c = Submit();
  ASSERT_TRUE(WaitFor([&] {
    for (const std::string& id : {a, b, c}) {
      if (State(id) != "running" || Output(id).find("started") == std::string::npos) return false;
    }
    return true;
  })) << Logs();
  std::map<int, int> per_device;
  for (const std::string& id : {a, b, c}) {
    Json j = Job(id);
    const Json& d = j["placement"]["devices"][0];
    const int index = d["index"].get<int>();
    ++per_device[index];
    EXPECT_EQ(d["compute"], Json({{"mode", "sm-sharing"}, {"percent", 40}})) << j.dump();
    EXPECT_EQ(j["placement"]["isolation"], "mps") << j.dump();
    // Started as an MPS client of its device's daemon, at 40%, its memory pinned to its cap.
    const std::string pipe = dir_ + "/work/mps/" + std::to_string(index) + "/pipe";
    EXPECT_EQ(EnvOf(id, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "40") << id;
    EXPECT_EQ(EnvOf(id, "CUDA_MPS_PIPE_DIRECTORY"), pipe) << id;
    EXPECT_EQ(EnvOf(id, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=8192M") << id;
    // ... whose daemon runs.
    std::ifstream pidfile(pipe + "/nvidia-cuda-mps-control.pid");
    long pid = 0;
    ASSERT_TRUE(pidfile >> pid) << pipe;
    EXPECT_EQ(kill(static_cast<pid_t>(pid), 0), 0) << "the daemon of device " << index;
  }
  // 40 + 40 on one card; a third 40 would make 120: it went to the other.
  ASSERT_EQ(per_device.size(), 2u);
  EXPECT_EQ(per_device.begin()->second + per_device.rbegin()->second, 3);
  EXPECT_EQ(std::max(per_device[0], per_device[1]), 2);
  // A fourth fits beside the one on the other card (80%); a fifth waits, saying why.
  const std::string d = Submit(), e = Submit();
  ASSERT_TRUE(WaitFor([&] { return State(d) == "running" || State(e) == "running"; })) << Logs();
  ASSERT_TRUE(WaitFor([&] {
    Json j = Job(State(d) == "running" ? e : d);
    return j.value("reason", "").find("compute: sm-sharing 40%") != std::string::npos;
  })) << Job(d).dump()
      << Job(e).dump();
  const std::string flags = " --url http://127.0.0.1:" + std::to_string(port_) + " --token-file " +
                            testing::TokenFile("admin-token-1") + " 2>&1";
  testing::ShellResult shown = testing::RunShell(kTessera + " job " + a + flags);
  EXPECT_NE(shown.out.find("isolation: mps"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("compute: sm-sharing 40%"), std::string::npos) << shown.out;
}

TEST_F(MpsE2eTest, NoMpsDaemonFailsTheStart) {
  ASSERT_NO_FATAL_FAILURE(Start("/bin/false"));  // found, runs, and starts no daemon
  EXPECT_EQ(Nodes()[0]["devices"][0]["mps"], true);
  const std::string a = Submit();
  ASSERT_TRUE(WaitFor([&] { return State(a) == "failed"; })) << Job(a).dump() << Logs();
  EXPECT_EQ(Job(a)["exit_code"], 127) << Job(a).dump();
  EXPECT_NE(Output(a).find("MPS for device "), std::string::npos) << Output(a);
  EXPECT_EQ(Output(a).find("started"), std::string::npos) << "the job did not run";
}

}  // namespace
}  // namespace tessera
