// The leader lease under a stall, with real processes and a real PostgreSQL (issue 33): two
// `tessera serve` on one database, one leads and the other waits as a standby.
// - The leader is stopped (SIGSTOP) for 15 s: a stopped process keeps its database session, so
//   only a lease with an expiry lets the standby lead, within 10 s of the leader's last renewal;
//   submissions sent to it meanwhile are each answered within 10 s. A submission sent to the
//   stopped leader is answered, once it resumes, with 503 saying it no longer leads, and the
//   resumed leader changes nothing in the store before it exits.
// - A waiting standby given SIGTERM exits, and never leads, even when the lease frees up at that
//   moment.
// - A leader deposed behind its back (the epoch moved on in the store) answers 503 saying it no
//   longer leads, not 409 or 500, so that clients move on to another server.
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "server_pair.h"
#include "store/internal.h"

namespace tessera {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

const char* kConfig = R"(
heartbeat_timeout: 1h
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: alice, role: user, groups: [research], token: alice-token-1}
groups: [{name: research}]
profiles:
  - {name: train, gpus: 1, cpu: 100m, memory: 64MiB, forms: [whole]}
queues:
  - {name: training, profile: train, groups: [research]}
)";

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// A submission's answer: the HTTP status (0: none within the read timeout) and body.
struct Answer {
  int status = 0;
  std::string body;
};

Answer Submit(int port, const std::string& key, int read_timeout_s) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(1);
  c.set_read_timeout(read_timeout_s);
  auto r = c.Post("/v1/jobs", {{"Authorization", "Bearer alice-token-1"}, {"Idempotency-Key", key}},
                  Json{{"queue", "training"}, {"command", {"true"}}}.dump(), "application/json");
  if (!r) return {};
  return {r->status, r->body};
}

class LeaseFailoverTest : public testing::ServerPairTest {
 protected:
  void SetUp() override {
    SetUpPair("lease", kConfig);
    read_timeout_s_ = 2;
  }
  // The job ids with their states, and the last event's seq, as server k answers them.
  std::string Snapshot(int k) {
    Json jobs = Get(k, "/v1/jobs?limit=100000");
    Json events = Get(k, "/v1/events?limit=100000");
    std::string out;
    for (const auto& j : jobs["jobs"])
      out += j["id"].get<std::string>() + "=" + j["state"].get<std::string>() + " ";
    int64_t last = 0;
    for (const auto& e : events["events"]) last = std::max(last, e["seq"].get<int64_t>());
    return out + "last_seq=" + std::to_string(last);
  }
};

TEST_F(LeaseFailoverTest, AStandbyGivenSigtermExitsAndNeverLeads) {
  LeaderAndStandby();
  // The standby is told to stop, and the lease frees up at the same moment: it must not take it.
  servers_[1]->Signal(SIGTERM);
  servers_[0]->Kill(SIGKILL);
  EXPECT_TRUE(servers_[1]->WaitExited(std::chrono::seconds(10)))
      << "the standby did not exit on SIGTERM:\n"
      << servers_[1]->Log();
  EXPECT_EQ(servers_[1]->Log().find("leading as"), std::string::npos)
      << "the standby led after SIGTERM:\n"
      << servers_[1]->Log();
}

TEST_F(LeaseFailoverTest, APausedLeaderIsReplacedWithinTheBoundAndFencedWhenItResumes) {
  LeaderAndStandby();
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(Submit(ports_[0], "before-" + std::to_string(i), 10).status, 201);

  servers_[0]->Signal(SIGSTOP);
  const auto stopped = Clock::now();
  // Sent to the stopped leader: answered once it resumes.
  Answer to_stopped;
  std::thread stalled([&] { to_stopped = Submit(ports_[0], "to-the-stopped-leader", 60); });
  // Clients keep submitting to the standby while the leader is stopped; each is answered (503
  // while it waits, 201 once it leads) within 10 s.
  std::mutex mu;
  std::vector<std::string> acked;
  double worst = 0;
  int unanswered = 0;
  std::atomic<bool> stop{false};
  std::thread client([&] {
    for (int n = 0; !stop.load(); ++n) {
      const auto sent = Clock::now();
      Answer a = Submit(ports_[1], "during-" + std::to_string(n), 30);
      const double took = Seconds(Clock::now() - sent);
      std::lock_guard<std::mutex> l(mu);
      worst = std::max(worst, took);
      if (a.status == 0) ++unanswered;
      if (a.status == 201) acked.push_back(Json::parse(a.body)["id"].get<std::string>());
      // A client's pause between submissions (what this test is about is the server's answers).
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  // And a prober connects to the standby back to back: from standby to leader, no connection is
  // refused and none is cut off unanswered (the listening socket is handed over, not reopened).
  std::atomic<int> probes{0}, unreached{0};
  std::thread prober([&] {
    while (!stop.load()) {
      httplib::Client c("127.0.0.1", ports_[1]);
      c.set_connection_timeout(5);
      c.set_read_timeout(10);
      auto r = c.Get("/v1/health");
      ++probes;
      if (!r) ++unreached;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  const bool led = WaitForRole(1, "leader", 20000);
  const double takeover = Seconds(Clock::now() - stopped);
  EXPECT_TRUE(led) << servers_[1]->Log();
  EXPECT_LT(takeover, 10.0) << "the standby led " << takeover << " s after the leader stopped";
  // The leader stays stopped for 15 s (the stall is what the test is about).
  std::this_thread::sleep_until(stopped + std::chrono::seconds(15));
  stop.store(true);
  client.join();
  prober.join();
  EXPECT_EQ(unreached.load(), 0) << "of " << probes.load() << " health probes to the standby";
  {
    std::lock_guard<std::mutex> l(mu);
    EXPECT_EQ(unanswered, 0);
    EXPECT_LT(worst, 10.0) << "a submission took " << worst << " s to be answered";
    EXPECT_FALSE(acked.empty()) << "nothing was accepted by the new leader";
  }
  const std::string before = Snapshot(1);

  servers_[0]->Signal(SIGCONT);
  stalled.join();
  EXPECT_EQ(to_stopped.status, 503) << to_stopped.body;
  EXPECT_NE(to_stopped.body.find("no longer leads"), std::string::npos) << to_stopped.body;
  EXPECT_TRUE(servers_[0]->WaitExited(std::chrono::seconds(15)))
      << "the resumed leader did not stop:\n"
      << servers_[0]->Log();
  EXPECT_NE(servers_[0]->Log().find("no longer the leader"), std::string::npos)
      << servers_[0]->Log();
  // The resumed leader changed nothing: what the store holds is what the new leader had.
  EXPECT_EQ(Snapshot(1), before);
  Json list = Get(1, "/v1/jobs?limit=100000");
  std::set<std::string> present;
  for (const auto& j : list["jobs"]) present.insert(j["id"].get<std::string>());
  for (const auto& id : acked) EXPECT_EQ(present.count(id), 1u) << id;
  std::printf(
      "[lease] standby led %.2f s after the leader's SIGSTOP; slowest submission answer %.2f s; "
      "%zu accepted by the new leader; the stopped leader answered %d\n",
      takeover, worst, acked.size(), to_stopped.status);
}

TEST_F(LeaseFailoverTest, ADeposedLeaderAnswers503SayingItNoLongerLeads) {
  Start(0);
  ASSERT_TRUE(WaitForRole(0, "leader", 15000)) << servers_[0]->Log();
  ASSERT_EQ(Submit(ports_[0], "before", 10).status, 201);
  // Another server took the lead (as a standby does once the lease expired).
  ASSERT_TRUE(store::internal::ExecSql(
                  store_, "UPDATE leadership SET epoch = epoch + 1, holder = 'http://elsewhere:1'")
                  .ok());
  Answer a = Submit(ports_[0], "after", 10);
  EXPECT_EQ(a.status, 503) << a.body;
  EXPECT_NE(a.body.find("no longer leads"), std::string::npos) << a.body;
  EXPECT_TRUE(servers_[0]->WaitExited(std::chrono::seconds(15))) << servers_[0]->Log();
}

}  // namespace
}  // namespace tessera
