// The control plane's small parts on their own, against fakes of their neighbours: the commit
// writer (a fake store write that succeeds, fails or blocks on the test's word), the order
// watches, the views' cache, the audit trail's per-second limit and the JSON text writer.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "api/commit_writer.h"
#include "api/json_text.h"
#include "api/order_watches.h"
#include "api/records.h"
#include "api/view_cache.h"
#include "support/wait.h"

namespace tessera::api {
namespace {

using std::chrono::milliseconds;
using testing::Latch;

// A store write the test steers: records what it was given, fails while `fail` is set, and
// waits at `gate` (if set) so the test can queue behind a write in progress.
struct FakeWrite {
  std::mutex mu;
  std::vector<std::vector<std::string>> calls;  // the event kinds of each write
  int fail_first = 0;                           // how many writes fail, from the first
  std::atomic<Latch*> entered{nullptr};
  std::atomic<Latch*> gate{nullptr};  // cleared by the test while the writer's thread reads it
  // Holds the first write until Release (WaitEntered: until it has begun), for what queues
  // behind it meanwhile.
  Latch entered_latch, gate_latch;
  void Hold() {
    entered = &entered_latch;
    gate = &gate_latch;
  }
  bool WaitEntered() { return entered_latch.WaitFor(std::chrono::milliseconds(5000)); }
  void Release() {
    gate = nullptr;
    gate_latch.CountDown();
  }
  CommitWriter::Write Fn() {
    return [this](const std::vector<store::Event>& events, const std::vector<store::JobRecord>&) {
      if (Latch* e = entered.load()) e->CountDown();
      if (Latch* g = gate.load()) g->Wait();
      std::lock_guard<std::mutex> l(mu);
      std::vector<std::string> kinds;
      for (const auto& e : events) kinds.push_back(e.kind);
      calls.push_back(kinds);
      return static_cast<int>(calls.size()) <= fail_first ? Status::Internal("disk full")
                                                          : Status::Ok();
    };
  }
};

CommitWriter::Batch B(int64_t seq, int64_t epoch, const std::string& kind,
                      std::vector<std::string> watched = {}) {
  CommitWriter::Batch b;
  b.seq = seq;
  b.epoch = epoch;
  store::Event e;
  e.kind = kind;
  b.events.push_back(e);
  b.watched = std::move(watched);
  return b;
}

TEST(CommitWriter, WritesInOrderAndGroupsWhatQueuesBehindAWrite) {
  FakeWrite store;
  store.Hold();
  CommitWriter w(store.Fn(), nullptr);
  w.Push(B(1, 0, "a"));
  ASSERT_TRUE(store.WaitEntered());
  w.Push(B(2, 0, "b"));
  w.Push(B(3, 0, "c"));
  EXPECT_EQ(w.Written(), 0);
  EXPECT_FALSE(w.OutcomeOf(1).has_value());  // not written yet
  store.Release();
  EXPECT_TRUE(w.Await(3).ok());
  EXPECT_EQ(w.Durable(), 3);
  std::lock_guard<std::mutex> l(store.mu);
  ASSERT_EQ(store.calls.size(), 2u);  // the two that queued behind the first went in one write
  EXPECT_EQ(store.calls[0], (std::vector<std::string>{"a"}));
  EXPECT_EQ(store.calls[1], (std::vector<std::string>{"b", "c"}));
}

// The store's upkeep (Store::Tidy: SQLite's checkpoint) waits until nothing is queued: not between
// a write and the batches that queued behind it.
TEST(CommitWriter, TheStoresUpkeepRunsOnlyOnceTheQueueIsEmpty) {
  FakeWrite store;
  store.Hold();
  std::vector<size_t> idle_after;  // how many writes had been made at each upkeep
  CommitWriter w(store.Fn(), nullptr, [&] {
    std::lock_guard<std::mutex> l(store.mu);
    idle_after.push_back(store.calls.size());
    return false;
  });
  w.Push(B(1, 0, "a"));
  ASSERT_TRUE(store.WaitEntered());
  w.Push(B(2, 0, "b"));
  w.Push(B(3, 0, "c"));
  store.Release();
  EXPECT_TRUE(w.Await(3).ok());
  w.Stop();  // the upkeep, when due, ran before the writer's thread looked for more work
  EXPECT_EQ(idle_after, (std::vector<size_t>{2}));
}

// ... and once the queue has stayed empty for the writer's `settle`: a cycle's next chunk, queued
// just after a write, goes in before the upkeep, which then runs once, after both. A stop does
// not wait the settle out.
TEST(CommitWriter, TheStoresUpkeepWaitsUntilNothingMoreComes) {
  FakeWrite store;
  std::mutex mu;
  std::vector<size_t> idle_after;  // how many writes had been made at each upkeep
  CommitWriter w(
      store.Fn(), nullptr,
      [&] {
        std::lock_guard<std::mutex> l(store.mu);
        std::lock_guard<std::mutex> m(mu);
        idle_after.push_back(store.calls.size());
        return false;
      },
      std::chrono::hours(1));
  w.Push(B(1, 0, "a"));
  ASSERT_TRUE(w.Await(1).ok());
  w.Push(B(2, 0, "b"));
  ASSERT_TRUE(w.Await(2).ok());
  {
    std::lock_guard<std::mutex> m(mu);
    EXPECT_TRUE(idle_after.empty()) << "the upkeep ran after write " << idle_after.front();
  }
  w.Stop();
  EXPECT_EQ(idle_after, (std::vector<size_t>{2}));
}

// The upkeep goes a step at a time (SQLite: a slice of the job progress folded), and a batch
// queued during a step is written before the next: a submission after a large cycle waits for
// one step, not for the whole fold (0.3-0.9 s after served_cycle_bench's cycle).
TEST(CommitWriter, TheStoresUpkeepYieldsToABatchBetweenItsSteps) {
  FakeWrite store;
  CommitWriter* writer = nullptr;
  std::vector<size_t> step_after;  // how many writes had been made at each step
  CommitWriter w(
      store.Fn(), nullptr,
      [&] {
        std::lock_guard<std::mutex> l(store.mu);
        step_after.push_back(store.calls.size());
        if (step_after.size() == 1) writer->Push(B(2, 0, "b"));  // comes during the first step
        return step_after.size() < 3;                            // three steps in all
      },
      milliseconds(1));
  writer = &w;
  w.Push(B(1, 0, "a"));
  ASSERT_TRUE(w.Await(2).ok());
  w.Stop();  // the rest of the upkeep, to the end
  EXPECT_EQ(step_after, (std::vector<size_t>{1, 2, 2}));
}

TEST(CommitWriter, AFailedWriteDropsWhatItsEpochQueuedBehindIt) {
  FakeWrite store;
  store.Hold();
  store.fail_first = 1;
  CommitWriter w(store.Fn(), nullptr);
  w.Push(B(1, 0, "fails"));
  ASSERT_TRUE(store.WaitEntered());
  w.Push(B(2, 0, "rests-on-the-failed-memory"));
  w.Push(B(3, 1, "after-the-reload"));
  store.Release();
  // The first write fails; the one of the same epoch behind it is dropped unwritten; the batch of
  // the next epoch (decided on reloaded memory) is written.
  const Status first = w.Await(1);
  EXPECT_FALSE(first.ok());
  EXPECT_NE(first.message().find("disk full"), std::string::npos);
  const Status second = w.Await(2);
  EXPECT_FALSE(second.ok());
  EXPECT_NE(second.message().find("an earlier commit failed"), std::string::npos);
  EXPECT_TRUE(w.Await(3).ok());
  EXPECT_EQ(w.Durable(), 3);
  {
    std::lock_guard<std::mutex> l(store.mu);
    for (const auto& call : store.calls) {
      for (const auto& k : call) EXPECT_NE(k, "rests-on-the-failed-memory");
    }
  }
  // The owner hears that epoch 0 must be reloaded, and the write's error; not for epoch 1.
  EXPECT_TRUE(w.TakeProgress(0).reload);
  CommitWriter::Progress p = w.TakeProgress(1);
  EXPECT_FALSE(p.reload);
  EXPECT_EQ(p.written, 3);
}

TEST(CommitWriter, RepliesAndNewsComeOnceDurableAndStoredJobsAreReported) {
  FakeWrite store;
  std::mutex mu;
  std::vector<std::pair<std::string, int64_t>> news;
  Latch got_news;
  CommitWriter w(store.Fn(), [&](const std::vector<std::pair<std::string, int64_t>>& n) {
    std::lock_guard<std::mutex> l(mu);
    news.insert(news.end(), n.begin(), n.end());
    got_news.CountDown();
  });
  Latch replied;
  Status reply_status = Status::Internal("not called");
  w.WhenDurable(2, [&](Status st) {
    reply_status = st;
    replied.CountDown();
  });
  EXPECT_FALSE(replied.IsOpen());
  w.Push(B(1, 0, "a", {"n1"}));
  w.Push(B(2, 0, "b"));
  ASSERT_TRUE(replied.WaitFor(milliseconds(5000)));
  EXPECT_TRUE(reply_status.ok());
  ASSERT_TRUE(got_news.WaitFor(milliseconds(5000)));
  {
    std::lock_guard<std::mutex> l(mu);
    ASSERT_EQ(news.size(), 1u);
    EXPECT_EQ(news[0], (std::pair<std::string, int64_t>{"n1", 1}));
  }
  w.AwaitQuiet(2);
  // A reply for what is already written is called at once, on the caller's thread.
  bool at_once = false;
  w.WhenDurable(1, [&](Status st) { at_once = st.ok(); });
  EXPECT_TRUE(at_once);
}

TEST(CommitWriter, StopWritesWhatIsQueued) {
  FakeWrite store;
  {
    CommitWriter w(store.Fn(), nullptr);
    for (int i = 1; i <= 50; ++i) w.Push(B(i, 0, "e" + std::to_string(i)));
  }
  std::lock_guard<std::mutex> l(store.mu);
  size_t events = 0;
  for (const auto& c : store.calls) events += c.size();
  EXPECT_EQ(events, 50u);
}

TEST(OrderWatches, WakesOnceForNewsNewerThanTheAgentKnows) {
  OrderWatches w;
  std::vector<int64_t> woke;
  const uint64_t t = w.Watch(
      "n1", 5, [&](int64_t s) { woke.push_back(s); }, 5, [] { return 5; });
  EXPECT_NE(t, 0u);
  EXPECT_TRUE(w.Any());
  w.Fire({{"n1", 4}, {"n2", 9}});  // older than it knows; another node
  EXPECT_TRUE(woke.empty());
  w.Fire({{"n1", 7}});
  EXPECT_EQ(woke, (std::vector<int64_t>{7}));
  w.Fire({{"n1", 8}});  // woken once: gone
  EXPECT_EQ(woke.size(), 1u);
  EXPECT_FALSE(w.Any());
}

TEST(OrderWatches, DurableNewsAnswersAtOnceButNewsNotYetDurableWaits) {
  OrderWatches w;
  int64_t woke = -1;
  EXPECT_EQ(w.Watch(
                "n1", 3, [&](int64_t s) { woke = s; }, 6, [] { return 6; }),
            0u);
  EXPECT_EQ(woke, 6);
  EXPECT_FALSE(w.Any());
  woke = -1;
  EXPECT_NE(w.Watch(
                "n1", 3, [&](int64_t s) { woke = s; }, 6, [] { return 5; }),
            0u);
  EXPECT_EQ(woke, -1);  // batch 6 is not written yet: the writer's news will wake it
  w.Fire({{"n1", 6}});
  EXPECT_EQ(woke, 6);
}

TEST(OrderWatches, ANewerWatchAnswersTheOlderWithZeroAndStaleTicketsDoNothing) {
  OrderWatches w;
  std::vector<int64_t> first, second;
  const uint64_t t1 = w.Watch(
      "n1", 1, [&](int64_t s) { first.push_back(s); }, 0, [] { return 0; });
  const uint64_t t2 = w.Watch(
      "n1", 1, [&](int64_t s) { second.push_back(s); }, 0, [] { return 0; });
  EXPECT_EQ(first, (std::vector<int64_t>{0}));
  w.Unwatch("n1", t1);  // the older watch's deadline: must not remove the newer
  EXPECT_TRUE(w.Any());
  w.Unwatch("n1", t2);
  EXPECT_FALSE(w.Any());
  w.Watch(
      "n2", 0, [&](int64_t s) { second.push_back(s); }, 0, [] { return 0; });
  w.UnwatchAll();
  EXPECT_EQ(second, (std::vector<int64_t>{0}));
  EXPECT_FALSE(w.Any());
}

TEST(ViewCache, ServesTheCurrentVersionAndTheLastWithItsAge) {
  ViewCache c;
  const int64_t v = 7;  // the ledger's memory version
  EXPECT_FALSE(c.Current("jobs", v).has_value());
  EXPECT_FALSE(c.Last("jobs", 0).has_value());
  c.Keep("jobs", v, 1000, {{"jobs", 3}});
  ASSERT_TRUE(c.Current("jobs", v).has_value());
  EXPECT_EQ((*c.Current("jobs", v))["jobs"], 3);
  EXPECT_FALSE(c.Current("jobs", v + 1).has_value());  // memory changed since
  auto last = c.Last("jobs", 1250);
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ((*last)["stale_ms"], 250);
  EXPECT_EQ((*last)["jobs"], 3);
}

TEST(PerSecondLimit, AdmitsUpToTheLimitAndReportsWhatItSuppressed) {
  PerSecondLimit l(2);
  EXPECT_EQ(l.Admit(10), 0);
  EXPECT_EQ(l.Admit(10), 0);
  EXPECT_EQ(l.Admit(10), -1);
  EXPECT_EQ(l.Admit(10), -1);
  EXPECT_EQ(l.Admit(11), 2);  // the next second's first carries the two suppressed
  EXPECT_EQ(l.Admit(11), 0);
}

TEST(JsonText, EscapesWhatJsonMustAndPassesTheRestThrough) {
  const std::string cases[] = {"",           "plain",
                               "say \"hi\"", "a\\b",
                               "\n\r\t",     std::string("nul \0 and \x1f", 11),
                               "\"",         "caf\xc3\xa9 \xe2\x82\xac",
                               "tail\\"};
  for (const std::string& c : cases) {
    JsonText t;
    t.BeginObject().Key(c).Str(c).EndObject();
    const nlohmann::json parsed = nlohmann::json::parse(t.str());
    EXPECT_EQ(parsed.dump(), nlohmann::json({{c, c}}).dump()) << t.str();
  }
  JsonText t;
  t.Str(
      "a\"b\\c\x01"
      "d");
  EXPECT_EQ(t.str(), "\"a\\\"b\\\\c\\u0001d\"");
  JsonText bad;
  bad.Str("x\xff");  // not UTF-8: U+FFFD
  EXPECT_EQ(nlohmann::json::parse(bad.str()).get<std::string>(), "x\xef\xbf\xbd");
  // Escapes written before the bad byte are written once, from the valid copy.
  JsonText late;
  late.BeginArray().Str("ok").Str("a\"b\n\xc3\xa9\xff c").EndArray();
  EXPECT_EQ(late.str(), "[\"ok\",\"a\\\"b\\n\xc3\xa9\xef\xbf\xbd c\"]");
  JsonText ints;
  ints.BeginArray().Int(0).Int(-7).Int(INT64_MAX).Int(INT64_MIN).EndArray();
  EXPECT_EQ(ints.str(), "[0,-7,9223372036854775807,-9223372036854775808]");
}

// Grants are written for every placement twice (its event and its record), by a writer that
// appends each grant's object at once: the same text a field-by-field nlohmann tree gives, the
// names that need escaping or checking included.
TEST(JsonText, GrantsAreTheTextTheTreeGives) {
  std::vector<quota::GrantView> grants;
  grants.push_back({"node-00017", 3, "", 1000, 81559, 0, 0, 0});
  grants.push_back({"n", -1, "1g.10gb@6", 142, 9728, 2500, 4096, 30});
  grants.push_back({"say \"hi\"\n", 0, "CPX#2", INT64_MAX, 0, -1, INT64_MIN, 100});
  grants.push_back({std::string(300, 'x'), 7, std::string(200, 's'), 0, 0, 0, 0, 0});
  grants.push_back({"caf\xc3\xa9", 1, "bad \xff", 5, 6, 7, 8, 0});
  nlohmann::json tree = nlohmann::json::array();
  for (const auto& g : grants) {
    nlohmann::json o = {{"node", g.node},
                        {"device", g.device},
                        {"slot", g.slot},
                        {"compute", g.compute},
                        {"memory", g.memory},
                        {"cpu", g.cpu},
                        {"host_memory", g.host_memory}};
    if (g.sm_percent > 0) o["sm_percent"] = g.sm_percent;
    tree.push_back(o);
  }
  JsonText t;
  t.BeginObject().Key("grants");
  WriteGrants(t, grants);
  t.Key("after").Int(1).EndObject();
  const nlohmann::json parsed = nlohmann::json::parse(t.str());
  EXPECT_EQ(parsed["grants"].dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
            tree.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  EXPECT_EQ(parsed["after"], 1);
  // Keys in the order written (the tree sorts them), no spaces: byte for byte what it was.
  JsonText one;
  WriteGrants(one, {grants[1]});
  EXPECT_EQ(one.str(),
            "[{\"node\":\"n\",\"device\":-1,\"slot\":\"1g.10gb@6\",\"compute\":142,\"memory\":"
            "9728,\"cpu\":2500,\"host_memory\":4096,\"sm_percent\":30}]");
  JsonText none;
  WriteGrants(none, {});
  EXPECT_EQ(none.str(), "[]");
}

}  // namespace
}  // namespace tessera::api
