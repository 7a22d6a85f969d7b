// SilenceWatch (api/silence_watch.h) on a fake monotonic clock: silence counts from the last
// heartbeat, and from a stall's end at the earliest.
#include "api/silence_watch.h"

#include <gtest/gtest.h>

namespace tessera::api {
namespace {

TEST(SilenceWatch, SilenceCountsFromTheLastHeartbeat) {
  SilenceWatch w;
  int64_t now = 1'000;
  w.SetClock([&] { return now; });
  EXPECT_EQ(w.Pass(now, 5'000), 0);  // the first pass: no gap yet
  now = 4'000;
  EXPECT_EQ(w.Pass(now, 5'000), 0);
  EXPECT_EQ(w.SilentFor(/*heard=*/500, now), 3'500);
  EXPECT_EQ(w.Now(), 4'000);
}

TEST(SilenceWatch, AStallGivesEveryNodeAFreshWindow) {
  SilenceWatch w;
  int64_t now = 0;
  w.SetClock([&] { return now; });
  w.Pass(now, 5'000);
  now = 60'000;  // the leader did not pass for a minute
  EXPECT_EQ(w.Pass(now, 5'000), 60'000);
  EXPECT_EQ(w.SilentFor(/*heard=*/100, now), 0);  // not silent since before the window
  now = 63'000;
  EXPECT_EQ(w.Pass(now, 5'000), 0);
  EXPECT_EQ(w.SilentFor(100, now), 3'000);
  EXPECT_EQ(w.SilentFor(62'000, now), 1'000);  // heard within the window: from its heartbeat
  w.SetClock([&] { return now; });             // starts over
  EXPECT_EQ(w.Pass(now + 60'000, 5'000), 0);
}

}  // namespace
}  // namespace tessera::api
