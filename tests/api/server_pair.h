// A base fixture for failover tests with real processes and a real PostgreSQL: two `tessera serve`
// on one fresh database of the shared test server, each on its own port and data directory (one
// leads, the other waits as its standby). Gives each server's URL, starts and restarts it (every
// start logs to its own file), reads its JSON answers and waits for its role.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../support/free_port.h"
#include "../support/test_dir.h"
#include "../support/wait.h"
#include "pg_harness.h"
#include "proc.h"

namespace tessera::testing {

class ServerPairTest : public ::testing::Test {
 protected:
  using Json = nlohmann::json;

  // A fresh directory (PREFIX_PID_TEST) with config.yaml (`yaml`, run_as filled in), a fresh
  // database on the shared PostgreSQL and a free port for each of the two servers.
  void SetUpPair(const std::string& prefix, const std::string& yaml) {
    dir_ = FreshTestDir(prefix);
    std::ofstream(dir_ + "/config.yaml") << WithJobAccounts(yaml);
    std::string err;
    PgServer* pg = SharedPgServer(&err);
    ASSERT_NE(pg, nullptr) << err;
    auto url = pg->CreateUniqueDatabase(prefix);
    ASSERT_TRUE(url.ok()) << url.status().ToString();
    store_ = *url;
    ports_ = {FreePort(), FreePort()};
  }
  void TearDown() override {
    for (auto& [k, s] : servers_) {
      if (s) s->Signal(SIGCONT);  // a stopped process cannot be reaped
    }
    servers_.clear();
    std::filesystem::remove_all(dir_);
  }

  std::string Url(int k) const { return "http://127.0.0.1:" + std::to_string(ports_[k]); }
  // Server k (0 or 1) on its port and data directory DIR/sK, the shared store; the log of its
  // n-th start (of either server) in DIR/sK-n.log.
  void Start(int k) {
    const std::string name = "s" + std::to_string(k);
    const std::string addr = "127.0.0.1:" + std::to_string(ports_[k]);
    servers_[k] = std::make_unique<Proc>(
        std::vector<std::string>{kTessera, "serve", "--config", dir_ + "/config.yaml", "--data",
                                 dir_ + "/" + name, "--listen", addr, "--store", store_,
                                 "--advertise", Url(k)},
        dir_ + "/" + name + "-" + std::to_string(++starts_) + ".log");
  }
  // Server 0 leads, server 1 waits as its standby.
  void LeaderAndStandby() {
    Start(0);
    ASSERT_TRUE(WaitForRole(0, "leader", 15000)) << servers_[0]->Log();
    Start(1);
    ASSERT_TRUE(WaitForRole(1, "standby", 15000)) << servers_[1]->Log();
  }
  // Server k's parsed answer to GET `path` as admin, with "_status" added to an object; null when
  // it did not answer within read_timeout_s_.
  Json Get(int k, const std::string& path) {
    httplib::Client c("127.0.0.1", ports_[k]);
    c.set_connection_timeout(1);
    c.set_read_timeout(read_timeout_s_);
    auto r = c.Get(path.c_str(), {{"Authorization", "Bearer admin-token-1"}});
    if (!r) return Json();
    Json j = Json::parse(r->body, nullptr, false);
    if (j.is_object()) j["_status"] = r->status;
    return j;
  }
  // Waits until server k answers /v1/health with `role`.
  bool WaitForRole(int k, const std::string& role, int timeout_ms) {
    return WaitFor(
        [&] {
          Json h = Get(k, "/v1/health");
          return h.is_object() && h.value("role", "") == role;
        },
        std::chrono::milliseconds(timeout_ms), std::chrono::milliseconds(50));
  }

  std::string dir_, store_;
  std::vector<int> ports_;
  std::map<int, std::unique_ptr<Proc>> servers_;
  int starts_ = 0;
  int read_timeout_s_ = 5;
};

}  // namespace tessera::testing
