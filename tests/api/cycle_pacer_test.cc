// CyclePacer (api/cycle_budget.h): the periodic pass runs the cycle when wanted or once a period
// has passed; a submission runs it unless a cycle started after it was queued, or the budget
// holds cycles back behind a long one over a backlog.
#include <gtest/gtest.h>

#include "api/cycle_budget.h"

namespace tessera::api {
namespace {

TEST(CyclePacer, WantedOrAPeriodOn) {
  CyclePacer p;
  EXPECT_TRUE(p.Due(0, 1000));  // wanted from the start
  p.Starting();
  p.Ran(/*now_ms=*/500, /*end_us=*/0, /*took_us=*/10, /*left_waiting=*/0);
  EXPECT_FALSE(p.Due(1000, 1000));
  EXPECT_TRUE(p.Due(1500, 1000));  // a period after the last cycle
  p.Want();
  EXPECT_TRUE(p.Due(600, 1000));
}

TEST(CyclePacer, ASubmissionRunsACycleUnlessOneStartedAfterIt) {
  CyclePacer p;
  const int64_t first = p.Submitted();
  const int64_t second = p.Submitted();
  EXPECT_TRUE(p.SubmissionRuns(first, 0));
  p.Starting();  // this cycle sees both
  p.Ran(0, 0, 10, 0);
  EXPECT_FALSE(p.SubmissionRuns(first, 0));
  EXPECT_FALSE(p.SubmissionRuns(second, 0));
  const int64_t third = p.Submitted();
  EXPECT_TRUE(p.SubmissionRuns(third, 0));
  // A long cycle over a backlog holds submissions' cycles back for nine times its length.
  p.Starting();
  p.Ran(0, /*end_us=*/1'000'000, /*took_us=*/CycleBudget::kLong, CycleBudget::kBacklog);
  const int64_t fourth = p.Submitted();
  EXPECT_FALSE(p.SubmissionRuns(fourth, 1'000'000 + 9 * CycleBudget::kLong - 1));
  EXPECT_TRUE(p.SubmissionRuns(fourth, 1'000'000 + 9 * CycleBudget::kLong));
}

}  // namespace
}  // namespace tessera::api
