// BatchSequence (api/batch_sequence.h): batch numbers, epochs, and per node the last batch about
// its jobs and the last that is news to its agent (its own heartbeats are not).
#include "api/batch_sequence.h"

#include <gtest/gtest.h>

namespace tessera::api {
namespace {

TEST(BatchSequence, ANodesOwnHeartbeatIsAboutItButNoNewsToIt) {
  BatchSequence s;
  EXPECT_EQ(s.last(), 0);
  EXPECT_EQ(s.LastAbout("n1"), 0);
  const int64_t placed = s.Next();  // a placement on n1
  s.About("n1", placed, /*news=*/true);
  const int64_t beat = s.Next();  // n1's own heartbeat changed its job
  s.About("n1", beat, /*news=*/false);
  EXPECT_EQ(s.last(), 2);
  EXPECT_EQ(s.LastAbout("n1"), beat);
  EXPECT_EQ(s.LastNews("n1"), placed);
  EXPECT_EQ(s.LastNews("n2"), 0);
  EXPECT_EQ(s.epoch(), 0);
  EXPECT_EQ(s.epoch_began(), 1);
  s.NewEpoch();
  EXPECT_EQ(s.epoch(), 1);
  EXPECT_EQ(s.epoch_began(), 3);  // batches 1 and 2 were settled by the reload
  EXPECT_EQ(s.Next(), 3);         // numbers go on across epochs
}

}  // namespace
}  // namespace tessera::api
