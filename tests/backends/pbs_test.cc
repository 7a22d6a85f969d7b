// The PBS backend through a real `tessera serve`. No PBS server can be installed from Debian's
// packages, so this test writes STAND-IN `qsub`/`qstat`/`qdel` scripts into a temp directory placed
// first on PATH. They record every call and answer in PBS Pro/OpenPBS's documented formats: qsub
// prints "SEQ.SERVER"; `qstat -x -f -F json` prints {"Jobs": {ID: {"Job_Name", "job_state" (Q, R,
// F), "exec_host", "exec_vnode", "Exit_status", "resources_used": {"walltime": "HH:MM:SS"}}}} (PBS
// Reference Guide, qstat JSON output; walltime once finished only, here); qdel
// kills the job (Exit_status 271 = 256 + SIGTERM). The stand-in qsub really runs the script, in the
// background, as the account qsub was run as (as PBS runs a job as its owner), writing where its
// `#PBS -o` says; it records that account as the job's Job_Owner, which qstat shows.
#include <gtest/gtest.h>
#include <httplib.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../api/proc.h"
#include "../api/serve_fixture.h"
#include "../api/test_dir.h"

namespace tessera {
namespace {

using Json = nlohmann::json;
using testing::kTessera;
using testing::Proc;

const char* kQsub = R"SH(#!/bin/bash
S=$PBS_STANDIN_STATE
echo "qsub $*" >> "$S/calls.log"
if [ -e "$S/down" ]; then echo "qsub: cannot connect to server pbs-test (errno=111)" >&2; exit 2; fi
n=$(( $(cat "$S/seq" 2>/dev/null || echo 0) + 1 )); echo $n > "$S/seq"
id="$n.pbs-test"
cat > "$S/$n.sh"
name=$(sed -n 's/^#PBS -N //p' "$S/$n.sh"); out=$(sed -n 's/^#PBS -o //p' "$S/$n.sh")
echo "$name" > "$S/$n.name"
echo "$(id -un) $(id -u) $(id -g) HOME=$HOME USER=$USER LOGNAME=$LOGNAME PWD=$PWD" > "$S/$n.owner"
setsid bash -c 'date +%s > "$0/$1.start"; bash "$0/$1.sh" > "$2" 2>&1; echo $? > "$0/$1.exit.tmp"; date +%s > "$0/$1.end"; mv "$0/$1.exit.tmp" "$0/$1.exit"' "$S" "$n" "${out:-/dev/null}" </dev/null >/dev/null 2>&1 &
echo $! > "$S/$n.pid"
echo "$id"
# Test hook: the submission goes through but qsub reports a failure (as on a timeout).
if [ -e "$S/fail_after_submit" ]; then rm -f "$S/fail_after_submit"; echo "qsub: timed out" >&2; exit 3; fi
)SH";

const char* kQstat = R"SH(#!/usr/bin/env python3
import json, os, sys
S = os.environ["PBS_STANDIN_STATE"]
open(S + "/calls.log", "a").write("qstat " + " ".join(sys.argv[1:]) + "\n")
jobs = {}
n = int(open(S + "/seq").read()) if os.path.exists(S + "/seq") else 0
for i in range(1, n + 1):
    owner = open("%s/%d.owner" % (S, i)).read().split()[0]
    j = {"Job_Name": open("%s/%d.name" % (S, i)).read().strip(), "Job_Owner": owner + "@pbs-test",
         "queue": "workq", "exec_host": "pbsnode1/0", "exec_vnode": "(pbsnode1:ncpus=1:ngpus=1)"}
    if os.path.exists("%s/%d.exit" % (S, i)):
        j["job_state"] = "F"
        j["Exit_status"] = int(open("%s/%d.exit" % (S, i)).read())
        if os.path.exists("%s/%d.end" % (S, i)):  # not one qdel ended
            ran = int(open("%s/%d.end" % (S, i)).read()) - int(open("%s/%d.start" % (S, i)).read())
            j["resources_used"] = {"walltime": "%02d:%02d:%02d" % (ran // 3600, ran // 60 % 60, ran % 60)}
    else:
        j["job_state"] = "R"
    jobs["%d.pbs-test" % i] = j
print(json.dumps({"timestamp": 1700000000, "pbs_version": "2022.1.0", "pbs_server": "pbs-test", "Jobs": jobs}, indent=4))
)SH";

const char* kQdel = R"SH(#!/bin/bash
S=$PBS_STANDIN_STATE
echo "qdel $*" >> "$S/calls.log"
n=${1%%.*}
[ -e "$S/$n.exit" ] && exit 0
echo 271 > "$S/$n.exit"
kill -TERM -- "-$(cat "$S/$n.pid")" 2>/dev/null || true
)SH";

const char* kConfig = R"(
cluster: p1
backend_poll: 200ms
ended_jobs_in_memory: 2
identities:
  - {name: alice, role: user, groups: [research], token: alice-token-1}
  - {name: admin, role: admin, token: admin-token-1}
  - {name: nob, role: user, groups: [research], token: nobody-token-1, run_as: nobody}
  - {name: dae, role: user, groups: [research], token: daemon-token-1, run_as: daemon}
groups: [{name: research}]
profiles:
  - {name: train, gpus: 1, cpu: 1, memory: 64MiB, forms: [whole]}
queues:
  - {name: hpc, profile: train, groups: [research], backend: pbs, partition: workq}
)";

class PbsTest : public testing::ServeFixture {
 protected:
  void SetUp() override {
    dir_ = tessera::testing::FreshTestDir("pbs");
    std::filesystem::create_directories(dir_ + "/bin");
    std::filesystem::create_directories(dir_ + "/state");
    for (auto [name, text] : {std::pair{"qsub", kQsub}, {"qstat", kQstat}, {"qdel", kQdel}}) {
      std::ofstream(dir_ + "/bin/" + name) << text;
      // Runnable by every account: qsub runs as the job's account.
      std::filesystem::permissions(dir_ + "/bin/" + name, std::filesystem::perms::owner_all |
                                                              std::filesystem::perms::group_read |
                                                              std::filesystem::perms::group_exec |
                                                              std::filesystem::perms::others_read |
                                                              std::filesystem::perms::others_exec);
    }
    ::setenv("PBS_STANDIN_STATE", (dir_ + "/state").c_str(), 1);
    ::setenv("PATH", (dir_ + "/bin:" + std::string(::getenv("PATH"))).c_str(), 1);
    ShareState();
    std::ofstream(dir_ + "/config.yaml") << testing::WithJobAccounts(kConfig);
    StartServer();
  }
  std::string Calls() { return testing::ReadFile(dir_ + "/state/calls.log"); }
  // The stand-in's state, writable by every account: qsub runs as the job's.
  void ShareState() {
    namespace fs = std::filesystem;
    std::ofstream(dir_ + "/state/calls.log", std::ios::app).flush();
    fs::permissions(
        dir_ + "/state/calls.log",
        fs::perms::all & ~(fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec));
    fs::permissions(dir_ + "/state", fs::perms::all);
  }
};

TEST_F(PbsTest, SubmitFollowFailCancel) {
  std::string ok =
      Call("POST", "/v1/jobs",
           {{"queue", "hpc"}, {"command", {"sh", "-c", "echo hello-$TESSERA_JOB_ID"}}})["id"];
  std::string bad =
      Call("POST", "/v1/jobs", {{"queue", "hpc"}, {"command", {"sh", "-c", "exit 3"}}})["id"];
  std::string slow =
      Call("POST", "/v1/jobs", {{"queue", "hpc"}, {"command", {"sleep", "60"}}})["id"];
  ASSERT_TRUE(WaitFor([&] { return State(ok) == "succeeded"; }))
      << Job(ok).dump() << Calls() << server_->Log();
  ASSERT_TRUE(WaitFor([&] { return State(bad) == "failed"; })) << Job(bad).dump();
  EXPECT_EQ(Job(bad)["exit_code"], 3);
  // Both ended within milliseconds, most often before a poll (every 200 ms) saw them run: each
  // starts its walltime (resources_used.walltime) before its end, no earlier than submitted.
  for (const std::string& id : {ok, bad}) {
    const Json j = Job(id);
    ASSERT_TRUE(j.contains("start_ms")) << j.dump();
    EXPECT_GE(j["start_ms"].get<int64_t>(), j["submit_ms"].get<int64_t>()) << j.dump();
    EXPECT_LE(j["start_ms"].get<int64_t>(), j["end_ms"].get<int64_t>()) << j.dump();
  }
  ASSERT_TRUE(WaitFor([&] { return State(slow) == "running"; })) << Job(slow).dump();
  Json sj = Job(slow);
  EXPECT_EQ(sj["backend"]["node"], "pbsnode1");
  EXPECT_EQ(sj["backend"]["gres"], "(pbsnode1:ncpus=1:ngpus=1)");
  Call("POST", "/v1/jobs/" + slow + "/cancel");
  ASSERT_TRUE(WaitFor([&] { return State(slow) == "cancelled"; })) << Job(slow).dump() << Calls();
  auto out = client_->Get(("/v1/jobs/" + ok + "/output").c_str(),
                          {{"Authorization", "Bearer alice-token-1"}});
  ASSERT_TRUE(out);
  EXPECT_NE(out->body.find("hello-" + ok), std::string::npos) << out->body;
  const std::string calls = Calls();
  EXPECT_NE(calls.find("qstat -x -f -F json"), std::string::npos) << calls;
  EXPECT_NE(calls.find("qdel 3.pbs-test"), std::string::npos) << calls;
  std::ifstream script(dir_ + "/state/1.sh");
  std::stringstream ss;
  ss << script.rdbuf();
  EXPECT_NE(ss.str().find("#PBS -l select=1:ncpus=1:ngpus=1:mem=64mb"), std::string::npos)
      << ss.str();
  EXPECT_NE(ss.str().find("#PBS -N tessera-p1-" + ok), std::string::npos) << ss.str();
}

// Jobs that end through a batch backend leave memory like every other ended job (memory keeps
// the newest `ended_jobs_in_memory`, up to twice that before it lets go): they were ended outside
// EndLocked and stayed in memory for good, one more with every job. The views still show them,
// from the store.
TEST_F(PbsTest, JobsEndedThroughTheBackendLeaveMemoryLikeAnyOther) {
  std::vector<std::string> ids;
  for (int i = 0; i < 6; ++i)
    ids.push_back(Call("POST", "/v1/jobs", {{"queue", "hpc"}, {"command", {"true"}}})["id"]);
  for (const std::string& id : ids) {
    ASSERT_TRUE(WaitFor([&] { return State(id) == "succeeded"; })) << Job(id).dump() << Calls();
  }
  int64_t in_memory = -1;
  EXPECT_TRUE(WaitFor([&] {
    in_memory = Call("GET", "/v1/health", {}, "admin-token-1")["jobs_in_memory"].get<int64_t>();
    return in_memory <= 4;
  })) << in_memory
      << " jobs in memory, all ended";
  for (const std::string& id : ids) EXPECT_EQ(State(id), "succeeded") << id;
}

TEST_F(PbsTest, QsubFailingKeepsTheJobUnsubmittedWithItsReasonThenRetries) {
  std::ofstream(dir_ + "/state/down") << "";
  std::string id = Call("POST", "/v1/jobs", {{"queue", "hpc"}, {"command", {"true"}}})["id"];
  ASSERT_TRUE(WaitFor([&] {
    return Job(id).value("reason", "").find("cannot connect to server") != std::string::npos;
  })) << Job(id).dump();
  EXPECT_EQ(State(id), "placed");
  std::filesystem::remove(dir_ + "/state/down");
  ASSERT_TRUE(WaitFor([&] { return State(id) == "succeeded"; })) << Job(id).dump() << Calls();
  // Exactly one job went in.
  std::ifstream seq(dir_ + "/state/seq");
  int n = 0;
  seq >> n;
  EXPECT_EQ(n, 1);
}

TEST_F(PbsTest, ASubmissionThatFailedAfterGoingThroughIsAdoptedNotRepeated) {
  std::ofstream(dir_ + "/state/fail_after_submit") << "";
  std::string id = Call("POST", "/v1/jobs", {{"queue", "hpc"}, {"command", {"sleep", "1"}}})["id"];
  ASSERT_TRUE(WaitFor([&] { return State(id) == "succeeded"; })) << Job(id).dump() << Calls();
  std::ifstream seq(dir_ + "/state/seq");
  int n = 0;
  seq >> n;
  EXPECT_EQ(n, 1) << Calls();
  EXPECT_EQ(Job(id)["backend"]["external_id"], "1.pbs-test");
}

// Issue 30: qsub runs as the identity's Unix account (run_as: nobody), so PBS records that account
// as the job's owner (Job_Owner in qstat) and runs the job as it. The server (root) prepares the
// job's output file for the account and still cancels its jobs (root is a PBS manager).
TEST_F(PbsTest, QsubRunsAsTheIdentitysAccount) {
  if (::geteuid() != 0)
    GTEST_SKIP() << "submitting as another account needs a root server (CI runs as root)";
  passwd* pw = ::getpwnam("nobody");
  ASSERT_NE(pw, nullptr);
  const std::string uid = std::to_string(pw->pw_uid), gid = std::to_string(pw->pw_gid);
  const std::string token = "nobody-token-1";
  std::string id =
      Call("POST", "/v1/jobs", {{"queue", "hpc"}, {"command", {"sh", "-c", "echo user=$(id -un)"}}},
           token)["id"];
  ASSERT_TRUE(WaitFor([&] { return State(id) == "succeeded"; }))
      << Job(id).dump() << Calls() << server_->Log();
  // qsub ran as nobody, with nobody's home and names, in a directory nobody can enter (its home
  // is /nonexistent: /tmp, where Slurm too sends a job whose directory is missing).
  EXPECT_EQ(testing::ReadFile(dir_ + "/state/1.owner"),
            "nobody " + uid + " " + gid + " HOME=" + pw->pw_dir +
                " USER=nobody LOGNAME=nobody PWD=/tmp\n");
  auto out =
      client_->Get(("/v1/jobs/" + id + "/output").c_str(), {{"Authorization", "Bearer " + token}});
  ASSERT_TRUE(out);
  EXPECT_EQ(out->body, "user=nobody\n");
  struct stat st {};
  ASSERT_EQ(::stat((dir_ + "/data/output/" + id + ".log").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, pw->pw_uid);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // What qstat says of it: PBS's owner is the account.
  std::string qstat;
  FILE* p = ::popen("qstat -x -f -F json", "r");
  ASSERT_NE(p, nullptr);
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) qstat.append(buf, n);
  ::pclose(p);
  EXPECT_EQ(Json::parse(qstat)["Jobs"]["1.pbs-test"]["Job_Owner"], "nobody@pbs-test") << qstat;
  // Cancelled by Tessera, as root.
  std::string c =
      Call("POST", "/v1/jobs", {{"queue", "hpc"}, {"command", {"sleep", "60"}}}, token)["id"];
  ASSERT_TRUE(WaitFor([&] { return State(c) == "running"; })) << Job(c).dump() << Calls();
  Call("POST", "/v1/jobs/" + c + "/cancel", Json::object(), token);
  ASSERT_TRUE(WaitFor([&] { return State(c) == "cancelled"; })) << Job(c).dump() << Calls();
  EXPECT_NE(Calls().find("qdel 2.pbs-test"), std::string::npos) << Calls();
}

// A server that is not root cannot submit as another account: the job fails with a reason naming
// the account, and qsub is never run (the job does not run under the server's account instead).
// As root, the test runs `tessera serve` as nobody (setpriv) and maps the identity to daemon.
TEST_F(PbsTest, ANonRootServerRefusesAnotherAccount) {
  server_.reset();
  std::vector<std::string> argv = {
      kTessera, "serve",        "--config", dir_ + "/config.yaml",
      "--data", dir_ + "/data", "--listen", "127.0.0.1:" + std::to_string(port_)};
  if (::geteuid() == 0) {
    ASSERT_EQ(std::system(("chown -R nobody:nogroup " + dir_).c_str()), 0);
    argv.insert(argv.begin(),
                {"/usr/bin/setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"});
  }
  server_ = std::make_unique<Proc>(argv, dir_ + "/serve-again.log");  // a fresh log: its port
  port_ = server_->WaitForPort();
  ASSERT_GT(port_, 0) << server_->Log();
  client_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
  Json made = Call("POST", "/v1/jobs", {{"queue", "hpc"}, {"command", {"true"}}}, "daemon-token-1");
  ASSERT_TRUE(made.contains("id")) << made.dump() << server_->Log();
  const std::string id = made["id"];
  ASSERT_TRUE(WaitFor([&] { return State(id) == "failed"; })) << Job(id).dump() << server_->Log();
  const std::string reason = Job(id)["reason"];
  EXPECT_NE(reason.find("'daemon'"), std::string::npos) << reason;
  EXPECT_NE(reason.find("not root"), std::string::npos) << reason;
  EXPECT_EQ(Calls().find("qsub"), std::string::npos) << Calls();
}

}  // namespace
}  // namespace tessera
