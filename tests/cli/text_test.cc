// In-process tests of the CLI's text for people (cli/table.h): durations, the scheduler's
// wall-clock times in reasons, and "did you mean".
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cli/table.h"

namespace tessera::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(HumanDurationTest, ReadsAsAPersonWouldSayIt) {
  EXPECT_EQ(HumanDuration(45), "45s");
  EXPECT_EQ(HumanDuration(300), "5m");
  EXPECT_EQ(HumanDuration(5400), "1h30m");
  EXPECT_EQ(HumanDuration(7200), "2h");
  EXPECT_EQ(HumanDuration(200000), "2d7h");
  EXPECT_EQ(HumanDuration(-300), "5m");
}

// Issue 35: a waiting job's reason said "expected free at t=1796242375s".
TEST(HumanTimesTest, AServerTimeBecomesAClockTimeAndHowFarItIs) {
  const int64_t now_ms = 1796238775000;  // 2026-12-02 19:12:55 UTC
  const std::string r = HumanTimes(
      "no room for 2 x whole; keeps 2 device(s) on local expected free at t=1796242375s", now_ms);
  EXPECT_THAT(r, Not(HasSubstr("t=")));
  EXPECT_THAT(r, HasSubstr("expected free at 20:12 UTC (in 1h)"));
  EXPECT_THAT(r, HasSubstr("no room for 2 x whole; keeps 2 device(s) on local"));
  // Another day carries its date; a past time says how long ago.
  EXPECT_THAT(HumanTimes("free at t=1796411575s", now_ms),
              HasSubstr("2026-12-04 19:12 UTC (in 2d)"));
  EXPECT_EQ(HumanTimes("free at t=1796238475s.", now_ms), "free at 19:07 UTC (5m ago).");
}

TEST(HumanTimesTest, WhatIsNotAWallClockTimeIsLeftAsItIs) {
  const int64_t now_ms = 1796238775000;
  for (const std::string text :
       {"expected free at t=840s", "no t= here", "wait=12s", "t=123", "at t=s", ""}) {
    EXPECT_EQ(HumanTimes(text, now_ms), text);
  }
}

TEST(ClosestTest, SuggestsATyposCorrectionAndNothingFarOff) {
  const std::vector<std::string> flags = {"--queue", "--gpus", "--gpu-memory", "--cpu", "--name"};
  EXPECT_EQ(Closest("--queu", flags), "--queue");
  EXPECT_EQ(Closest("--gpu", flags), "--gpus");
  EXPECT_EQ(Closest("--gpu-mem", flags), "--gpu-memory");
  EXPECT_EQ(Closest("--walltime", flags), "");
  const std::vector<std::string> states = {"pending", "running", "succeeded", "cancelled"};
  EXPECT_EQ(Closest("runing", states), "running");
  EXPECT_EQ(Closest("canceled", states), "cancelled");
  EXPECT_EQ(Closest("bogus", states), "");
  EXPECT_EQ(Closest("jbos", {"job", "jobs", "groups"}), "jobs");  // two letters swapped: one edit
}

// `tessera usage` showed a job of a few seconds as 0.000 GPU-hours, as if it had used nothing.
TEST(RoundedDownTest, AnAmountTooSmallToShowIsSaidToBeLessThanTheLastDigit) {
  EXPECT_EQ(RoundedDown("0.000", 850), "<0.001");
  EXPECT_EQ(RoundedDown("0.00", 1), "<0.01");
  EXPECT_EQ(RoundedDown("0.000", 0), "0.000");
  EXPECT_EQ(RoundedDown("0.001", 3600000), "0.001");
  EXPECT_EQ(RoundedDown("12.500", 45000000000), "12.500");
  EXPECT_EQ(RoundedDown("0", 5), "0");
}

}  // namespace
}  // namespace tessera::cli
