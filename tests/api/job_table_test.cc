// JobTable (api/job_table.h) on its own: its indexes agree with the records through submits,
// grants, ends and eviction, with no engine, store or quota engine around it.
#include "api/job_table.h"

#include <gtest/gtest.h>

namespace tessera::api {
namespace {

Job MakeJob(JobTable& t, const std::string& identity, const std::string& key = "") {
  Job j;
  j.rec.id = t.NewId();
  j.rec.identity = identity;
  j.rec.idempotency_key = key;
  return j;
}

void Grant(Job& j, const std::string& node) {
  quota::GrantView g;
  g.node = node;
  j.grants.push_back(g);
  j.state = JobState::kRunning;
}

TEST(JobTable, IdsCountOnFromTheLargestSeen) {
  JobTable t;
  EXPECT_EQ(t.NewId(), "j-1");
  t.SeeId(41);
  EXPECT_EQ(t.NewId(), "j-42");
  t.SeeId(7);  // smaller: no step back
  EXPECT_EQ(t.NewId(), "j-43");
}

TEST(JobTable, EnteredJobsAreFoundByIdHandleKeyAndIdentity) {
  JobTable t;
  Job& a = t.Insert(MakeJob(t, "ann", "ann\nk1"));
  a.handle = 3;
  t.Enter(a);
  Job& b = t.Insert(MakeJob(t, "ann"));
  b.handle = 0;
  t.Enter(b);
  EXPECT_EQ(t.Find("j-1"), &a);
  EXPECT_EQ(t.ByHandle(3), &a);
  EXPECT_EQ(t.ByHandle(0), &b);
  EXPECT_EQ(t.ByHandle(1), nullptr);
  EXPECT_EQ(t.ByHandle(99), nullptr);
  ASSERT_NE(t.IdempotentJob("ann\nk1"), nullptr);
  EXPECT_EQ(*t.IdempotentJob("ann\nk1"), "j-1");
  EXPECT_EQ(t.LiveOf("ann"), 2);
  EXPECT_EQ(t.LiveOf("bob"), 0);
  EXPECT_EQ(t.LiveIds(), (std::vector<std::string>{"j-1", "j-2"}));
  EXPECT_EQ(t.Order(), (std::vector<std::string>{"j-1", "j-2"}));
}

TEST(JobTable, AnEraseTakesBackAnInsertWithItsKey) {
  JobTable t;
  t.Insert(MakeJob(t, "ann", "ann\nk"));
  t.Erase("j-1");
  EXPECT_EQ(t.Find("j-1"), nullptr);
  EXPECT_EQ(t.IdempotentJob("ann\nk"), nullptr);
  EXPECT_TRUE(t.Order().empty());
  EXPECT_EQ(t.size(), 0u);
}

TEST(JobTable, OnNodeDropsJobsThatNoLongerHoldThere) {
  JobTable t;
  Job& a = t.Insert(MakeJob(t, "ann"));
  Grant(a, "n1");
  Grant(a, "n2");
  t.Enter(a);  // held: noted on both nodes
  EXPECT_EQ(t.OnNode("n1"), (std::vector<std::string>{"j-1"}));
  EXPECT_EQ(t.OnNode("n2"), (std::vector<std::string>{"j-1"}));
  a.grants.pop_back();  // n2 given back
  EXPECT_TRUE(t.OnNode("n2").empty());
  EXPECT_EQ(t.OnNode("n1"), (std::vector<std::string>{"j-1"}));
  a.state = JobState::kPending;  // requeued
  a.grants.clear();
  EXPECT_TRUE(t.OnNode("n1").empty());
}

TEST(JobTable, EndedJobsLeaveOnceDurableAndUncountedOnce) {
  JobTable t;
  for (int i = 0; i < 4; ++i) {
    Job& j = t.Insert(MakeJob(t, "ann", "ann\nk" + std::to_string(i)));
    j.handle = i;
    t.Enter(j);
  }
  for (const char* id : {"j-1", "j-2", "j-3"}) {
    Job& j = t.Get(id);
    j.state = JobState::kSucceeded;
    j.last_seq = id == std::string("j-3") ? 9 : 5;  // j-3's end not yet written
    t.NoteEnded(id);
    t.CountOut(j);
    t.CountOut(j);  // a second batch carrying it changes nothing
  }
  EXPECT_EQ(t.LiveOf("ann"), 1);
  EXPECT_EQ(t.EndedWaiting(), 3u);
  t.EvictEnded(/*keep=*/0, /*written=*/5);
  EXPECT_EQ(t.Find("j-1"), nullptr);
  EXPECT_EQ(t.Find("j-2"), nullptr);
  EXPECT_NE(t.Find("j-3"), nullptr);  // kept until written
  EXPECT_EQ(t.ByHandle(0), nullptr);
  EXPECT_EQ(t.IdempotentJob("ann\nk0"), nullptr);
  EXPECT_EQ(t.EndedWaiting(), 1u);
  EXPECT_EQ(t.Order(), (std::vector<std::string>{"j-3", "j-4"}));
  t.EvictEnded(0, 9);
  EXPECT_EQ(t.Find("j-3"), nullptr);
  EXPECT_EQ(t.LiveIds(), (std::vector<std::string>{"j-4"}));
}

TEST(JobTable, LiveIdsSkipEndedJobsOnceManyEnded) {
  JobTable t;
  for (int i = 0; i < 200; ++i) t.Enter(t.Insert(MakeJob(t, "ann")));
  for (int i = 1; i <= 150; ++i) {
    const std::string id = "j-" + std::to_string(i);
    t.Get(id).state = JobState::kFailed;
    t.NoteEnded(id);
  }
  const auto& live = t.LiveIds();
  ASSERT_EQ(live.size(), 50u);
  EXPECT_EQ(live.front(), "j-151");
  t.Clear();
  EXPECT_EQ(t.size(), 0u);
  EXPECT_TRUE(t.LiveIds().empty());
  EXPECT_EQ(t.NewId(), "j-1");
}

}  // namespace
}  // namespace tessera::api
