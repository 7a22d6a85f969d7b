// A base fixture for tests of api::Engine in process: a store (by default a real SQLite store in
// a fresh temporary directory; any store::Store through StoreOpener: PostgreSQL, or a wrapper
// that injects faults), a FakeClock (now_) and the engine's monotonic clock (mono_), Pass(ms),
// Reopen() (a restart over the same store), Who(name) and Register(node, gpus) of H100-80GB
// devices by the identity named "agent".
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "api/engine.h"
#include "fake_clock.h"
#include "store/store.h"
#include "test_dir.h"

namespace tessera::api::testing {

class EngineFixture : public ::testing::Test {
 protected:
  // Opens the store the engine runs on, given the test's fresh directory; called by every
  // (Re)open, so a reopen sees what the last engine committed.
  using StoreOpener = std::function<Result<std::unique_ptr<store::Store>>(const std::string& dir)>;
  // SQLite at DIR/tessera.db (the default).
  static StoreOpener Sqlite() {
    return [](const std::string& dir) { return store::Store::Open(dir + "/tessera.db"); };
  }
  // The store at `url` (a PostgreSQL URL, or a SQLite path), whatever the directory.
  static StoreOpener StoreAt(const std::string& url) {
    return [url](const std::string&) { return store::Store::Open(url); };
  }

  // Parses `config` and opens the engine over the store `open` gives (SQLite at DIR/tessera.db
  // unless told), DIR fresh for this test.
  void Start(const std::string& prefix, const std::string& config, StoreOpener open = Sqlite()) {
    dir_ = tessera::testing::FreshTestDir(prefix);
    open_store_ = std::move(open);
    auto c = ParseConfig(config);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    config_ = *c;
    Reopen();
  }
  void Reopen() {
    engine_.reset();
    auto store = open_store_(dir_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto e = Engine::Open(config_, std::move(*store), dir_, now_.AsClock());
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engine_ = std::move(*e);
    engine_->agents().SetMonotonicClockForTest(mono_.AsClock());
  }
  // Time passes with the leader watching: both clocks move `ms`, a second at a time, with the
  // engine's periodic pass (Tick) after each step. (Both moved with one pass after them is the
  // leader's own stall; now_ moved alone is a step of the wall clock: neither is silence.)
  void Pass(int64_t ms) {
    for (int64_t done = 0; done < ms;) {
      const int64_t step = std::min<int64_t>(1'000, ms - done);
      now_ += step;
      mono_ += step;
      done += step;
      Status st = engine_->Tick();
      ASSERT_TRUE(st.ok()) << st.ToString();
    }
  }
  const Identity& Who(const std::string& name) {
    for (const auto& i : config_.identities) {
      if (i.name == name) return i;
    }
    throw std::runtime_error("no identity " + name);
  }
  // Registers `node` with `gpus` H100-80GB cards as the identity "agent".
  void Register(const std::string& node, int gpus, int cpu_milli = 32000) {
    Json devs = Json::array();
    for (int i = 0; i < gpus; ++i) {
      devs.push_back({{"index", i},
                      {"model", "H100-80GB"},
                      {"memory_mib", 81920},
                      {"uuid", node + "-" + std::to_string(i)}});
    }
    auto r = engine_->agents().RegisterNode(
        Who("agent"),
        {{"node", node}, {"cpu_milli", cpu_milli}, {"memory_mib", 65536}, {"devices", devs}});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }

  std::string dir_;
  EngineConfig config_;
  std::unique_ptr<Engine> engine_;
  tessera::testing::FakeClock now_{1'000'000};
  // The engine's monotonic clock (Engine::SetMonotonicClockForTest), on which it judges a node's
  // silence and its own stalls: it moves only when the test moves it (Pass).
  tessera::testing::FakeClock mono_{1'000'000};
  StoreOpener open_store_ = Sqlite();
};

}  // namespace tessera::api::testing
