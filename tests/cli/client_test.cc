// The user commands (`tessera submit`, `jobs`, `job`, `cancel`, `groups`) run as real processes
// against real servers: `tessera up` (its own example config, HTTPS), `tessera serve` (plain
// HTTP), and for a deposed leader a small fake in this process. The rough edges of issue 35's CLI
// paragraph and issue 33's "a deposed leader's answer to the CLI", each shown failing first.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "../api/proc.h"
#include "../api/serve_fixture.h"
#include "run_tessera.h"
#include "support/config_builder.h"
#include "support/free_port.h"
#include "support/test_dir.h"

namespace tessera::testing {
namespace {

using Json = nlohmann::json;

// A fake API server on a free port of 127.0.0.1, serving from the first Env() until it goes out
// of scope: routes first (`api.server.Get(...)`), then the environment that points the CLI at it.
class FakeApi {
 public:
  httplib::Server server;
  std::vector<std::string> Env() {
    if (!serving_.joinable()) {
      port_ = server.bind_to_any_port("127.0.0.1");
      serving_ = std::thread([this] { server.listen_after_bind(); });
    }
    return {"TESSERA_URL=http://127.0.0.1:" + std::to_string(port_), "TESSERA_TOKEN=x"};
  }
  ~FakeApi() {
    server.stop();
    if (serving_.joinable()) serving_.join();
  }

 private:
  int port_ = 0;
  std::thread serving_;
};
using ::testing::HasSubstr;
using ::testing::Not;

// Submissions' quantities are checked before any call: no server is needed.
TEST(SubmitFlagsTest, NegativeAmountsAreRefusedNamingTheFlagAndTheValue) {
  const std::vector<std::string> env = {"TESSERA_URL=http://127.0.0.1:1", "TESSERA_TOKEN=x"};
  struct Case {
    std::vector<std::string> flag;
    std::string said;
  };
  for (const Case& c : {Case{{"--gpus", "-1"}, "--gpus: '-1' is negative"},
                        Case{{"--gpus=-3"}, "--gpus: '-3' is negative"},
                        Case{{"--cpu", "-2"}, "--cpu: quantity '-2' is negative"},
                        Case{{"--gpu-memory", "-8GiB"}, "--gpu-memory: memory quantity '-8GiB'"},
                        Case{{"--memory", "-1GiB"}, "--memory: memory quantity '-1GiB'"},
                        Case{{"--gpu-fraction", "-0.5"}, "--gpu-fraction: quantity '-0.5'"}}) {
    std::vector<std::string> args = {"submit", "--queue", "training"};
    args.insert(args.end(), c.flag.begin(), c.flag.end());
    for (const char* a : {"--", "true"}) args.push_back(a);
    ProcessResult r = Tessera(args, env);
    EXPECT_EQ(r.exit_code, 2) << c.flag[0] << ": " << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.said));
    EXPECT_THAT(r.err, Not(HasSubstr("cannot reach")));  // refused before any call
  }
}

// An empty value was taken as no flag (`--gpu-memory ""` submitted the profile's GPU memory): it
// is refused, naming the flag, as the API refuses an empty quantity.
TEST(SubmitFlagsTest, AnEmptyValueIsRefusedNamingTheFlag) {
  const std::vector<std::string> env = {"TESSERA_URL=http://127.0.0.1:1", "TESSERA_TOKEN=x"};
  for (const char* flag :
       {"--gpu-memory", "--memory", "--cpu", "--gpu-fraction", "--form", "--class", "--name"}) {
    ProcessResult r = Tessera({"submit", "--queue", "training", flag, "", "--", "true"}, env);
    EXPECT_EQ(r.exit_code, 2) << flag << ": " << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr(std::string(flag) + ": "));
    EXPECT_THAT(r.err, HasSubstr("empty"));
    EXPECT_THAT(r.err, Not(HasSubstr("cannot reach")));  // refused before any call
  }
}

// A command argument, name, queue or environment value that is not UTF-8 cannot travel in the
// JSON body: it said "unexpected answer from the server: [json.exception.type_error.316] ...",
// though no server had answered. It is refused before any call, naming what is not text.
TEST(SubmitFlagsTest, TextThatIsNotUtf8IsRefusedNamingWhereItIs) {
  const std::vector<std::string> env = {"TESSERA_URL=http://127.0.0.1:1", "TESSERA_TOKEN=x"};
  const std::string bad = "caf\xe9";  // Latin-1, as a file name of an old system may be
  struct Case {
    std::vector<std::string> args;
    std::string said;
  };
  for (const Case& c : {Case{{"--queue", "q", "--", "ls", bad}, "the command's argument 2 ('caf"},
                        Case{{"--queue", "q", "--", bad}, "the command's argument 1"},
                        Case{{"--queue", "q", "--name", bad, "--", "true"}, "--name"},
                        Case{{"--queue", bad, "--", "true"}, "--queue"},
                        Case{{"--queue", "q", "--env", "A=" + bad, "--", "true"}, "--env A"}}) {
    std::vector<std::string> args = {"submit"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    ProcessResult r = Tessera(args, env);
    EXPECT_EQ(r.exit_code, 2) << c.said << ": " << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.said));
    EXPECT_THAT(r.err, HasSubstr("is not UTF-8 text"));
    EXPECT_THAT(r.err, Not(HasSubstr("unexpected answer")));
    EXPECT_THAT(r.err, Not(HasSubstr("cannot reach")));  // refused before any call
  }
}

// `--queu Q` said "--queue is required"; an unknown flag is named, with the closest one.
TEST(UnknownFlagTest, IsRefusedByNameWithASuggestion) {
  ProcessResult r = Tessera({"submit", "--queu", "notebooks", "--", "true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("tessera submit: unknown flag --queu; did you mean --queue?"));
  EXPECT_THAT(r.err, Not(HasSubstr("is required")));
  ProcessResult eq = Tessera({"jobs", "--stat=running"});
  EXPECT_EQ(eq.exit_code, 2);
  EXPECT_THAT(eq.err, HasSubstr("tessera jobs: unknown flag --stat; did you mean --state?"));
  ProcessResult far = Tessera({"groups", "--frobnicate"});
  EXPECT_EQ(far.exit_code, 2);
  EXPECT_THAT(far.err, HasSubstr("tessera groups: unknown flag --frobnicate ("));
  ProcessResult command = Tessera({"jbos"});
  EXPECT_EQ(command.exit_code, 2);
  EXPECT_THAT(command.err, HasSubstr("tessera: unknown command 'jbos'; did you mean jobs?"));
  ProcessResult nested = Tessera({"sim", "opnb"});
  EXPECT_EQ(nested.exit_code, 2);
  EXPECT_THAT(nested.err, HasSubstr("tessera sim: unknown command 'opnb'; did you mean openb?"));
  // A flag after `--` is the job's, not tessera's: refused only for want of a server here.
  ProcessResult after = Tessera({"submit", "--queue", "q", "--", "python", "--queu"});
  EXPECT_THAT(after.err, Not(HasSubstr("unknown flag")));
}

// --class and --form are checked as they are parsed too, with "did you mean".
TEST(SubmitFlagsTest, AnUnknownClassOrFormIsRefusedWithASuggestion) {
  ProcessResult c = Tessera({"submit", "--queue", "q", "--class", "trainng", "--", "true"});
  EXPECT_EQ(c.exit_code, 2);
  EXPECT_THAT(c.err, HasSubstr("unknown class 'trainng'; did you mean training? (one of training, "
                               "inference, interactive, ci, batch)"));
  ProcessResult f = Tessera({"submit", "--queue", "q", "--form", "shares", "--", "true"});
  EXPECT_EQ(f.exit_code, 2);
  EXPECT_THAT(f.err, HasSubstr("unknown form 'shares'; did you mean share?"));
  EXPECT_THAT(f.err, Not(HasSubstr("cannot reach")));
}

// `--state bogus` printed an empty table: refused as it is parsed (no server needed), with the
// states a job has.
TEST(JobsStateTest, AnUnknownStateIsRefusedListingTheValidOnes) {
  ProcessResult r = Tessera({"jobs", "--state", "bogus"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown state 'bogus'"));
  EXPECT_THAT(r.err, HasSubstr("pending, placed, starting, running, preempting, succeeded, "
                               "failed, cancelled, lost"));
  EXPECT_THAT(r.err, Not(HasSubstr("cannot reach")));
  ProcessResult typo = Tessera({"jobs", "--state", "runing"});
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_THAT(typo.err, HasSubstr("did you mean running?"));
}

// `tessera up` as a new user starts it: its example config, HTTPS with its own certificate.
class UpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshTestDir("cli-up");
    up_ = std::make_unique<Proc>(
        std::vector<std::string>{kTessera, "up", "--data", dir_ + "/d", "--listen", "127.0.0.1:0"},
        dir_ + "/up.log");
    port_ = up_->WaitForPort();
    ASSERT_GT(port_, 0) << up_->Log();
    url_ = "https://127.0.0.1:" + std::to_string(port_);
  }
  void TearDown() override {
    if (HasFailure() && up_) std::cerr << up_->Log();
  }
  // `tessera ARGS` as `who` (alice or admin), the way `tessera up` says to set it up.
  ProcessResult As(const std::string& who, const std::vector<std::string>& args) {
    return Tessera(args,
                   {"TESSERA_URL=" + url_, "TESSERA_TOKEN_FILE=" + dir_ + "/d/" + who + ".token",
                    "TESSERA_CA=" + dir_ + "/d/tls/cert.pem"});
  }
  // Waits until `tessera ARGS` prints `text`; the last run.
  ProcessResult WaitForOutput(const std::string& who, const std::vector<std::string>& args,
                              const std::string& text) {
    ProcessResult r;
    WaitFor([&] { return (r = As(who, args)).out.find(text) != std::string::npos; },
            std::chrono::seconds(20));
    return r;
  }

  std::string dir_, url_;
  int port_ = 0;
  std::unique_ptr<Proc> up_;
};

// `tessera groups` aborted (rc 134, a JSON type error) on the example's group `production`,
// which leaves its CPU limit unset.
TEST_F(UpTest, GroupsShowsALimitLeftUnsetAsADash) {
  ProcessResult r = As("admin", {"groups"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("research"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("production +0 +1 +2 +0 +-"));
}

// `tessera jobs` showed the newest 100 jobs and said nothing of the rest: --limit, and a note
// when a full page may leave older ones out.
TEST_F(UpTest, JobsSaysWhenItShowsAFullPageAndTakesALimit) {
  for (int i = 0; i < 3; ++i) {
    ProcessResult s = As("alice", {"submit", "--queue", "training", "--", "true"});
    ASSERT_EQ(s.exit_code, 0) << s.err;
  }
  ProcessResult two = As("alice", {"jobs", "--limit", "2"});
  ASSERT_EQ(two.exit_code, 0) << two.err;
  EXPECT_THAT(two.out, HasSubstr("j-3"));
  EXPECT_THAT(two.out, ::testing::Not(HasSubstr("j-1")));
  EXPECT_THAT(two.err, HasSubstr("the newest 2 jobs; older ones may be left out"));
  ProcessResult all = As("alice", {"jobs"});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  EXPECT_THAT(all.out, HasSubstr("j-1"));
  EXPECT_THAT(all.err, ::testing::Not(HasSubstr("older ones")));
  EXPECT_NE(As("alice", {"jobs", "--limit", "0"}).exit_code, 0);
}

// An http:// URL against the HTTPS server said "cannot reach ... (Read)".
TEST_F(UpTest, AnHttpUrlIsToldTheServerSpeaksHttps) {
  ProcessResult r = As("alice", {"jobs", "--url", "http://127.0.0.1:" + std::to_string(port_)});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("that server speaks HTTPS; use " + url_));
}

// The job's name shows in `jobs` and `job`; a waiting job's reason says when, as a clock time
// and how far off, not "t=1796242375s"; `cancel` takes several ids and says what happened to
// each.
TEST_F(UpTest, NamesHumanTimesAndCancellingSeveralJobs) {
  ProcessResult one = As("alice", {"submit", "--queue", "training", "--gpus", "1", "--walltime",
                                   "1h", "--name", "long-train", "--", "sleep", "1000"});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  ProcessResult two = As("alice", {"submit", "--queue", "training", "--gpus", "2", "--walltime",
                                   "1h", "--", "sleep", "1000"});
  ASSERT_EQ(two.exit_code, 0) << two.err;
  ProcessResult running = WaitForOutput("alice", {"job", "j-1"}, "running");
  EXPECT_THAT(running.out, HasSubstr("NAME"));
  EXPECT_THAT(running.out, HasSubstr("long-train"));
  // Submitted, started and how long it has run, for people: clock times and durations, never
  // milliseconds or seconds since the epoch.
  for (const char* column : {"SUBMITTED", "STARTED", "DURATION", "GPUS"})
    EXPECT_THAT(running.out, HasSubstr(column));
  // (This second is "in 0s".)
  EXPECT_THAT(running.out, ::testing::ContainsRegex(
                               "[0-9]{2}:[0-9]{2} UTC \\((in 0s|[0-9]+s ago)\\) +"
                               "[0-9]{2}:[0-9]{2} UTC \\((in 0s|[0-9]+s ago)\\) +[0-9]+s "));
  EXPECT_THAT(running.out, Not(::testing::ContainsRegex("17[0-9]{8}")));
  // When it will be stopped (its walltime), which only the JSON said (a new user); with its date
  // when that is another day (CI at 23:13 read "stops at: 2026-12-08 00:13 UTC").
  EXPECT_THAT(running.out,
              ::testing::ContainsRegex("stops at: ([0-9]{4}-[0-9]{2}-[0-9]{2} )?[0-9]{2}:"
                                       "[0-9]{2} UTC \\(in [0-9hm ]+\\) \\(its walltime"));
  ProcessResult waiting = WaitForOutput("alice", {"jobs"}, "expected free at");
  EXPECT_THAT(waiting.out, HasSubstr("long-train"));
  // A time on another day carries its date (an hour from 23:xx UTC is tomorrow's).
  const std::string day = "([0-9]{4}-[0-9]{2}-[0-9]{2} )?";
  EXPECT_THAT(waiting.out, ::testing::ContainsRegex("expected free at " + day +
                                                    "[0-9:]+ UTC \\(in (59m|1h)\\)"));
  EXPECT_THAT(waiting.out, Not(HasSubstr("t=1")));
  // And its place in line, with when it should start (the server's forecast).
  EXPECT_THAT(waiting.out, ::testing::ContainsRegex("position 1, expected to start " + day +
                                                    "[0-9:]+ UTC \\(in (59m|1h)\\)"));
  ProcessResult only_running = As("alice", {"jobs", "--state", "running"});
  EXPECT_EQ(only_running.exit_code, 0) << only_running.err;
  EXPECT_THAT(only_running.out, HasSubstr("j-1 "));
  EXPECT_THAT(only_running.out, Not(HasSubstr("j-2 ")));

  ProcessResult ended = As("alice", {"submit", "--queue", "notebooks", "--", "true"});
  ASSERT_EQ(ended.exit_code, 0) << ended.err;
  ASSERT_THAT(WaitForOutput("alice", {"job", "j-3"}, "succeeded").out, HasSubstr("succeeded"));

  ProcessResult c = As("alice", {"cancel", "j-1", "j-2", "j-3", "j-99"});
  EXPECT_THAT(c.out, HasSubstr("j-1 cancelling (running)\n"));
  EXPECT_THAT(c.out, HasSubstr("j-2 cancelled\n"));
  EXPECT_THAT(c.out, HasSubstr("j-3 already ended (succeeded)\n"));
  EXPECT_THAT(c.err, HasSubstr("tessera cancel: j-99: no job 'j-99' (HTTP 404)"));
  EXPECT_EQ(c.exit_code, 2);  // one of them could not be cancelled
  EXPECT_THAT(WaitForOutput("alice", {"job", "j-1"}, "cancelled").out, HasSubstr("cancelled"));
}

// What a new user typed, taken as typed (a red team's report): `--env` before `--` once took
// `--` as the end of its own list and the job's `-c` as tessera's flag; an id or a kind with
// URL characters went into the URL as they were (`job 'j-1?x=1'` showed j-1, `--kind
// 'job.placed&after=60'` printed each event twice); a server URL with a trailing slash could not
// be reached, ftp:// aborted (rc 134) and a missing CA file was "cannot reach (SSLLoadingCerts)".
TEST_F(UpTest, EnvIdsKindsUrlsAndCaFilesAreTakenAsTyped) {
  ProcessResult env = As("alice", {"submit", "--queue", "notebooks", "--env", "FOO=bar", "--env",
                                   "B=2", "--", "sh", "-c", "echo $FOO-$B"});
  ASSERT_EQ(env.exit_code, 0) << env.err;
  EXPECT_THAT(WaitForOutput("alice", {"job", "j-1"}, "bar-2").out, HasSubstr("bar-2"));
  ProcessResult odd = As("alice", {"job", "j-1?x=1"});
  EXPECT_EQ(odd.exit_code, 2) << odd.out;
  EXPECT_THAT(odd.err, HasSubstr("no job 'j-1?x=1'"));
  ProcessResult empty = As("alice", {"job", ""});
  EXPECT_EQ(empty.exit_code, 2) << empty.out;
  EXPECT_THAT(empty.err, HasSubstr("'' is not a job id"));
  ProcessResult kinds = As("admin", {"events", "--kind", "job.submitted&after=0"});
  EXPECT_EQ(kinds.exit_code, 0) << kinds.err;
  EXPECT_THAT(kinds.out, Not(HasSubstr("job.submitted"))) << "no event is of that kind";
  const std::string token = "TESSERA_TOKEN_FILE=" + dir_ + "/d/alice.token";
  const std::string ca = "TESSERA_CA=" + dir_ + "/d/tls/cert.pem";
  ProcessResult slash = Tessera({"jobs"}, {"TESSERA_URL=" + url_ + "/", token, ca});
  EXPECT_EQ(slash.exit_code, 0) << slash.err;
  EXPECT_THAT(slash.out, HasSubstr("j-1"));
  for (const std::string& url :
       {std::string("ftp://x"), std::string("127.0.0.1:1"), url_ + "/v1"}) {
    ProcessResult bad = Tessera({"jobs"}, {"TESSERA_URL=" + url, token, ca});
    EXPECT_EQ(bad.exit_code, 2) << url << ": " << bad.err;
    EXPECT_THAT(bad.err, HasSubstr("server URL '" + url +
                                   "' must look like http://host:port or https://host:port"));
  }
  ProcessResult no_ca =
      Tessera({"jobs"}, {"TESSERA_URL=" + url_, token, "TESSERA_CA=/nonexistent"});
  EXPECT_EQ(no_ca.exit_code, 2) << no_ca.err;
  EXPECT_THAT(no_ca.err, HasSubstr("cannot read CA file '/nonexistent'"));
  ProcessResult not_pem =
      Tessera({"jobs"}, {"TESSERA_URL=" + url_, token, "TESSERA_CA=" + dir_ + "/d/alice.token"});
  EXPECT_EQ(not_pem.exit_code, 2) << not_pem.err;
  EXPECT_THAT(not_pem.err, HasSubstr("holds no PEM certificate"));
  // A directory opens but does not read (EISDIR): that read threw out of the CLI (an abort).
  ProcessResult dir = Tessera({"jobs"}, {"TESSERA_URL=" + url_, token, "TESSERA_CA=" + dir_});
  EXPECT_EQ(dir.exit_code, 2) << dir.err;
  EXPECT_THAT(dir.err, HasSubstr("cannot read CA file '" + dir_ + "'"));
}

// A waiting share shows the fraction of a GPU it asked for, as it will once placed: it showed
// "1 gpu 8GiB" and GPUS 1, then "share 8GiB" and 0.1.
TEST_F(UpTest, AWaitingShareShowsTheFractionItAskedFor) {
  // Once the agent has registered the node (the port opens first).
  ASSERT_THAT(WaitForOutput("admin", {"nodes"}, "local").out, HasSubstr("local"));
  ASSERT_EQ(As("admin", {"cordon", "local"}).exit_code, 0);
  ProcessResult sub =
      As("alice", {"submit", "--queue", "notebooks", "--gpu-memory", "8GiB", "--", "true"});
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  ProcessResult jobs = As("alice", {"jobs"});
  EXPECT_THAT(jobs.out, ::testing::ContainsRegex("j-1 .* pending .* 0.1 gpu 8GiB +0.1 +-"))
      << jobs.out;
  // And the reason is that no node takes work, not that the job is larger than a node of 0 CPUs.
  EXPECT_THAT(jobs.out, HasSubstr("no node in pools [default] takes new work")) << jobs.out;
}

// A submission to a server that does not answer is tried again for 30 s (a leader may be
// restarting; the key keeps it from running twice): it once said nothing all that time.
TEST(SubmitRetryTest, SaysAtOnceThatItIsTryingAgain) {
  const std::string dir = FreshTestDir("cli-retry");
  Proc submit({"/usr/bin/env", "TESSERA_URL=http://127.0.0.1:" + std::to_string(FreePort()),
               "TESSERA_TOKEN=x", kTessera, "submit", "--queue", "q", "--", "true"},
              dir + "/submit.log");
  EXPECT_TRUE(WaitFor([&] { return submit.Log().find("trying again") != std::string::npos; },
                      std::chrono::seconds(10)))
      << submit.Log();
  EXPECT_THAT(submit.Log(), HasSubstr("for up to 30s"));
}

// A plain-HTTP `tessera serve`, and a fake server in front of it for a deposed leader.
class ServeClientTest : public ServeFixture {
 protected:
  void SetUp() override {
    dir_ = FreshTestDir("cli-serve");
    WriteConfig(ConfigBuilder().Yaml());
    StartServer();
    real_ = "http://127.0.0.1:" + std::to_string(port_);
  }
  void TearDown() override {
    if (fake_) fake_->stop();
    if (fake_thread_.joinable()) fake_thread_.join();
  }
  ProcessResult As(const std::string& token, const std::string& urls,
                   const std::vector<std::string>& args) {
    return Tessera(args, {"TESSERA_URL=" + urls, "TESSERA_TOKEN_FILE=" + TokenFile(token)});
  }
  // A fake leader deposed meanwhile: it hands a submission to the real server (it lands, as a
  // write the old leader made before it learnt it was fenced could), then answers `status` as
  // such a server does. It records each Idempotency-Key it was sent.
  std::string StartDeposedLeader(int status, bool forward, const std::string& path = "/v1/jobs") {
    fake_ = std::make_unique<httplib::Server>();
    fake_->Post(path, [this, status, forward](const httplib::Request& req, httplib::Response& res) {
      {
        std::lock_guard<std::mutex> l(mu_);
        keys_.push_back(req.get_header_value("Idempotency-Key"));
      }
      if (forward) {
        httplib::Client real("127.0.0.1", port_);
        httplib::Headers h = {{"Authorization", req.get_header_value("Authorization")},
                              {"Idempotency-Key", req.get_header_value("Idempotency-Key")}};
        auto r = real.Post("/v1/jobs", h, req.body, "application/json");
        landed_ = r && r->status / 100 == 2;
      }
      res.status = status;
      res.set_content(Json{{"error", "store: fenced: another server leads (epoch 2)"}}.dump(),
                      "application/json");
    });
    const int port = fake_->bind_to_any_port("127.0.0.1");
    fake_thread_ = std::thread([this] { fake_->listen_after_bind(); });
    return "http://127.0.0.1:" + std::to_string(port);
  }
  std::vector<std::string> Keys() {
    std::lock_guard<std::mutex> l(mu_);
    return keys_;
  }
  int JobsStored() {
    Json j = Call("GET", "/v1/jobs", {}, "admin-token-1");
    return j.is_object() ? static_cast<int>(j["jobs"].size()) : -1;
  }

  std::string real_;
  std::unique_ptr<httplib::Server> fake_;
  std::thread fake_thread_;
  std::mutex mu_;
  std::vector<std::string> keys_;
  std::atomic<bool> landed_{false};
};

// An https:// URL against the plain-HTTP server is told so.
TEST_F(ServeClientTest, AnHttpsUrlIsToldTheServerSpeaksPlainHttp) {
  ProcessResult r = As("alice-token-1", "https://127.0.0.1:" + std::to_string(port_), {"jobs"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("that server speaks plain HTTP, not HTTPS; use " + real_));
}

// Issue 33: a deposed leader answered 500 and the CLI gave up, although it holds an
// Idempotency-Key. It moves on to the next server with the same key, and the job is made once
// (the deposed one's write landed: the real server sees the key twice and makes one job).
TEST_F(ServeClientTest, ADeposedLeadersAnswerSendsTheSubmissionOnWithTheSameKey) {
  for (int status : {500, 503}) {
    const std::string fake = StartDeposedLeader(status, /*forward=*/true);
    const int before = JobsStored();
    ProcessResult r = As("alice-token-1", fake + "," + real_,
                         {"submit", "--json", "--queue", "training", "--", "true"});
    ASSERT_EQ(r.exit_code, 0) << status << ": " << r.out << r.err;
    EXPECT_TRUE(landed_.load()) << status;
    ASSERT_EQ(Keys().size(), 1u) << status;
    EXPECT_EQ(Keys()[0].size(), 32u) << status;
    EXPECT_EQ(JobsStored(), before + 1) << status << ": made once";
    Json job = Json::parse(r.out, nullptr, false);
    ASSERT_TRUE(job.is_object()) << r.out;
    EXPECT_EQ(job["id"], "j-" + std::to_string(before + 1));
    fake_->stop();
    fake_thread_.join();
    keys_.clear();
    landed_ = false;
  }
}

// A cancel is safe to repeat: one that a deposed leader failed goes on to the next server.
TEST_F(ServeClientTest, ACancelFailedByADeposedLeaderGoesOnToTheNextServer) {
  ProcessResult submitted =
      As("alice-token-1", real_, {"submit", "--queue", "training", "--", "true"});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.err;  // pending: no agent here
  const std::string fake = StartDeposedLeader(500, /*forward=*/false, "/v1/jobs/j-1/cancel");
  ProcessResult r = As("alice-token-1", fake + "," + real_, {"cancel", "j-1"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out, "j-1 cancelled\n");
  EXPECT_EQ(Keys().size(), 1u);
  EXPECT_EQ(State("j-1"), "cancelled");
}

// A 500 from every server is an answer, not a failover: said at once, not retried for 30 s.
TEST_F(ServeClientTest, AFiveHundredFromTheOnlyServerIsNotRetried) {
  const std::string fake = StartDeposedLeader(500, /*forward=*/false);
  const auto start = std::chrono::steady_clock::now();
  ProcessResult r = As("alice-token-1", fake, {"submit", "--queue", "training", "--", "true"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("store: fenced: another server leads (epoch 2) (HTTP 500)"));
  EXPECT_EQ(Keys().size(), 1u);
  EXPECT_EQ(JobsStored(), 0);
}

// An answer of a shape the client does not expect is said, never an abort (rc 134).
TEST(UnexpectedAnswerTest, IsSaidAndExitsOne) {
  FakeApi api;
  api.server.Get("/v1/queues", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"queues": [{"name": "q", "priority": null}]})", "application/json");
  });
  ProcessResult r = Tessera({"queues"}, api.Env());
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("tessera: unexpected answer from the server: "));
}

// What a user reads of the cluster: a card another group holds as "other" (the server names the
// job only to those who may see it), each node's host CPU and memory in use (a new user missed
// them), and each queue's runtime guards (a job was stopped at a max_runtime no listing showed).
TEST(ClusterViewsTest, NodesShowHostUseAndOthersWorkAndQueuesTheirGuards) {
  FakeApi api;
  api.server.Get("/v1/nodes", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"nodes": [{"name": "n1", "state": "ready", "simulated": false,
        "cpu_milli": 16000, "memory_mib": 65536, "cpu_milli_used": 2500, "memory_mib_used": 8192,
        "devices": [{"index": 0, "model": "H100-80GB", "simulated": false, "memory_mib": 81920,
                     "gpu_milli_used": 1000, "gpu_memory_mib_used": 81920,
                     "holders": [{"form": "whole", "gpu_milli": 1000, "gpu_memory_mib": 81920}]}]}]})",
                    "application/json");
  });
  api.server.Get("/v1/queues", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"queues": [
        {"name": "train", "priority": 0, "class": "training", "forms": ["whole"],
         "groups": ["a"], "preemptible": true, "max_runtime_s": 7200, "idle_timeout_s": 1800,
         "idle_action": "requeue"},
        {"name": "nb", "priority": 10, "class": "interactive", "forms": ["share"],
         "groups": ["a"], "preemptible": false}]})",
                    "application/json");
  });
  const std::vector<std::string> env = api.Env();
  ProcessResult nodes = Tessera({"nodes"}, env);
  ProcessResult queues = Tessera({"queues"}, env);
  EXPECT_EQ(nodes.exit_code, 0) << nodes.out << nodes.err;
  EXPECT_THAT(nodes.out, HasSubstr("HOST USED"));
  EXPECT_THAT(nodes.out, HasSubstr("2.5/16 cpu 8GiB/64GiB"));
  EXPECT_THAT(nodes.out, HasSubstr("other(whole)"));
  EXPECT_EQ(queues.exit_code, 0) << queues.out << queues.err;
  EXPECT_THAT(queues.out, HasSubstr("max 2h, idle 30m (requeue)"));
  EXPECT_THAT(queues.out, ::testing::ContainsRegex("nb .* no +-"));
}

// A new user's typos: `drain local:` (a device index left out) said "no node 'local:'", and
// `up --help` showed "--tls,--no-tls{false}".
TEST(NodeFlagsTest, ADeviceLeftOutAndTheTlsFlagsAreSaidPlainly) {
  const std::vector<std::string> env = {"TESSERA_URL=http://127.0.0.1:1", "TESSERA_TOKEN=x"};
  ProcessResult r = Tessera({"drain", "local:"}, env);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("'local:' names no device after ':' (NODE or NODE:DEVICE, e.g. "
                               "local:0)"));
  EXPECT_THAT(r.err, Not(HasSubstr("cannot reach")));  // refused before any call
  ProcessResult help = Tessera({"up", "--help"}, env);
  EXPECT_EQ(help.exit_code, 0) << help.err;
  EXPECT_THAT(help.out, Not(HasSubstr("{false}")));
  EXPECT_THAT(help.out, HasSubstr("--no-tls"));
}

// A new user in two groups always submitted in the first: the API takes "group", the CLI had no
// flag for it.
TEST(SubmitGroupTest, GroupIsSentAsGiven) {
  FakeApi api;
  std::string body;
  api.server.Post("/v1/jobs", [&](const httplib::Request& req, httplib::Response& res) {
    body = req.body;
    res.set_content(R"({"id": "j-1", "state": "pending"})", "application/json");
  });
  ProcessResult r = Tessera({"submit", "--queue", "q", "--group", "tiny", "--", "true"}, api.Env());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(Json::parse(body, nullptr, false).value("group", ""), "tiny") << body;
}

// A new user: with the engine busy a view is its last rendering, of any age ("stale_ms"), and the
// tables said nothing: a listing 20 s old looked current. It is said, on stderr.
TEST(StaleViewTest, ATableOfAnOldViewSaysHowOld) {
  FakeApi api;
  api.server.Get("/v1/queues", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"queues": [], "stale_ms": 20059})", "application/json");
  });
  api.server.Get("/v1/groups", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"groups": [], "stale_ms": 300})", "application/json");
  });
  const std::vector<std::string> env = api.Env();
  ProcessResult old = Tessera({"queues"}, env);
  ProcessResult fresh = Tessera({"groups"}, env);
  EXPECT_EQ(old.exit_code, 0) << old.out << old.err;
  EXPECT_THAT(old.err, HasSubstr("(as of 20 s ago: the server was busy"));
  EXPECT_EQ(fresh.exit_code, 0) << fresh.out << fresh.err;
  EXPECT_THAT(fresh.err, Not(HasSubstr("as of")));
}

}  // namespace
}  // namespace tessera::testing
