// DecisionCounters (api/decision_counters.h) against a fake commit writer's outcomes: a decision
// is counted once its batch is written, never when the write failed or the batch was dropped.
#include "api/decision_counters.h"

#include <gtest/gtest.h>

#include <map>

namespace tessera::api {
namespace {

quota::Event Placed() {
  quota::Event e;
  e.kind = quota::EventKind::kPlaced;
  return e;
}

quota::Event Preempted(const std::string& detail) {
  quota::Event e;
  e.kind = quota::EventKind::kPreempted;
  e.detail = detail;
  return e;
}

TEST(DecisionCounters, CountsMoveWithTheirBatchAndAFailedBatchCountsNothing) {
  DecisionCounters c;
  const DecisionCounters::Placed a{"q", "g", false}, b{"q", "g", true};
  c.Count(1, Placed(), a);
  c.Count(2, Placed(), b);
  c.Count(2, Preempted("reclaim for g"), std::nullopt);
  c.Count(3, Preempted("for repartition of n1/gpu0"), std::nullopt);
  std::map<int64_t, Status> written;  // the fake writer: batches written so far
  auto outcome = [&](int64_t seq) -> std::optional<Status> {
    auto it = written.find(seq);
    if (it == written.end()) return std::nullopt;
    return it->second;
  };
  c.Settle(outcome);
  EXPECT_TRUE(c.durable().admissions.empty());  // nothing written yet
  written[1] = Status::Ok();
  written[3] = Status::Ok();  // 2 not yet: 3 waits behind it
  c.Settle(outcome);
  EXPECT_EQ(c.durable().admissions.at({"q", "g", "guaranteed"}), 1);
  EXPECT_EQ(c.durable().preemptions.count("repartition"), 0u);
  written[2] = Status::Internal("disk full");
  c.Settle(outcome);
  EXPECT_EQ(c.durable().admissions.count({"q", "g", "borrowed"}), 0u);  // its write failed
  EXPECT_EQ(c.durable().preemptions.count("reclaim"), 0u);
  EXPECT_EQ(c.durable().preemptions.at("repartition"), 1);
  c.Count(4, Placed(), a);
  c.DropUnsettled();  // a reload dropped batch 4
  written[4] = Status::Ok();
  c.Settle(outcome);
  EXPECT_EQ(c.durable().admissions.at({"q", "g", "guaranteed"}), 1);
}

TEST(DecisionCounters, RequestLatenciesAreKeptPerRouteAndCode) {
  DecisionCounters c;
  c.ObserveRequest("GET", "/v1/jobs", 200, 150);
  c.ObserveRequest("GET", "/v1/jobs", 200, 250);
  c.ObserveRequest("GET", "/v1/jobs", 404, 90);
  auto h = c.RequestLatencies();
  EXPECT_EQ(h.at({"GET", "/v1/jobs", 200}).count, 2);
  EXPECT_EQ(h.at({"GET", "/v1/jobs", 200}).sum_us, 400);
  EXPECT_EQ(h.at({"GET", "/v1/jobs", 404}).count, 1);
}

}  // namespace
}  // namespace tessera::api
