// Crash test: while 2,000 submissions are in flight, the server is killed with SIGKILL at random
// points and restarted; every acknowledged job must be there afterwards and no device or share
// may be allocated twice. Run against SQLite and against a real PostgreSQL.
#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "../support/test_dir.h"
#include "../support/wait.h"
#include "pg_harness.h"
#include "proc.h"

namespace tessera {
namespace {

using Json = nlohmann::json;
using testing::kTessera;
using testing::Proc;

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

class CrashTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = tessera::testing::FreshTestDir("crash_" + GetParam());
    std::ofstream(dir_ + "/config.yaml") << tessera::testing::WithJobAccounts(kConfig);
    if (GetParam() == "postgresql") {
      std::string err;
      testing::PgServer* pg = testing::SharedPgServer(&err);
      ASSERT_NE(pg, nullptr) << err;
      auto url = pg->CreateUniqueDatabase("crash");
      ASSERT_TRUE(url.ok()) << url.status().ToString();
      store_ = *url;
    }
  }
  void Start() {
    std::vector<std::string> argv = {
        kTessera, "serve",        "--config", dir_ + "/config.yaml",
        "--data", dir_ + "/data", "--listen", "127.0.0.1:" + std::to_string(port_)};
    if (!store_.empty()) {
      argv.push_back("--store");
      argv.push_back(store_);
    }
    server_ = std::make_unique<Proc>(argv, dir_ + "/serve.log");
    int port = server_->WaitForPort();
    ASSERT_GT(port, 0) << "server did not come back:\n" << server_->Log();
    port_ = port;
  }

  std::string dir_, store_;
  int port_ = 0;
  std::unique_ptr<Proc> server_;
};

TEST_P(CrashTest, AcknowledgedJobsSurviveAndNothingIsAllocatedTwice) {
  Start();
  httplib::Headers admin = {{"Authorization", "Bearer admin-token-1"}};
  {
    httplib::Client c("127.0.0.1", port_);
    Json devs = Json::array();
    for (int i = 0; i < 4; ++i)
      devs.push_back({{"index", i},
                      {"model", "H100-80GB"},
                      {"memory_mib", 81920},
                      {"uuid", "g" + std::to_string(i)}});
    Json reg = {{"node", "n1"}, {"cpu_milli", 64000}, {"memory_mib", 262144}, {"devices", devs}};
    httplib::Result r(nullptr, httplib::Error::Unknown);
    tessera::testing::WaitFor(
        [&] {
          r = c.Post("/v1/agent/register", admin, reg.dump(), "application/json");
          return static_cast<bool>(r);
        },
        std::chrono::seconds(2), std::chrono::milliseconds(20));
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
  }
  constexpr int kSubmissions = 2000;  // per run
  constexpr int kRuns = 3;
  constexpr int kThreads = 4;
  std::mutex mu;
  std::set<std::string> acked;
  std::atomic<int> port{port_};
  int kills = 0;
  for (int run = 0; run < kRuns; ++run) {
    std::atomic<int> issued{0};
    auto submitter = [&](int t) {
      std::mt19937 rng(static_cast<unsigned>(t));
      while (true) {
        int n = issued.fetch_add(1);
        if (n >= kSubmissions) return;
        Json body =
            n % 3 == 0
                ? Json{{"queue", "training"}, {"command", {"true"}}}
                : Json{{"queue", "notebooks"}, {"command", {"true"}}, {"gpu_memory", "8GiB"}};
        // Retry until an answer comes: an unanswered submission may or may not have landed; only
        // acknowledged ones are promised.
        while (true) {
          httplib::Client c("127.0.0.1", port.load());
          c.set_connection_timeout(1);
          // One key per submission, repeated on its retries: a repeat of one that landed
          // before its answer was lost returns that job (200) instead of making another.
          auto r = c.Post(
              "/v1/jobs",
              {{"Authorization", "Bearer alice-token-1"},
               {"Idempotency-Key", "crash-" + std::to_string(run) + "-" + std::to_string(n)}},
              body.dump(), "application/json");
          if (r && (r->status == 201 || r->status == 200)) {
            const Json reply = Json::parse(r->body, nullptr, false);
            if (!reply.is_object() || !reply.contains("id") || !reply["id"].is_string()) {
              ADD_FAILURE() << "201 without a job id: " << r->body;
              return;
            }
            std::lock_guard<std::mutex> lock(mu);
            acked.insert(reply["id"].get<std::string>());
            break;
          }
          // 429 is the identity's request slots taken (max_requests_per_identity) by attempts
          // a loaded machine left unanswered past the client's timeout: try again, as it says.
          if (r && r->status < 500 && r->status != 429) {
            ADD_FAILURE() << "refused: " << r->status << " " << r->body;
            return;
          }
          // A client's pause before its retry (on purpose: the server is restarting).
          std::this_thread::sleep_for(std::chrono::milliseconds(10 + rng() % 20));
        }
      }
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) threads.emplace_back(submitter, t);
    // Kill the server at random points while the submissions are in flight: four per run, each
    // once a random number of submissions has been issued (however fast the server is), plus a
    // random few milliseconds so the kill lands anywhere in a request's path.
    std::mt19937 rng(7 + run);
    std::vector<int> kill_at;
    for (int k = 0; k < 4; ++k)
      kill_at.push_back(100 + static_cast<int>(rng() % (kSubmissions - 200)));
    std::sort(kill_at.begin(), kill_at.end());
    for (int at : kill_at) {
      tessera::testing::WaitFor([&] { return issued.load() >= at; }, std::chrono::minutes(10),
                                std::chrono::milliseconds(1));
      // A random few milliseconds more (on purpose: the kill lands anywhere in a request's path).
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 5000));
      server_->Kill(SIGKILL);
      ++kills;
      Start();
      port.store(port_);
    }
    for (auto& t : threads) t.join();
  }
  // One more crash after the last acknowledgement, then check from a fresh process.
  server_->Kill(SIGKILL);
  Start();
  httplib::Client c("127.0.0.1", port_);
  httplib::Result list(nullptr, httplib::Error::Unknown);
  tessera::testing::WaitFor(
      [&] {
        list = c.Get("/v1/jobs?limit=10000", admin);
        return static_cast<bool>(list);
      },
      std::chrono::seconds(4), std::chrono::milliseconds(20));
  ASSERT_TRUE(list);
  ASSERT_EQ(list->status, 200) << list->body.substr(0, 500);
  const Json jobs = Json::parse(list->body)["jobs"];
  std::set<std::string> present;
  for (const auto& j : jobs) present.insert(j["id"].get<std::string>());
  std::vector<std::string> missing;
  for (const auto& id : acked) {
    if (!present.count(id)) missing.push_back(id);
  }
  EXPECT_TRUE(missing.empty()) << missing.size() << " acknowledged jobs lost, e.g. "
                               << missing.front();
  EXPECT_EQ(acked.size(), static_cast<size_t>(kSubmissions * kRuns));
  // Idempotency keys: what is stored is exactly what was acknowledged, no second copies.
  EXPECT_EQ(present.size(), acked.size()) << "jobs stored that no acknowledgement named";
  // No device holds more than it has, and the holders agree with the jobs' own placements.
  auto nodes = c.Get("/v1/nodes", admin);
  ASSERT_TRUE(nodes);
  int holders = 0;
  const Json devices = Json::parse(nodes->body)["nodes"][0]["devices"];
  for (const auto& d : devices) {
    EXPECT_LE(d["gpu_milli_used"].get<int64_t>(), 1000) << d.dump();
    EXPECT_LE(d["gpu_memory_mib_used"].get<int64_t>(), d["memory_mib"].get<int64_t>()) << d.dump();
    holders += static_cast<int>(d["holders"].size());
  }
  int placed = 0;
  for (const auto& j : jobs) placed += j["state"] == "placed" ? 1 : 0;
  EXPECT_EQ(holders, placed);
  EXPECT_GT(placed, 0);
  std::printf("[crash %s] %d kills, %zu acknowledged, %zu present, %d placed\n", GetParam().c_str(),
              kills, acked.size(), present.size(), placed);
}

INSTANTIATE_TEST_SUITE_P(Stores, CrashTest, ::testing::Values("sqlite", "postgresql"));

}  // namespace
}  // namespace tessera
