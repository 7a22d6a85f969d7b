// MPS for sm-sharing shares (src/agent/mps.h), against the stand-in control program of this
// directory (fake_mps_control.cc, which follows nvidia-cuda-mps-control's documented commands):
// there is no GPU here, so the MPS control daemon is the one thing stood in for.
#include "agent/mps.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

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

}  // namespace
}  // namespace tessera::agent
