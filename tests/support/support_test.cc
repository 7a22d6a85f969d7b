// The shared test utilities themselves: the clock moves only when told, WaitFor and Latch keep
// their deadlines, and ConfigBuilder's YAML is a config the server accepts.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "api/config.h"
#include "support/config_builder.h"
#include "support/fake_clock.h"
#include "support/wait.h"

namespace tessera::testing {
namespace {

using std::chrono::milliseconds;

TEST(FakeClockTest, MovesOnlyWhenToldAndReadsThroughItsClock) {
  FakeClock now(5'000);
  const std::function<int64_t()> clock = now.AsClock();
  EXPECT_EQ(clock(), 5'000);
  now += 1'000;
  EXPECT_EQ(clock(), 6'000);
  EXPECT_EQ(now.Advance(milliseconds(500)), 6'500);
  now = 100;
  const int64_t read = now;
  EXPECT_EQ(read, 100);
  EXPECT_EQ(clock(), 100);
}

TEST(WaitForTest, ReturnsWhenTheConditionHoldsAndFalseAtTheDeadline) {
  std::atomic<bool> done{false};
  std::thread t([&] { done.store(true); });
  EXPECT_TRUE(WaitFor([&] { return done.load(); }, milliseconds(5000)));
  t.join();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(WaitFor([] { return false; }, milliseconds(50)));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, milliseconds(50));
}

TEST(LatchTest, OpensAtZeroAndAWaitHasADeadline) {
  Latch latch(2);
  EXPECT_FALSE(latch.WaitFor(milliseconds(10)));
  std::thread t([&] { latch.CountDown(2); });
  EXPECT_TRUE(latch.WaitFor(milliseconds(5000)));
  t.join();
  EXPECT_TRUE(latch.IsOpen());
  latch.CountDown();  // past zero: still open
  latch.Wait();
}

TEST(ConfigBuilderTest, DefaultsAreAConfigTheServerAccepts) {
  auto c = api::ParseConfig(ConfigBuilder().Yaml());
  ASSERT_TRUE(c.ok()) << c.status().ToString() << "\n" << ConfigBuilder().Yaml();
  ASSERT_EQ(c->identities.size(), 3u);
  EXPECT_EQ(c->identities[1].name, "alice");
}

TEST(ConfigBuilderTest, WhatATestDeclaresReplacesOrAddsToTheDefaults) {
  const std::string yaml = ConfigBuilder()
                               .HeartbeatTimeout("3s")
                               .Cycle("300ms")
                               .User("bob", {"prod"}, "bob-token-12")
                               .Agent("rack1", "", {"r1-*"})
                               .Group("research", "gpu: 1", "gpu: 2")
                               .Group("prod")
                               .Profile("nb",
                                        "gpus: 1, gpu_fraction: 0.1, gpu_memory: 8GiB, "
                                        "cpu: 1, memory: 1GiB, forms: [share]")
                               .Queue("notebooks", "nb", {"research"}, "class: interactive")
                               .Yaml();
  auto c = api::ParseConfig(yaml);
  ASSERT_TRUE(c.ok()) << c.status().ToString() << "\n" << yaml;
  EXPECT_EQ(c->identities.size(), 5u);
  EXPECT_NE(yaml.find("- {name: research, reservation: {gpu: 1}, limit: {gpu: 2}}"),
            std::string::npos)
      << yaml;
  EXPECT_NE(yaml.find("- {name: rack1, role: agent, nodes: [r1-*], token: rack1-token-1}"),
            std::string::npos)
      << yaml;
  EXPECT_EQ(yaml.find("name: training"), std::string::npos)
      << "declared queues replace the default";
}

}  // namespace
}  // namespace tessera::testing
