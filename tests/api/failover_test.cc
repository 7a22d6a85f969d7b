// Failover with real processes and a real PostgreSQL: two `tessera serve` on one database, one
// leads and the other waits as a standby. While 4 clients have 2,000 submissions in flight (each
// client given both servers' URLs, as TESSERA_URL lists them), the leader is killed with SIGKILL.
// The standby must lead within 15 s, every acknowledged job must be there exactly once, no
// device may hold more than it has, and the old leader, restarted, must come back as a standby
// that refuses writes (the store's fencing is tested on its own in StoreSuite).
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
#include <random>
#include <set>

#include "server_pair.h"

namespace tessera {
namespace {

using Json = nlohmann::json;

const char* kConfig = R"(
heartbeat_timeout: 1h
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: alice, role: user, groups: [research], token: alice-token-1}
groups: [{name: research}]
profiles:
  - {name: nb, gpus: 1, gpu_memory: 8GiB, cpu: 100m, memory: 64MiB, forms: [share]}
  - {name: train, gpus: 1, cpu: 100m, memory: 64MiB, forms: [whole]}
queues:
  - {name: notebooks, profile: nb, groups: [research]}
  - {name: training, profile: train, groups: [research]}
)";

class FailoverTest : public testing::ServerPairTest {
 protected:
  void SetUp() override { SetUpPair("failover", kConfig); }
};

TEST_F(FailoverTest, AStandbyLeadsWithin15sAndEveryAcknowledgedJobIsThereOnce) {
  Start(0);
  ASSERT_TRUE(WaitForRole(0, "leader", 15000)) << servers_[0]->Log();
  Start(1);
  ASSERT_TRUE(WaitForRole(1, "standby", 15000)) << servers_[1]->Log();
  Json h = Get(1, "/v1/health");
  EXPECT_EQ(h["leader"], "http://127.0.0.1:" + std::to_string(ports_[0])) << h.dump();
  {
    httplib::Client c("127.0.0.1", ports_[0]);
    Json devs = Json::array();
    for (int i = 0; i < 4; ++i) {
      devs.push_back({{"index", i},
                      {"model", "H100-80GB"},
                      {"memory_mib", 81920},
                      {"uuid", "g" + std::to_string(i)}});
    }
    Json reg = {{"node", "n1"}, {"cpu_milli", 64000}, {"memory_mib", 262144}, {"devices", devs}};
    auto r = c.Post("/v1/agent/register", {{"Authorization", "Bearer admin-token-1"}}, reg.dump(),
                    "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    // The standby refuses, naming the leader.
    httplib::Client sc("127.0.0.1", ports_[1]);
    auto refused =
        sc.Post("/v1/jobs", {{"Authorization", "Bearer alice-token-1"}},
                Json{{"queue", "training"}, {"command", {"true"}}}.dump(), "application/json");
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->status, 503) << refused->body;
    EXPECT_NE(refused->body.find("standby"), std::string::npos) << refused->body;
  }

  constexpr int kSubmissions = 2000;
  constexpr int kThreads = 4;
  std::mutex mu;
  std::vector<std::string> acked;
  std::atomic<int> issued{0};
  auto submitter = [&](int t) {
    std::mt19937 rng(static_cast<unsigned>(t));
    size_t current = 0;  // the URL that answered last
    while (true) {
      const int n = issued.fetch_add(1);
      if (n >= kSubmissions) return;
      const Json body =
          n % 3 == 0 ? Json{{"queue", "training"}, {"command", {"true"}}}
                     : Json{{"queue", "notebooks"}, {"command", {"true"}}, {"gpu_memory", "8GiB"}};
      // Until acknowledged, over both servers: no answer or a standby's 503 moves on to the other.
      for (int attempt = 0; attempt < 2000; ++attempt) {
        httplib::Client c("127.0.0.1", ports_[current]);
        c.set_connection_timeout(1);
        c.set_read_timeout(10);
        // One key per submission, repeated on its retries (to either server).
        auto r = c.Post("/v1/jobs",
                        {{"Authorization", "Bearer alice-token-1"},
                         {"Idempotency-Key", "fo-" + std::to_string(n)}},
                        body.dump(), "application/json");
        if (r && (r->status == 201 || r->status == 200)) {
          std::lock_guard<std::mutex> lock(mu);
          acked.push_back(Json::parse(r->body)["id"].get<std::string>());
          break;
        }
        if (r && r->status < 500) {
          ADD_FAILURE() << "refused: " << r->status << " " << r->body;
          return;
        }
        current = 1 - current;
        // A client's pause before its retry (on purpose: the server is restarting).
        std::this_thread::sleep_for(std::chrono::milliseconds(5 + rng() % 20));
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(submitter, t);
  tessera::testing::WaitFor([&] { return issued.load() >= kSubmissions / 3; },
                            std::chrono::minutes(5), std::chrono::milliseconds(1));
  servers_[0]->Kill(SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(WaitForRole(1, "leader", 60000)) << servers_[1]->Log();
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  EXPECT_LT(took, 15.0) << "the standby took " << took << " s to lead";
  // The old leader comes back as a standby and refuses writes.
  Start(0);
  ASSERT_TRUE(WaitForRole(0, "standby", 15000)) << servers_[0]->Log();
  for (auto& th : threads) th.join();
  httplib::Client old("127.0.0.1", ports_[0]);
  auto refused =
      old.Post("/v1/jobs", {{"Authorization", "Bearer alice-token-1"}},
               Json{{"queue", "training"}, {"command", {"true"}}}.dump(), "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 503) << refused->body;
  EXPECT_EQ(Get(0, "/v1/health")["leader"], "http://127.0.0.1:" + std::to_string(ports_[1]));

  // Every acknowledged job is there, once; ids never collided.
  Json list = Get(1, "/v1/jobs?limit=100000");
  ASSERT_EQ(list["_status"], 200) << list.dump().substr(0, 300);
  std::map<std::string, int> present;
  for (const auto& j : list["jobs"]) ++present[j["id"].get<std::string>()];
  ASSERT_EQ(acked.size(), static_cast<size_t>(kSubmissions));
  std::set<std::string> acked_set(acked.begin(), acked.end());
  EXPECT_EQ(acked_set.size(), acked.size()) << "one id acknowledged twice";
  int missing = 0, twice = 0;
  for (const auto& id : acked) {
    missing += present.count(id) == 0;
    twice += present.count(id) && present[id] > 1;
  }
  EXPECT_EQ(missing, 0) << "acknowledged jobs lost";
  EXPECT_EQ(twice, 0) << "jobs listed twice";
  EXPECT_EQ(present.size(), acked.size()) << "jobs stored that no acknowledgement named";
  // No device holds more than it has; the holders are the placed jobs.
  Json nodes = Get(1, "/v1/nodes");
  int holders = 0;
  for (const auto& d : nodes["nodes"][0]["devices"]) {
    EXPECT_LE(d["gpu_milli_used"].get<int64_t>(), 1000) << d.dump();
    EXPECT_LE(d["gpu_memory_mib_used"].get<int64_t>(), d["memory_mib"].get<int64_t>()) << d.dump();
    holders += static_cast<int>(d["holders"].size());
  }
  int placed = 0;
  for (const auto& j : list["jobs"]) placed += j["state"] == "placed";
  EXPECT_EQ(holders, placed);
  EXPECT_GT(placed, 0);
  std::printf(
      "[failover] standby led %.2f s after the leader's SIGKILL; %zu acknowledged, %zu stored, %d "
      "placed\n",
      took, acked.size(), present.size(), placed);
}

}  // namespace
}  // namespace tessera
