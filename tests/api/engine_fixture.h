// A base fixture for tests of api::Engine in process: a real SQLite store in a fresh temporary
// directory, an injected clock (now_), Reopen() (a restart over the same store), Who(name) and
// Register(node, gpus) of H100-80GB devices by the identity named "agent".
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "api/engine.h"
#include "test_dir.h"

namespace tessera::api::testing {

class EngineFixture : public ::testing::Test {
 protected:
  // Parses `config` and opens the engine over DIR/tessera.db, DIR fresh for this test.
  void Start(const std::string& prefix, const std::string& config) {
    dir_ = tessera::testing::FreshTestDir(prefix);
    auto c = ParseConfig(config);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    config_ = *c;
    Reopen();
  }
  void Reopen() {
    engine_.reset();
    auto store = store::Store::Open(dir_ + "/tessera.db");
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto e = Engine::Open(config_, std::move(*store), dir_, [this] { return now_; });
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engine_ = std::move(*e);
  }
  const Identity& Who(const std::string& name) {
    for (const auto& i : config_.identities) {
      if (i.name == name) return i;
    }
    throw std::runtime_error("no identity " + name);
  }
  void Register(const std::string& node, int gpus) {
    Json devs = Json::array();
    for (int i = 0; i < gpus; ++i) {
      devs.push_back({{"index", i},
                      {"model", "H100-80GB"},
                      {"memory_mib", 81920},
                      {"uuid", node + "-" + std::to_string(i)}});
    }
    auto r = engine_->RegisterNode(
        Who("agent"),
        {{"node", node}, {"cpu_milli", 32000}, {"memory_mib", 65536}, {"devices", devs}});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }

  std::string dir_;
  EngineConfig config_;
  std::unique_ptr<Engine> engine_;
  int64_t now_ = 1'000'000;
};

}  // namespace tessera::api::testing
