// Against a REAL single-host Slurm (Debian's slurm-wlm 22.05 and munge): each test starts munged,
// slurmctld and slurmd on loopback with free ports, all state in a temp directory, GPUs declared
// over placeholder character devices (two whole cards, two MIG-typed 1g.10gb devices) and `shard`
// GRES (tests/backends/slurm_up.sh), and a real `tessera serve` whose queues point at the
// partition. Jobs go through Tessera's API and run in Slurm to completion, failure and
// cancellation, across a controller outage and restarts of Tessera and of slurmctld. Everything
// is torn down by pid file in the fixture's TearDown/destructor, also when a test fails. Needs
// root (SlurmUser=root, mknod); skipped otherwise.
#include <gtest/gtest.h>
#include <httplib.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>

#include "../api/proc.h"
#include "../api/serve_fixture.h"
#include "slurm_env.h"

namespace tessera {
namespace {

using Json = nlohmann::json;
using testing::kTessera;
using testing::Proc;
using testing::ReadFile;

const std::string& kScripts = testing::kSlurmScripts;

const char* kConfig = R"(
cluster: t1
backend_poll: 200ms
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: alice, role: user, groups: [research], token: alice-token-1}
  - {name: nob, role: user, groups: [research], token: nobody-token-1, run_as: nobody}
groups:
  - {name: research, limit: {gpu: 2}}
profiles:
  - {name: nb, gpus: 1, gpu_fraction: 0.1, gpu_memory: 4GiB, cpu: 100m, memory: 64MiB, forms: [share]}
  - {name: train, gpus: 1, max_gpus: 2, cpu: 1, memory: 64MiB, forms: [whole]}
  - {name: mig, gpus: 1, gpu_fraction: 0.1, cpu: 100m, memory: 64MiB, forms: [partition]}
queues:
  - {name: notebooks, profile: nb, groups: [research], backend: slurm, partition: debug, shard_memory: 1GiB}
  - {name: training, profile: train, groups: [research], backend: slurm, partition: debug, gpu_type: testgpu}
  - {name: inference, profile: mig, groups: [research], backend: slurm, partition: debug, gres_partition: "gpu:1g.10gb:1", class: inference}
  - {name: serving, profile: mig, groups: [research], backend: slurm, partition: debug, mig_model: H100-80GB, class: inference}
)";

using testing::Sh;

std::string TrimWs(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  while (!s.empty() && s.front() == ' ') s.erase(s.begin());
  return s;
}

// What `cmd` prints (stdout and stderr), and its exit status in *rc.
std::string Capture(const std::string& cmd, int* rc) {
  std::string out;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = ::pclose(p);
  *rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

class SlurmTest : public testing::ServeFixture {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to run slurmctld/slurmd";
    wait_ms_ = 20000;
    // Short: munged's socket path must fit in sun_path (108 bytes).
    static int seq = 0;
    dir_ = ::testing::TempDir() + "/sl" + std::to_string(::getpid()) + "_" + std::to_string(seq++);
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    slurm_ = dir_ + "/slurm";
    started_ = true;
    ASSERT_EQ(
        Sh("bash " + kScripts + "/slurm_up.sh " + slurm_ + " > " + dir_ + "/slurm_up.log 2>&1"), 0)
        << ReadFile(dir_ + "/slurm_up.log");
    ::setenv("SLURM_CONF", (slurm_ + "/slurm.conf").c_str(), 1);
    std::ofstream(dir_ + "/config.yaml") << testing::WithJobAccounts(kConfig);
    StartServer();
  }
  void TearDown() override {
    server_.reset();
    if (started_) (void)Sh("bash " + kScripts + "/slurm_down.sh " + slurm_);
    started_ = false;
  }
  ~SlurmTest() override {
    if (started_) (void)Sh("bash " + kScripts + "/slurm_down.sh " + slurm_);
  }
  // How many Slurm jobs carry `name`; `line`, when given, gets the last one's scontrol line.
  int SlurmJobsNamed(const std::string& name, std::string* line_out = nullptr) {
    const std::string f = dir_ + "/sq.txt";
    (void)Sh("scontrol show job -o > " + f + " 2>/dev/null");
    std::ifstream in(f);
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
      if (line.find(" JobName=" + name + " ") == std::string::npos) continue;
      ++n;
      if (line_out != nullptr) *line_out = line;
    }
    return n;
  }
  std::string Diag(const std::string& id) {
    return Job(id).dump() + "\n--- serve.log\n" + server_->Log() + "\n--- slurmctld.log (tail)\n" +
           ReadFile(slurm_ + "/log/slurmctld.log").substr(0, 4000);
  }

  std::string slurm_;
  bool started_ = false;
};

// Hostile values in the environment and the command, quoted for the shell in the batch script:
// they arrive byte for byte and run nothing (no file appears); a hostile name is refused.
TEST_F(SlurmTest, HostileValuesRunHarmlesslyAndHostileNamesAreRefused) {
  const std::string marker = dir_ + "/owned";
  const std::string nasty = "a'b\"c $(touch " + marker + ") `touch " + marker + "` ; touch " +
                            marker + " \\n %s {{queue}}";
  std::string id = Call(
      "POST", "/v1/jobs",
      {{"queue", "training"},
       {"env", {{"NASTY", nasty}}},
       {"command", {"sh", "-c", "printf '%s|%s\\n' \"$NASTY\" \"$1\"", "argv0", nasty}}})["id"];
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(WaitFor([&] { return State(id) == "succeeded"; })) << Diag(id);
  EXPECT_EQ(Output(id), nasty + "|" + nasty + "\n");
  EXPECT_FALSE(std::filesystem::exists(marker)) << "a value was run by the shell";
  Json refused = Call("POST", "/v1/jobs",
                      {{"queue", "training"},
                       {"env", {{"X=1; touch " + marker + "; Y", "v"}}},
                       {"command", {"true"}}});
  EXPECT_NE(refused.value("error", "").find("is not a variable name"), std::string::npos)
      << refused.dump();
  EXPECT_FALSE(std::filesystem::exists(marker));
}

TEST_F(SlurmTest, WholeCardsAndSharesRunToCompletionWithTheirGres) {
  std::string w = Call(
      "POST", "/v1/jobs",
      {{"queue", "training"},
       {"gpus", 2},
       {"walltime", "10m"},  // Slurm's time limit for it: Slurm stops it then
       {"command",
        {"sh", "-c", "echo whole cvd=$CUDA_VISIBLE_DEVICES q=$TESSERA_QUEUE; sleep 1"}}})["id"];
  std::string s =
      Call("POST", "/v1/jobs",
           {{"queue", "notebooks"},
            {"gpu_memory", "3GiB"},
            {"command",
             {"sh", "-c",
              "echo share shards=$SLURM_SHARDS_ON_NODE cap=$TESSERA_GPU_MEMORY_LIMIT"}}})["id"];
  ASSERT_FALSE(w.empty());
  // While it runs, the job shows where Slurm placed it and which GPU indices it got.
  ASSERT_TRUE(WaitFor([&] { return State(w) == "running" || State(w) == "succeeded"; })) << Diag(w);
  ASSERT_TRUE(WaitFor([&] { return State(w) == "succeeded"; })) << Diag(w);
  ASSERT_TRUE(WaitFor([&] { return State(s) == "succeeded"; })) << Diag(s);
  Json wj = Job(w);
  EXPECT_EQ(wj["backend"]["name"], "slurm");
  EXPECT_FALSE(wj["backend"]["external_id"].get<std::string>().empty());
  EXPECT_FALSE(wj["backend"]["node"].get<std::string>().empty()) << wj.dump();
  EXPECT_NE(Output(w).find("whole cvd=0,1 q=training"), std::string::npos) << Output(w);
  EXPECT_NE(Output(s).find("share shards=3 cap=3221225472"), std::string::npos) << Output(s);
  Json ev = Call("GET", "/v1/events?kind=job.running", {}, "admin-token-1");
  bool saw_gres = false;
  for (const auto& e : ev["events"]) {
    if (e["subject"] == w)
      saw_gres = e["data"]["gres"].get<std::string>().find("IDX:0-1") != std::string::npos;
  }
  EXPECT_TRUE(saw_gres) << ev.dump();
  std::string line;
  EXPECT_EQ(SlurmJobsNamed("tessera-t1-" + w, &line), 1);
  EXPECT_NE(line.find(" TimeLimit=00:10:00 "), std::string::npos) << line;
  EXPECT_EQ(SlurmJobsNamed("tessera-t1-" + s, &line), 1);
  EXPECT_NE(line.find(" TimeLimit=UNLIMITED "), std::string::npos) << line;
  // Each shows when it started, also the share that may end between two polls, never seen
  // running: then squeue's TimeUsed says how long before its end.
  for (const std::string& id : {w, s}) {
    const Json j = Job(id);
    ASSERT_TRUE(j.contains("start_ms")) << j.dump();
    EXPECT_GE(j["start_ms"].get<int64_t>(), j["submit_ms"].get<int64_t>()) << j.dump();
    EXPECT_LE(j["start_ms"].get<int64_t>(), j["end_ms"].get<int64_t>()) << j.dump();
  }
}

TEST_F(SlurmTest, MigInstancesRunAsTypedGres) {
  // Two MIG jobs: Slurm gives each one of the two 1g.10gb devices (gpu2, gpu3), never a whole card.
  // One through a queue with a fixed GRES, one through a queue that picks the profile from the
  // card's model and what the job asks for (9GiB on an H100-80GB: 1g.10gb).
  std::string a =
      Call("POST", "/v1/jobs",
           {{"queue", "inference"},
            {"command", {"sh", "-c", "echo mig cvd=$CUDA_VISIBLE_DEVICES; sleep 2"}}})["id"];
  std::string b =
      Call("POST", "/v1/jobs",
           {{"queue", "serving"},
            {"gpu_memory", "9GiB"},
            {"command", {"sh", "-c", "echo mig cvd=$CUDA_VISIBLE_DEVICES; sleep 2"}}})["id"];
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(b.empty());
  ASSERT_TRUE(WaitFor([&] { return State(a) == "succeeded"; })) << Diag(a);
  ASSERT_TRUE(WaitFor([&] { return State(b) == "succeeded"; })) << Diag(b);
  EXPECT_EQ(Job(a)["placement"]["form"], "partition") << Job(a).dump();
  EXPECT_EQ(Job(b)["spec"]["mig_profile"], "1g.10gb") << Job(b).dump();
  // docs/openapi.json describes every field of such a job, its backend object included.
  std::ifstream api(TESSERA_SOURCE_DIR "/docs/openapi.json");
  const Json schema = Json::parse(api)["components"]["schemas"]["Job"]["properties"];
  for (const auto& [k, v] : Job(a).items())
    EXPECT_TRUE(schema.contains(k)) << "undocumented job field " << k;
  for (const auto& [k, v] : Job(a)["backend"].items()) {
    EXPECT_TRUE(schema["backend"]["properties"].contains(k)) << "undocumented backend field " << k;
  }
  Json ev = Call("GET", "/v1/events?kind=job.running", {}, "admin-token-1");
  std::set<std::string> gres;
  for (const auto& e : ev["events"]) {
    if (e["subject"] == a || e["subject"] == b) gres.insert(e["data"]["gres"].get<std::string>());
  }
  // Slurm reports each job's device by its type and its index among the node's GPUs (2 and 3 are
  // the MIG devices; 0 and 1 the whole cards), and sets CUDA_VISIBLE_DEVICES to it.
  EXPECT_EQ(gres, (std::set<std::string>{"gpu:1g.10gb:1(IDX:2)", "gpu:1g.10gb:1(IDX:3)"}))
      << ev.dump();
  EXPECT_EQ((std::set<std::string>{Output(a), Output(b)}),
            (std::set<std::string>{"mig cvd=2\n", "mig cvd=3\n"}));
}

TEST_F(SlurmTest, FailureCancellationAndGroupLimit) {
  std::string f =
      Call("POST", "/v1/jobs", {{"queue", "training"}, {"command", {"sh", "-c", "exit 3"}}})["id"];
  std::string c =
      Call("POST", "/v1/jobs", {{"queue", "training"}, {"command", {"sleep", "60"}}})["id"];
  // The group's limit is 2 GPUs: with one held by `c`, a 2-GPU job waits unsubmitted.
  ASSERT_TRUE(WaitFor([&] { return State(f) == "failed"; })) << Diag(f);
  EXPECT_EQ(Job(f)["exit_code"], 3);
  ASSERT_TRUE(WaitFor([&] { return State(c) == "running"; })) << Diag(c);
  std::string big =
      Call("POST", "/v1/jobs", {{"queue", "training"}, {"gpus", 2}, {"command", {"true"}}})["id"];
  Json bj = Job(big);
  EXPECT_EQ(bj["state"], "pending") << bj.dump();
  EXPECT_NE(bj["reason"].get<std::string>().find("at its gpu limit"), std::string::npos)
      << bj.dump();
  Call("POST", "/v1/jobs/" + c + "/cancel");
  ASSERT_TRUE(WaitFor([&] { return State(c) == "cancelled"; })) << Diag(c);
  // Its quota is free again: the waiting job is admitted and runs.
  ASSERT_TRUE(WaitFor([&] { return State(big) == "succeeded"; })) << Diag(big);
}

TEST_F(SlurmTest, ControllerDownJobsWaitUnsubmittedThenRun) {
  ASSERT_EQ(Sh("bash " + kScripts + "/slurm_up.sh " + slurm_ + " stop-ctld"), 0);
  std::string id = Call("POST", "/v1/jobs", {{"queue", "training"}, {"command", {"true"}}})["id"];
  // sbatch itself gives up on an unreachable controller after about 9 s.
  ASSERT_TRUE(WaitFor(
      [&] { return Job(id).value("reason", "").find("not yet submitted") != std::string::npos; },
      40000))
      << Diag(id);
  EXPECT_EQ(State(id), "placed");
  ASSERT_EQ(Sh("bash " + kScripts + "/slurm_up.sh " + slurm_ + " restart-ctld > " + dir_ +
               "/restart.log 2>&1"),
            0)
      << ReadFile(dir_ + "/restart.log");
  ASSERT_TRUE(WaitFor([&] { return State(id) == "succeeded"; }, 45000)) << Diag(id);
  EXPECT_EQ(SlurmJobsNamed("tessera-t1-" + id), 1);
}

TEST_F(SlurmTest, RestartsOfTesseraAndSlurmctldNeitherLoseNorDoubleJobs) {
  std::string id =
      Call("POST", "/v1/jobs", {{"queue", "training"}, {"command", {"sleep", "4"}}})["id"];
  ASSERT_TRUE(WaitFor([&] { return State(id) == "running"; })) << Diag(id);
  server_->Kill(SIGKILL);
  // A job under this cluster's name that Tessera never recorded: cancelled by reconciliation.
  ASSERT_EQ(Sh("printf '#!/bin/sh\\nsleep 60\\n' | sbatch -Q -J tessera-t1-j-999 -o /dev/null"), 0);
  ASSERT_EQ(Sh("bash " + kScripts + "/slurm_up.sh " + slurm_ + " restart-ctld > " + dir_ +
               "/restart.log 2>&1"),
            0)
      << ReadFile(dir_ + "/restart.log");
  StartServer();
  ASSERT_TRUE(WaitFor([&] { return State(id) == "succeeded"; }, 30000)) << Diag(id);
  EXPECT_EQ(SlurmJobsNamed("tessera-t1-" + id), 1);
  ASSERT_TRUE(WaitFor([&] {
    Json ev = Call("GET", "/v1/events?kind=backend.orphan_cancelled", {}, "admin-token-1");
    return ev.is_object() && ev["events"].size() == 1;
  })) << server_->Log();
}

// The same Slurm with accounting through slurmdbd over a MariaDB server of its own, where Debian's
// slurmdbd and mariadb-server are installed (slurm_up.sh, SLURM_UP_ACCOUNTING=1); without them,
// the plain one, whose sacct answers "Slurm accounting storage is disabled".
class SlurmAccountingTest : public SlurmTest {
 protected:
  void SetUp() override {
    ::setenv("SLURM_UP_ACCOUNTING", "1", 1);
    SlurmTest::SetUp();
    ::unsetenv("SLURM_UP_ACCOUNTING");
  }
};

// Issue 30: a job of an identity whose Unix account is `nobody` (run_as) is Slurm's job of that
// account, not of the account `tessera serve` runs under (root here): squeue, scontrol, Slurm's
// job completion log (jobcomp/filetxt) and, with slurmdbd, sacct name it; the job's processes run
// as it, it writes its output into the file Tessera reads (created for it, mode 0600), and
// Tessera (root) still cancels its jobs.
TEST_F(SlurmAccountingTest, JobsAreSubmittedAsTheIdentitysAccount) {
  passwd* pw = ::getpwnam("nobody");
  ASSERT_NE(pw, nullptr) << "Debian has the account nobody";
  const uid_t uid = pw->pw_uid;
  const std::string token = "nobody-token-1";
  std::string id = Call(
      "POST", "/v1/jobs",
      {{"queue", "training"},
       {"command",
        {"sh", "-c", "echo user=$(id -un) uid=$(id -u) home=$HOME logname=$LOGNAME; sleep 2"}}},
      token)["id"];
  ASSERT_FALSE(id.empty()) << server_->Log();
  ASSERT_TRUE(WaitFor([&] { return State(id) == "running" || State(id) == "succeeded"; }))
      << Diag(id);
  const std::string ext = Job(id)["backend"]["external_id"];
  int rc = 0;
  EXPECT_EQ(Capture("squeue -h -t all -j " + ext + " -o %u", &rc), "nobody\n");
  const std::string shown = Capture("scontrol show job -o " + ext, &rc);
  EXPECT_NE(shown.find(" UserId=nobody(" + std::to_string(uid) + ") "), std::string::npos) << shown;
  ASSERT_TRUE(WaitFor([&] { return State(id) == "succeeded"; })) << Diag(id);
  auto out =
      client_->Get(("/v1/jobs/" + id + "/output").c_str(), {{"Authorization", "Bearer " + token}});
  ASSERT_TRUE(out);
  EXPECT_EQ(out->body,
            "user=nobody uid=" + std::to_string(uid) + " home=" + pw->pw_dir + " logname=nobody\n");
  struct stat st {};
  ASSERT_EQ(::stat((dir_ + "/data/output/" + id + ".log").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, uid);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // Slurm's own record of the ended job.
  std::string comp;
  ASSERT_TRUE(WaitFor([&] {
    comp = ReadFile(slurm_ + "/log/jobcomp.txt");
    return comp.find("JobId=" + ext + " ") != std::string::npos;
  })) << comp;
  const size_t at = comp.find("JobId=" + ext + " ");
  const std::string line = comp.substr(at, comp.find('\n', at) - at);
  EXPECT_NE(line.find(" UserId=nobody(" + std::to_string(uid) + ") "), std::string::npos) << line;
  if (std::filesystem::exists(slurm_ + "/slurmdbd.conf")) {
    std::string acct;
    EXPECT_TRUE(WaitFor([&] {
      return TrimWs(acct = Capture("sacct -j " + ext + " -n -X -o User", &rc)) == "nobody";
    })) << acct;
    std::cout << "sacct -j " << ext << " -n -X -o User: " << TrimWs(acct) << "\n";
  } else {
    const std::string acct = Capture("sacct -j " + ext + " -n -X -o User", &rc);
    EXPECT_NE(acct.find("accounting storage is disabled"), std::string::npos) << acct;
    std::cout << "no slurmdbd here (install slurmdbd and mariadb-server): " << TrimWs(acct) << "\n";
  }
  // Tessera still cancels the account's jobs.
  std::string c =
      Call("POST", "/v1/jobs", {{"queue", "training"}, {"command", {"sleep", "60"}}}, token)["id"];
  ASSERT_TRUE(WaitFor([&] { return State(c) == "running"; })) << Diag(c);
  const std::string cext = Job(c)["backend"]["external_id"];
  EXPECT_EQ(Capture("squeue -h -t all -j " + cext + " -o %u", &rc), "nobody\n");
  Call("POST", "/v1/jobs/" + c + "/cancel", Json::object(), token);
  ASSERT_TRUE(WaitFor([&] { return State(c) == "cancelled"; })) << Diag(c);
  ASSERT_TRUE(WaitFor([&] {
    return Capture("squeue -h -t all -j " + cext + " -o %T", &rc).rfind("CANCELLED", 0) == 0;
  })) << Capture("scontrol show job -o " + cext, &rc);
}

}  // namespace
}  // namespace tessera
