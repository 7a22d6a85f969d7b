// Jobs run under their submitters' Unix accounts, with real `tessera serve` and `tessera agent`
// processes: alice maps to `nobody` (run_as), and her job's process has that uid in /proc; bob
// maps to an account the node does not have, and his job fails with that reason in its output;
// dave sets nothing, so his jobs run as the account named dave (none here: they fail, and never
// run as root); only a queue with run_as_root runs jobs as root. A job cannot read the agent's
// token: not from its command line, its environment or its token file.
// Switching accounts needs the agent to run as root (CI does); elsewhere the test is skipped.
#include <dirent.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "proc.h"
#include "serve_fixture.h"
#include "test_dir.h"

namespace tessera {
namespace {

using Json = nlohmann::json;
using testing::kTessera;
using testing::Proc;

const char* kConfig = R"(
identities:
  - {name: alice, role: user, groups: [research], token: alice-token-1, run_as: nobody}
  - {name: bob, role: user, groups: [research], token: bob-token-12, run_as: tessera-no-such-account}
  - {name: tessera-dave, role: user, groups: [research], token: dave-token-12}
  - {name: agent, role: agent, nodes: [n1], token: agent-token-1}
groups: [{name: research}]
profiles: [{name: train, gpus: 1, cpu: 100m, memory: 64MiB, forms: [whole]}]
queues:
  - {name: training, profile: train, groups: [research]}
  - {name: ops, profile: train, groups: [research], run_as_root: true}
)";

// The pid of the process whose command line contains `marker`, or 0.
pid_t FindProcess(const std::string& marker) {
  DIR* d = opendir("/proc");
  pid_t found = 0;
  while (dirent* e = d != nullptr ? readdir(d) : nullptr) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    std::ifstream in("/proc/" + std::string(e->d_name) + "/cmdline");
    std::stringstream ss;
    ss << in.rdbuf();
    if (ss.str().find(marker) != std::string::npos && ss.str().find("sh") != std::string::npos)
      found = pid;
  }
  if (d != nullptr) closedir(d);
  return found;
}

class RunAsTest : public testing::ServeFixture {
 protected:
  void TearDown() override {
    agent_.reset();
    server_.reset();
  }
  void StartAgent() {
    agent_ = std::make_unique<Proc>(
        std::vector<std::string>{
            kTessera, "agent", "--server", "http://127.0.0.1:" + std::to_string(port_),
            "--token-file", tessera::testing::TokenFile("agent-token-1"), "--node", "n1",
            "--simulate", "1xH100-80GB", "--work", dir_ + "/work", "--cgroup-root", ""},
        dir_ + "/agent.log");
  }
  // The uid of the running process whose command line holds `marker` (its /proc status line).
  static std::string UidLine(pid_t pid) {
    const std::string status = testing::ReadFile("/proc/" + std::to_string(pid) + "/status");
    const size_t at = status.find("\nUid:");
    return at == std::string::npos ? "" : status.substr(at + 1, status.find('\n', at + 1) - at - 1);
  }
  std::unique_ptr<Proc> agent_;
};

TEST_F(RunAsTest, AJobRunsUnderItsSubmittersAccount) {
  if (geteuid() != 0)
    GTEST_SKIP() << "the agent must run as root to switch accounts (CI runs as root)";
  passwd* nobody = getpwnam("nobody");
  ASSERT_NE(nobody, nullptr);
  const uid_t uid = nobody->pw_uid;
  dir_ = tessera::testing::FreshTestDir("run_as");
  std::ofstream(dir_ + "/config.yaml") << kConfig;
  StartServer();
  StartAgent();
  const std::string marker = "sleep 30.2" + std::to_string(getpid() % 1000);
  std::string id =
      Call("POST", "/v1/jobs",
           {{"queue", "training"}, {"command", {"sh", "-c", marker + "; true"}}})["id"];
  ASSERT_TRUE(WaitFor([&] { return State(id) == "running"; })) << agent_->Log();
  pid_t pid = 0;
  ASSERT_TRUE(WaitFor([&] { return (pid = FindProcess(marker)) != 0; }));
  const std::string status = testing::ReadFile("/proc/" + std::to_string(pid) + "/status");
  const std::string u = std::to_string(uid);
  EXPECT_NE(status.find("\nUid:\t" + u + "\t" + u + "\t" + u), std::string::npos) << status;
  Call("POST", "/v1/jobs/" + id + "/cancel");

  // An account the node lacks: the job fails, its output says why.
  std::string b = Call("POST", "/v1/jobs", {{"queue", "training"}, {"command", {"true"}}},
                       "bob-token-12")["id"];
  ASSERT_TRUE(WaitFor([&] {
    return Call("GET", "/v1/jobs/" + b, {}, "bob-token-12").value("state", "") == "failed";
  })) << agent_->Log();
  auto out = client_->Get(("/v1/jobs/" + b + "/output").c_str(),
                          {{"Authorization", "Bearer bob-token-12"}});
  ASSERT_TRUE(out);
  EXPECT_NE(out->body.find("'tessera-no-such-account' does not exist"), std::string::npos)
      << out->body;
}

TEST_F(RunAsTest, NoJobRunsAsRootUnlessItsQueueSaysSo) {
  if (geteuid() != 0)
    GTEST_SKIP() << "the agent must run as root to switch accounts (CI runs as root)";
  dir_ = tessera::testing::FreshTestDir("run_as_root");
  std::ofstream(dir_ + "/config.yaml") << kConfig;
  StartServer();
  StartAgent();
  // dave sets no run_as: his job runs as the account named as he is, which this node lacks. It
  // fails with that reason; it never runs as root (as it did while a job without run_as ran as
  // the agent's own account).
  const std::string dave = "dave-token-12";
  Json sub =
      Call("POST", "/v1/jobs", {{"queue", "training"}, {"command", {"sh", "-c", "id -u"}}}, dave);
  ASSERT_TRUE(sub.contains("id")) << sub.dump();
  const std::string d = sub["id"];
  ASSERT_TRUE(WaitFor([&] {
    return Call("GET", "/v1/jobs/" + d, {}, dave).value("state", "") == "failed";
  })) << agent_->Log();
  auto out =
      client_->Get(("/v1/jobs/" + d + "/output").c_str(), {{"Authorization", "Bearer " + dave}});
  ASSERT_TRUE(out);
  EXPECT_NE(out->body.find("'tessera-dave' does not exist"), std::string::npos) << out->body;
  EXPECT_EQ(out->body.find("\n0\n"), std::string::npos) << out->body;

  // The run_as_root queue: root, as it says.
  const std::string marker = "sleep 30.3" + std::to_string(getpid() % 1000);
  std::string id = Call("POST", "/v1/jobs",
                        {{"queue", "ops"}, {"command", {"sh", "-c", marker + "; true"}}})["id"];
  ASSERT_TRUE(WaitFor([&] { return State(id) == "running"; })) << agent_->Log();
  pid_t pid = 0;
  ASSERT_TRUE(WaitFor([&] { return (pid = FindProcess(marker)) != 0; }));
  EXPECT_EQ(UidLine(pid), "Uid:\t0\t0\t0\t0");
  Call("POST", "/v1/jobs/" + id + "/cancel");
}

TEST_F(RunAsTest, AJobCannotReadTheAgentsToken) {
  if (geteuid() != 0)
    GTEST_SKIP() << "the agent must run as root to switch accounts (CI runs as root)";
  dir_ = tessera::testing::FreshTestDir("run_as_token");
  std::ofstream(dir_ + "/config.yaml") << kConfig;
  StartServer();
  // The token where an operator puts it: a 0600 file, and (an older unit's way) the environment.
  setenv("TESSERA_TOKEN", "agent-token-1", 1);
  StartAgent();
  unsetenv("TESSERA_TOKEN");
  const std::string file = tessera::testing::TokenFile("agent-token-1");
  const std::string agent = std::to_string(agent_->pid());
  const std::string steal = "cat /proc/" + agent + "/cmdline /proc/" + agent + "/environ " + file +
                            " 2>&1 | tr '\\0' ' '; echo done";
  std::string id =
      Call("POST", "/v1/jobs", {{"queue", "training"}, {"command", {"sh", "-c", steal}}})["id"];
  ASSERT_TRUE(WaitFor([&] { return State(id) == "succeeded"; })) << agent_->Log() << Output(id);
  const std::string out = Output(id);
  EXPECT_NE(out.find("done"), std::string::npos) << out;
  EXPECT_NE(out.find("--token-file"), std::string::npos) << out;  // it did read the command line
  EXPECT_EQ(out.find("agent-token-1"), std::string::npos) << "the job read the agent's token:\n"
                                                          << out;
  // And the agent refuses a token on its command line.
  Proc bad({kTessera, "agent", "--server", "http://127.0.0.1:1", "--token", "agent-token-1"},
           dir_ + "/bad.log");
  ASSERT_TRUE(WaitFor([&] { return !bad.Alive(); }));
  EXPECT_NE(bad.Log().find("--token puts the token where every process"), std::string::npos)
      << bad.Log();
}

}  // namespace
}  // namespace tessera
