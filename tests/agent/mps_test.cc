// MPS for sm-sharing shares (src/agent/mps.h), against the stand-in control program of this
// directory (fake_mps_control.cc, which follows nvidia-cuda-mps-control's documented commands):
// there is no GPU here, so the MPS control daemon is the one thing stood in for.
#include "agent/mps.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "agent/protocol.h"
#include "model/agent_protocol.h"
#include "test_util.h"

namespace tessera::agent {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Whether `pid` runs: not gone, and not a zombie waiting for a parent to reap it (this container's
// init reaps none).
bool Alive(int pid) {
  std::string stat = Slurp("/proc/" + std::to_string(pid) + "/stat");
  const size_t at = stat.rfind(')');
  return at != std::string::npos && at + 2 < stat.size() && stat[at + 2] != 'Z';
}

TEST(AgentMps, StartsOneDaemonPerDeviceSetsItsLimitsAndStartsItAgainWhenItDies) {
  testing::TempDir dir;
  int pid0 = 0;
  {
    MpsDaemons mps({FAKE_MPS_CONTROL, dir.path() + "/mps"});
    EXPECT_FALSE(mps.Running(0));
    ASSERT_TRUE(mps.Ensure(0, "GPU-fake-agent-0").ok());
    ASSERT_TRUE(mps.Ensure(1, "GPU-fake-agent-1").ok());
    pid0 = mps.Pid(0);
    ASSERT_GT(pid0, 0);
    EXPECT_NE(pid0, mps.Pid(1)) << "a daemon of its own per device";
    EXPECT_NE(Slurp(dir.path() + "/mps/0/log/control.log")
                  .find("Starting control daemon for devices GPU-fake-agent-0"),
              std::string::npos);
    ASSERT_TRUE(mps.Ensure(0, "GPU-fake-agent-0").ok());
    EXPECT_EQ(mps.Pid(0), pid0) << "running: left alone";

    ASSERT_TRUE(mps.SetDefaultActiveThreadPercentage(0, 30).ok());
    EXPECT_EQ(*mps.Command(0, "get_default_active_thread_percentage"), "30.0");
    EXPECT_EQ(*mps.Command(1, "get_default_active_thread_percentage"), "100.0") << "untouched";
    EXPECT_NE(Slurp(dir.path() + "/mps/0/log/control.log")
                  .find("Control: set_default_active_thread_percentage 30"),
              std::string::npos);
    Status bad = mps.SetDefaultActiveThreadPercentage(0, 0);
    EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(bad.message().find("must be 1 to 100, not 0"), std::string::npos) << bad.message();
    EXPECT_FALSE(mps.Command(0, "no_such_command").ok());

    auto env = mps.ClientEnv(0, 30, 8192);
    ASSERT_TRUE(env.ok());
    EXPECT_EQ(env->at("CUDA_MPS_PIPE_DIRECTORY"), dir.path() + "/mps/0/pipe");
    EXPECT_EQ(env->at("CUDA_MPS_LOG_DIRECTORY"), dir.path() + "/mps/0/log");
    EXPECT_EQ(env->at("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "30");
    EXPECT_EQ(env->at("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=8192M");
    EXPECT_EQ(mps.ClientEnv(0, 30, 0)->count("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), 0u);
    EXPECT_FALSE(mps.ClientEnv(0, 101, 0).ok());

    // Supervision: the daemon dies; the next Ensure starts it again.
    kill(pid0, SIGKILL);
    for (int i = 0; i < 100 && mps.Running(0); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_FALSE(mps.Running(0));
    ASSERT_TRUE(mps.Ensure(0, "GPU-fake-agent-0").ok());
    EXPECT_TRUE(mps.Running(0));
    EXPECT_NE(mps.Pid(0), pid0);
    pid0 = mps.Pid(0);
  }
  // Gone with the object: each daemon was asked to quit.
  for (int i = 0; i < 100 && Alive(pid0); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_FALSE(Alive(pid0));
}

TEST(AgentMps, AControlProgramThatIsNotThereIsAnErrorNamingTheDevice) {
  testing::TempDir dir;
  MpsDaemons mps({dir.path() + "/no-such-control", dir.path() + "/mps"});
  Status st = mps.Ensure(2, "GPU-x");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("MPS for device 2"), std::string::npos) << st.message();
  // A command to it fails too, and the test process lives on (no SIGPIPE).
  EXPECT_FALSE(mps.Command(2, "get_server_list").ok());
}

// An sm-sharing share's start (issue 38): its device's daemon is started and the client's
// variables go into the job's environment, over the job's own.
TEST(AgentMps, BindMpsClientStartsTheDevicesDaemonAndGivesTheClientItsLimits) {
  testing::TempDir dir;
  MpsDaemons mps({FAKE_MPS_CONTROL, dir.path() + "/mps"});
  JobSpec spec;
  spec.id = "j-1";
  spec.command = {"true"};
  spec.devices = {{1, "GPU-fake-agent-1", "", "", "", -1}};
  spec.gpu_memory_limit_bytes = int64_t{8} << 30;
  spec.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = "100";  // the job's own: not what it gets
  ASSERT_TRUE(BindMpsClient(&mps, &spec).ok()) << "time-slicing too: nothing to do";
  spec.sm_percent = 40;
  Status st = BindMpsClient(&mps, &spec);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_TRUE(mps.Running(1));
  EXPECT_FALSE(mps.Running(0));
  EXPECT_EQ(spec.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "40");
  EXPECT_EQ(spec.env["CUDA_MPS_PIPE_DIRECTORY"], dir.path() + "/mps/1/pipe");
  EXPECT_EQ(spec.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=8192M");
  EXPECT_NE(Slurp(dir.path() + "/mps/1/log/control.log").find("GPU-fake-agent-1"),
            std::string::npos);
}

TEST(AgentMps, BindMpsClientFailsNamingMpsAndTheDevice) {
  testing::TempDir dir;
  JobSpec spec;
  spec.id = "j-2";
  spec.devices = {{3, "GPU-x", "", "", "", -1}};
  spec.sm_percent = 25;
  Status none = BindMpsClient(nullptr, &spec);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.message().find("MPS for device 3"), std::string::npos) << none.message();
  MpsDaemons broken({dir.path() + "/no-such-control", dir.path() + "/mps"});
  Status st = BindMpsClient(&broken, &spec);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("MPS for device 3"), std::string::npos) << st.message();
  EXPECT_EQ(spec.env.count("CUDA_MPS_PIPE_DIRECTORY"), 0u) << "nothing bound";
}

TEST(AgentMps, TheControlProgramIsFoundAndMpsOfferedOnlyOffMigAndAmd) {
  EXPECT_EQ(FindMpsControl(FAKE_MPS_CONTROL), FAKE_MPS_CONTROL);
  EXPECT_EQ(FindMpsControl("/nonexistent/nvidia-cuda-mps-control"), "");
  EXPECT_EQ(FindMpsControl(""), "");
  const std::string sh = FindMpsControl("sh");  // PATH searched
  EXPECT_TRUE(sh.size() > 3 && sh.substr(sh.size() - 3) == "/sh" && access(sh.c_str(), X_OK) == 0)
      << sh;
  EXPECT_EQ(FindMpsControl("tessera-no-such-program"), "");
  EXPECT_TRUE(OffersMps("H100-80GB", false));
  EXPECT_FALSE(OffersMps("H100-80GB", true)) << "MIG on";
  EXPECT_FALSE(OffersMps("MI300X", false)) << "AMD";
}

// Agent protocol 4: a device's "mps" in the registration, a start order's "compute".
TEST(AgentMps, ProtocolCarriesMpsAndComputeMode) {
  Inventory inv;
  inv.node = "n";
  inv.devices.push_back({0, "H100-80GB", 81920, "GPU-0", true});
  inv.devices.push_back({1, "H100-80GB", 81920, "GPU-1", true});
  inv.devices[1].mps = true;
  const std::string body = RegisterBody(inv, false);
  EXPECT_EQ(body.find("\"mps\":true"), body.rfind("\"mps\":true")) << body;
  EXPECT_NE(body.find("\"mps\":true"), std::string::npos) << body;
  static_assert(kAgentProtocolVersion >= 4, "mps and compute came with protocol 4");
  EXPECT_NE(body.find("\"protocol\":" + std::to_string(kAgentProtocolVersion)), std::string::npos)
      << body;
  auto r = ParseHeartbeatReply(
      R"({"start": [{"job": "a", "command": ["x"], "compute": {"mode": "sm-sharing", "percent": 40}},
                    {"job": "b", "command": ["x"], "compute": {"mode": "time-slicing"}},
                    {"job": "c", "command": ["x"]}]})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->start[0].sm_percent, 40);
  EXPECT_EQ(r->start[1].sm_percent, 0);
  EXPECT_EQ(r->start[2].sm_percent, 0);
  for (const char* bad :
       {R"({"mode": "sm-sharing", "percent": 0})", R"({"mode": "sm-sharing", "percent": 101})",
        R"({"mode": "sm-sharing"})", R"({"mode": "mps"})", R"("sm-sharing")"}) {
    auto e = ParseHeartbeatReply(
        std::string(R"({"start": [{"job": "a", "command": ["x"], "compute": )") + bad + "}]}");
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_NE(e.status().message().find("field 'compute'"), std::string::npos)
        << e.status().message();
  }
}

}  // namespace
}  // namespace tessera::agent
