// A scheduler whose commands hang delays only its own jobs (issue 32): with a Slurm queue whose
// commands (sbatch, squeue, scontrol, scancel, sacct) all hang until the backend's 30 s command
// timeout, a real `tessera serve` still detects a lost node within its heartbeat timeout and
// still places an agent queue's jobs within a few cycles. Before each backend had a thread of its
// own (api/executors.h), the ticker ran the backend's commands between cycles, and both waited
// 30 s.
//
// Real processes: `tessera serve` and `tessera agent --simulate` (declared inventories; there is
// no GPU here). The hanging "Slurm" is a directory of shell scripts put first on the server's
// PATH: the stand-in is for the scheduler misbehaving, which a real one cannot be made to do.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "../support/config_builder.h"
#include "../support/test_dir.h"
#include "proc.h"
#include "serve_fixture.h"

namespace tessera {
namespace {

using Json = nlohmann::json;

constexpr int kHeartbeatTimeoutMs = 3000;
constexpr int kCycleMs = 300;

class HangingBackendTest : public testing::ServeFixture {
 protected:
  void SetUp() override {
    dir_ = tessera::testing::FreshTestDir("hanging_backend");
    const std::string bin = dir_ + "/bin";
    mkdir(bin.c_str(), 0755);
    // Each command says it started (a file named after it), then hangs.
    for (const char* cmd : {"sbatch", "squeue", "scontrol", "scancel", "sacct", "sinfo"}) {
      const std::string path = bin + "/" + cmd;
      std::ofstream(path) << "#!/bin/sh\ntouch " << dir_ << "/started-" << cmd
                          << "\nexec sleep 3600\n";
      chmod(path.c_str(), 0755);
    }
    WriteConfig(tessera::testing::ConfigBuilder()
                    .HeartbeatTimeout(std::to_string(kHeartbeatTimeoutMs / 1000) + "s")
                    .Cycle(std::to_string(kCycleMs) + "ms")
                    .Queue("batch", "train", {"research"}, "backend: slurm, partition: debug")
                    .Queue("training", "train", {"research"})
                    .Yaml());
    const char* path = getenv("PATH");
    StartServer({"PATH=" + bin + ":" + (path ? path : "/usr/bin")});
    if (HasFatalFailure()) return;
    for (const char* node : {"n1", "n2"}) StartAgent(node);
    ASSERT_TRUE(WaitFor([&] { return NodeState("n1") == "ready" && NodeState("n2") == "ready"; }))
        << server_->Log();
  }
  void TearDown() override {
    StopAgents();
    server_.reset();
  }
  // Whether some hanging Slurm command has started.
  bool SlurmHangs() {
    for (const char* cmd : {"sbatch", "squeue", "scontrol", "scancel", "sacct", "sinfo"}) {
      if (std::filesystem::exists(dir_ + "/started-" + cmd)) return true;
    }
    return false;
  }
  static int64_t NowMs() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

TEST_F(HangingBackendTest, NodeLossAndTheCycleKeepTheirTimeWhileSlurmHangs) {
  // A Slurm job: the backend's thread is now inside a command that hangs (reconciliation's
  // squeue, then sbatch), for its 30 s timeout each time.
  Json slurm = Call("POST", "/v1/jobs", {{"queue", "batch"}, {"command", {"true"}}});
  ASSERT_TRUE(slurm.is_object() && slurm.contains("id")) << slurm.dump();
  // The backend's pass is hanging (it runs every tick) before the clock below starts.
  ASSERT_TRUE(WaitFor([&] { return SlurmHangs(); }, 10000)) << server_->Log();

  // The cycle: a job of the agents' queue is placed within a few cycles.
  const int64_t submitted = NowMs();
  Json job = Call("POST", "/v1/jobs", {{"queue", "training"}, {"command", {"sleep", "600"}}});
  ASSERT_TRUE(job.is_object() && job.contains("id")) << job.dump();
  const std::string id = job["id"];
  ASSERT_TRUE(WaitFor([&] { return State(id) == "running"; }, 10000)) << Job(id).dump();
  const int64_t placed_after = NowMs() - submitted;
  std::cout << "[ measured ] an agent job ran " << placed_after
            << " ms after its submission while every Slurm command hangs\n";
  EXPECT_LT(placed_after, 10000);

  // Node loss: the node whose agent dies (no heartbeat) is declared lost within its heartbeat
  // timeout and a few ticks, not after the hanging command's 30 s.
  const std::string victim = Job(id)["placement"].value("node", "");
  ASSERT_FALSE(victim.empty()) << Job(id).dump();
  agents_[victim == "n1" ? 0 : 1]->Kill(SIGKILL);
  const int64_t killed = NowMs();
  ASSERT_TRUE(WaitFor([&] { return NodeState(victim) == "lost"; }, 20000))
      << "node " << victim << " not declared lost\n"
      << server_->Log();
  const int64_t lost_after = NowMs() - killed;
  std::cout << "[ measured ] node " << victim << " declared lost " << lost_after
            << " ms after its agent died (heartbeat timeout " << kHeartbeatTimeoutMs
            << " ms; a Slurm command hangs for 30 s meanwhile)\n";
  EXPECT_LT(lost_after, kHeartbeatTimeoutMs + 3000);
  // The Slurm job is still waiting on its scheduler: nothing else depends on it.
  EXPECT_NE(State(slurm["id"]), "running");
}

}  // namespace
}  // namespace tessera
