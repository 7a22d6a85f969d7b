// The PBS backend through a real `tessera serve`. No PBS server can be installed from Debian's
// packages, so this test writes STAND-IN `qsub`/`qstat`/`qdel` scripts into a temp directory placed
// first on PATH. They record every call and answer in PBS Pro/OpenPBS's documented formats: qsub
// prints "SEQ.SERVER"; `qstat -x -f -F json` prints {"Jobs": {ID: {"Job_Name", "job_state" (Q, R,
// F), "exec_host", "exec_vnode", "Exit_status"}}} (PBS Reference Guide, qstat JSON output); qdel
// kills the job (Exit_status 271 = 256 + SIGTERM). The stand-in qsub really runs the script, in the
// background, writing where its `#PBS -o` says.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

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
setsid bash -c 'bash "$0/$1.sh" > "$2" 2>&1; echo $? > "$0/$1.exit.tmp"; mv "$0/$1.exit.tmp" "$0/$1.exit"' "$S" "$n" "${out:-/dev/null}" </dev/null >/dev/null 2>&1 &
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
    j = {"Job_Name": open("%s/%d.name" % (S, i)).read().strip(), "Job_Owner": "root@pbs-test",
         "queue": "workq", "exec_host": "pbsnode1/0", "exec_vnode": "(pbsnode1:ncpus=1:ngpus=1)"}
    if os.path.exists("%s/%d.exit" % (S, i)):
        j["job_state"] = "F"
        j["Exit_status"] = int(open("%s/%d.exit" % (S, i)).read())
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
identities:
  - {name: alice, role: user, groups: [research], token: alice-token-1}
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
      std::filesystem::permissions(dir_ + "/bin/" + name, std::filesystem::perms::owner_all);
    }
    ::setenv("PBS_STANDIN_STATE", (dir_ + "/state").c_str(), 1);
    ::setenv("PATH", (dir_ + "/bin:" + std::string(::getenv("PATH"))).c_str(), 1);
    std::ofstream(dir_ + "/config.yaml") << kConfig;
    StartServer();
  }
  std::string Calls() { return testing::ReadFile(dir_ + "/state/calls.log"); }
};

TEST_F(PbsTest, SubmitFollowFailCancel) {
  std::string ok = Call("POST", "/v1/jobs", {{"queue", "hpc"}, {"command", {"sh", "-c", "echo hello-$TESSERA_JOB_ID"}}})["id"];
  std::string bad = Call("POST", "/v1/jobs", {{"queue", "hpc"}, {"command", {"sh", "-c", "exit 3"}}})["id"];
  std::string slow = Call("POST", "/v1/jobs", {{"queue", "hpc"}, {"command", {"sleep", "60"}}})["id"];
  ASSERT_TRUE(WaitFor([&] { return State(ok) == "succeeded"; })) << Job(ok).dump() << Calls() << server_->Log();
  ASSERT_TRUE(WaitFor([&] { return State(bad) == "failed"; })) << Job(bad).dump();
  EXPECT_EQ(Job(bad)["exit_code"], 3);
  ASSERT_TRUE(WaitFor([&] { return State(slow) == "running"; })) << Job(slow).dump();
  Json sj = Job(slow);
  EXPECT_EQ(sj["backend"]["node"], "pbsnode1");
  EXPECT_EQ(sj["backend"]["gres"], "(pbsnode1:ncpus=1:ngpus=1)");
  Call("POST", "/v1/jobs/" + slow + "/cancel");
  ASSERT_TRUE(WaitFor([&] { return State(slow) == "cancelled"; })) << Job(slow).dump() << Calls();
  auto out = client_->Get(("/v1/jobs/" + ok + "/output").c_str(), {{"Authorization", "Bearer alice-token-1"}});
  ASSERT_TRUE(out);
  EXPECT_NE(out->body.find("hello-" + ok), std::string::npos) << out->body;
  const std::string calls = Calls();
  EXPECT_NE(calls.find("qstat -x -f -F json"), std::string::npos) << calls;
  EXPECT_NE(calls.find("qdel 3.pbs-test"), std::string::npos) << calls;
  std::ifstream script(dir_ + "/state/1.sh");
  std::stringstream ss;
  ss << script.rdbuf();
  EXPECT_NE(ss.str().find("#PBS -l select=1:ncpus=1:ngpus=1:mem=64mb"), std::string::npos) << ss.str();
  EXPECT_NE(ss.str().find("#PBS -N tessera-p1-" + ok), std::string::npos) << ss.str();
}

TEST_F(PbsTest, QsubFailingKeepsTheJobUnsubmittedWithItsReasonThenRetries) {
  std::ofstream(dir_ + "/state/down") << "";
  std::string id = Call("POST", "/v1/jobs", {{"queue", "hpc"}, {"command", {"true"}}})["id"];
  ASSERT_TRUE(WaitFor([&] { return Job(id).value("reason", "").find("cannot connect to server") != std::string::npos; }))
      << Job(id).dump();
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

}  // namespace
}  // namespace tessera
