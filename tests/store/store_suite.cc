// The backend-independent store suite: see store_suite.h.
#include "store_suite.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "pg_harness.h"
#include "store/internal.h"

namespace tessera::store {

void StoreSuite::SetUp() {
  char tmpl[] = "/tmp/tessera-store-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  tmp_dir_ = tmpl;
}

void StoreSuite::TearDown() {
  std::error_code ec;
  if (!tmp_dir_.empty()) std::filesystem::remove_all(tmp_dir_, ec);
}

std::string StoreSuite::NewUrl() {
  if (is_postgres()) {
    std::string error;
    auto* server = testing::SharedPgServer(&error);
    if (server == nullptr) {
      ADD_FAILURE() << "cannot start PostgreSQL for the tests: " << error;
      return "postgresql://127.0.0.1:1/unavailable";
    }
    auto url = server->CreateUniqueDatabase("store");
    if (!url.ok()) {
      ADD_FAILURE() << url.status().ToString();
      return "postgresql://127.0.0.1:1/unavailable";
    }
    return *url;
  }
  return "sqlite:" + tmp_dir_ + "/store" + std::to_string(++next_) + ".db";
}

std::unique_ptr<Store> StoreSuite::MustOpen(const std::string& url) {
  auto s = Store::Open(url);
  if (!s.ok()) {
    ADD_FAILURE() << "Open(" << url << "): " << s.status().ToString();
    return nullptr;
  }
  return std::move(*s);
}

// Shared with store_suite_crash.cc (declared in store_suite.h).
void ExpectSameEvent(const Event& a, const Event& b) {
  EXPECT_EQ(a.seq, b.seq);
  EXPECT_EQ(a.time_ms, b.time_ms);
  EXPECT_EQ(a.actor, b.actor);
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.subject, b.subject);
  EXPECT_EQ(a.reason, b.reason);
  EXPECT_EQ(a.data, b.data);
}

void ExpectSameJob(const JobRecord& a, const JobRecord& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.queue, b.queue);
  EXPECT_EQ(a.identity, b.identity);
  EXPECT_EQ(a.group, b.group);
  EXPECT_EQ(a.state, b.state);
  EXPECT_EQ(a.spec, b.spec);
  EXPECT_EQ(a.placement, b.placement);
  EXPECT_EQ(a.submit_ms, b.submit_ms);
  EXPECT_EQ(a.update_ms, b.update_ms);
  EXPECT_EQ(a.exit_code, b.exit_code);
  EXPECT_EQ(a.reason, b.reason);
}

std::vector<Event> AllEvents(Store& store, const EventFilter& filter) {
  std::vector<Event> out;
  int64_t after = 0;
  for (;;) {
    auto page = store.ListEvents(after, 500, filter);
    EXPECT_TRUE(page.ok()) << page.status().ToString();
    if (!page.ok() || page->empty()) return out;
    after = page->back().seq;
    out.insert(out.end(), page->begin(), page->end());
  }
}

JobRecord MakeJob(const std::string& id, int64_t submit_ms) {
  JobRecord j;
  j.id = id;
  j.queue = "training";
  j.identity = "alice";
  j.group = "vision";
  j.state = "pending";
  j.spec = "{\"gpus\":1}";
  j.submit_ms = submit_ms;
  j.update_ms = submit_ms;
  j.reason = "waiting for quota";
  return j;
}

namespace {

Event MakeEvent(const std::string& kind, const std::string& subject, const std::string& actor,
                int64_t t = 1000) {
  return Event{0, t, actor, kind, subject, "because " + subject, "{\"k\":\"" + kind + "\"}"};
}

std::vector<int64_t> Seqs(const std::vector<Event>& events) {
  std::vector<int64_t> out;
  for (const auto& e : events) out.push_back(e.seq);
  return out;
}

TEST_P(StoreSuite, NewStoreIsEmptyAtLatestVersion) {
  auto store = MustOpen(NewUrl());
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(*store->SchemaVersion(), Store::LatestSchemaVersion());
  EXPECT_EQ(*store->LastSeq(), 0);
  EXPECT_TRUE(store->LoadJobs()->empty());
  EXPECT_TRUE(AllEvents(*store).empty());
}

TEST_P(StoreSuite, CommitRoundTripsAndSurvivesReopen) {
  const std::string url = NewUrl();
  std::vector<Event> events = {
      MakeEvent("job.submitted", "j1", "user:alice", 111),
      Event{0, 222, "engine", "job.placed", "j1", "", "{\"node\":\"n1\",\"quote\":\"a'b\\\"c\"}"},
  };
  JobRecord job = MakeJob("j1", 111);
  job.placement = "{\"node\":\"n1\",\"devices\":[0]}";
  job.spec = "{\"cmd\":\"echo héllo ✓\\nnext\"}";
  {
    auto store = MustOpen(url);
    ASSERT_NE(store, nullptr);
    std::vector<int64_t> seqs = {99};  // must be replaced, not appended to
    ASSERT_TRUE(store->Commit(events, {job}, &seqs).ok());
    EXPECT_EQ(seqs, (std::vector<int64_t>{1, 2}));
  }
  auto store = MustOpen(url);
  ASSERT_NE(store, nullptr);
  auto got = AllEvents(*store);
  ASSERT_EQ(got.size(), 2u);
  events[0].seq = 1;
  events[1].seq = 2;
  ExpectSameEvent(got[0], events[0]);
  ExpectSameEvent(got[1], events[1]);
  auto jobs = store->LoadJobs();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 1u);
  ExpectSameJob((*jobs)[0], job);
  auto one = store->GetJob("j1");
  ASSERT_TRUE(one.ok());
  ASSERT_TRUE(one->has_value());
  ExpectSameJob(**one, job);
  EXPECT_EQ(*store->LastSeq(), 2);
}

TEST_P(StoreSuite, GetJobMissingIsNullopt) {
  auto store = MustOpen(NewUrl());
  ASSERT_NE(store, nullptr);
  auto got = store->GetJob("nope");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_FALSE(got->has_value());
}

TEST_P(StoreSuite, AnUpdateWithAnEmptySpecKeepsTheStoredOne) {
  auto store = MustOpen(NewUrl());
  ASSERT_NE(store, nullptr);
  JobRecord j = MakeJob("j-1", 100);
  ASSERT_TRUE(store->Commit({}, {j}, nullptr).ok());
  j.spec = "";
  j.state = "placed";
  j.placement = "{\"node\":\"n1\"}";
  ASSERT_TRUE(store->Commit({}, {j}, nullptr).ok());
  auto got = store->GetJob("j-1");
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ((*got)->spec, "{\"gpus\":1}");
  EXPECT_EQ((*got)->state, "placed");
  EXPECT_EQ((*got)->placement, "{\"node\":\"n1\"}");
  j.spec = "{\"gpus\":2}";  // a spec given is written
  ASSERT_TRUE(store->Commit({}, {j}, nullptr).ok());
  EXPECT_EQ((*store->GetJob("j-1"))->spec, "{\"gpus\":2}");
}

TEST_P(StoreSuite, AJobIsFoundByItsIdempotencyKeyWithinTheWindow) {
  auto store = MustOpen(NewUrl());
  ASSERT_NE(store, nullptr);
  JobRecord j = MakeJob("j-1", 1000);
  j.idempotency_key = "alice\nk1";
  ASSERT_TRUE(store->Commit({}, {j, MakeJob("j-2", 1001)}, nullptr).ok());
  j.spec = "";  // an update keeps the key
  j.state = "running";
  ASSERT_TRUE(store->Commit({}, {j}, nullptr).ok());
  auto found = store->FindByIdempotencyKey("alice\nk1", 500);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  ASSERT_TRUE(found->has_value());
  EXPECT_EQ((*found)->id, "j-1");
  EXPECT_EQ((*found)->idempotency_key, "alice\nk1");
  EXPECT_FALSE(store->FindByIdempotencyKey("alice\nk1", 1001)->has_value())
      << "older than the window";
  EXPECT_FALSE(store->FindByIdempotencyKey("bob\nk1", 0)->has_value());
  EXPECT_FALSE(store->FindByIdempotencyKey("", 0)->has_value())
      << "jobs without a key match nothing";
}

TEST_P(StoreSuite, SamplesAreKeptPerResolutionListedByTimeAndPruned) {
  const std::string url = NewUrl();
  auto store = MustOpen(url);
  ASSERT_NE(store, nullptr);
  for (int64_t t : {30'000, 10'000, 20'000})
    ASSERT_TRUE(store->PutSample(10, {t, "{\"t\":" + std::to_string(t) + "}"}).ok());
  ASSERT_TRUE(store->PutSample(300, {0, "{\"avg\":1}"}).ok());
  ASSERT_TRUE(store->PutSample(10, {20'000, "{\"t\":\"again\"}"}).ok());  // replaces
  auto fine = store->ListSamples(10, 10'000, 30'000);                     // until is exclusive
  ASSERT_TRUE(fine.ok()) << fine.status().ToString();
  ASSERT_EQ(fine->size(), 2u);
  EXPECT_EQ((*fine)[0].time_ms, 10'000);
  EXPECT_EQ((*fine)[1].data, "{\"t\":\"again\"}");
  EXPECT_EQ(store->ListSamples(300, 0, 1)->size(), 1u);
  auto pruned = store->PruneSamples(10, 25'000);
  ASSERT_TRUE(pruned.ok());
  EXPECT_EQ(*pruned, 2);
  EXPECT_EQ(store->ListSamples(10, 0, 100'000)->size(), 1u);
  EXPECT_EQ(store->ListSamples(300, 0, 100'000)->size(), 1u);  // another resolution is untouched
  store.reset();                                               // kept across a reopen
  auto again = MustOpen(url);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->ListSamples(10, 0, 100'000)->size(), 1u);
}

TEST_P(StoreSuite, AnUpdateOfAJobNotStoredFailsTheWholeCommit) {
  auto store = MustOpen(NewUrl());
  ASSERT_NE(store, nullptr);
  JobRecord fresh = MakeJob("j-1", 100);
  JobRecord ghost = MakeJob("j-2", 100);
  ghost.spec = "";
  Status st = store->Commit({MakeEvent("job.x", "j-1", "engine")}, {fresh, ghost}, nullptr);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("j-2"), std::string::npos) << st.ToString();
  // Nothing of it landed: neither the new job nor the event.
  auto got = store->GetJob("j-1");
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(got->has_value());
  auto evs = store->ListEvents(0, 10, {});
  ASSERT_TRUE(evs.ok());
  EXPECT_TRUE(evs->empty());
}

// A list of ended jobs (what GET /v1/jobs adds to the jobs memory holds) has the newest ended
// ones only, by submission, in the state asked: with their ends not yet folded (SQLite) and after.
TEST_P(StoreSuite, AListOfEndedJobsHasTheNewestEndedOnes) {
  auto store = MustOpen(NewUrl());
  ASSERT_NE(store, nullptr);
  std::vector<JobRecord> jobs;
  for (int i = 1; i <= 6; ++i) jobs.push_back(MakeJob("j-" + std::to_string(i), i));
  ASSERT_TRUE(store->Commit({}, jobs, nullptr).ok());
  for (const auto& [i, state] : std::vector<std::pair<int, const char*>>{
           {2, "failed"}, {4, "succeeded"}, {5, "succeeded"}, {6, "running"}}) {
    JobRecord j = jobs[static_cast<size_t>(i - 1)];
    j.spec = "";
    j.state = state;
    j.update_ms = 100 + i;
    ASSERT_TRUE(store->Commit({}, {j}, nullptr).ok());
  }
  const auto ids = [](const Result<std::vector<JobRecord>>& r) {
    std::vector<std::string> out;
    if (r.ok())
      for (const JobRecord& j : *r) out.push_back(j.id + ":" + j.state);
    return out;
  };
  for (bool tidied : {false, true}) {
    while (tidied && store->Tidy()) {
    }
    SCOPED_TRACE(tidied ? "after Tidy" : "before Tidy");
    EXPECT_EQ(ids(store->ListEndedJobs("", 10)),
              (std::vector<std::string>{"j-5:succeeded", "j-4:succeeded", "j-2:failed"}));
    EXPECT_EQ(ids(store->ListEndedJobs("", 2)),
              (std::vector<std::string>{"j-5:succeeded", "j-4:succeeded"}));
    EXPECT_EQ(ids(store->ListEndedJobs("failed", 10)), (std::vector<std::string>{"j-2:failed"}));
    EXPECT_TRUE(ids(store->ListEndedJobs("running", 10)).empty());
    EXPECT_EQ(ids(store->ListJobs("", 2)),
              (std::vector<std::string>{"j-6:running", "j-5:succeeded"}));
  }
  // Some ends folded into the rows (above), more in the log (SQLite): the list takes both.
  for (const auto& [i, state] :
       std::vector<std::pair<int, const char*>>{{1, "cancelled"}, {3, "lost"}}) {
    JobRecord j = jobs[static_cast<size_t>(i - 1)];
    j.spec = "";
    j.state = state;
    j.update_ms = 200 + i;
    ASSERT_TRUE(store->Commit({}, {j}, nullptr).ok());
  }
  EXPECT_EQ(ids(store->ListEndedJobs("", 10)),
            (std::vector<std::string>{"j-5:succeeded", "j-4:succeeded", "j-3:lost", "j-2:failed",
                                      "j-1:cancelled"}));
  EXPECT_EQ(ids(store->ListEndedJobs("", 3)),
            (std::vector<std::string>{"j-5:succeeded", "j-4:succeeded", "j-3:lost"}));
  EXPECT_EQ(ids(store->ListEndedJobs("lost", 10)), (std::vector<std::string>{"j-3:lost"}));
  EXPECT_EQ(ids(store->ListEndedJobs("succeeded", 1)), (std::vector<std::string>{"j-5:succeeded"}));
}

// Jobs submitted in the same millisecond (a burst of submissions does that) are in submission
// order everywhere, j-9 before j-10, as the server's own list merges them (api/views.cc) and as a
// restart queues them again. By the id's text, j-10 came before j-9: the dashboard's list after a
// restart jumped from j-99 back to j-989.
TEST_P(StoreSuite, JobsSubmittedInOneMillisecondAreInSubmissionOrder) {
  auto store = MustOpen(NewUrl());
  ASSERT_NE(store, nullptr);
  std::vector<JobRecord> jobs;
  for (const char* id : {"j-8", "j-9", "j-10", "j-11", "j-100"}) jobs.push_back(MakeJob(id, 500));
  jobs.push_back(MakeJob("j-7", 400));  // an earlier millisecond first, whatever its id
  ASSERT_TRUE(store->Commit({}, jobs, nullptr).ok());
  const auto ids = [](const Result<std::vector<JobRecord>>& r) {
    std::vector<std::string> out;
    if (r.ok())
      for (const JobRecord& j : *r) out.push_back(j.id);
    return out;
  };
  const std::vector<std::string> oldest_first = {"j-7", "j-8", "j-9", "j-10", "j-11", "j-100"};
  const std::vector<std::string> newest_first(oldest_first.rbegin(), oldest_first.rend());
  EXPECT_EQ(ids(store->LoadJobs()), oldest_first);
  EXPECT_EQ(ids(store->LoadLiveJobs()), oldest_first);
  EXPECT_EQ(ids(store->ListJobs("", 10)), newest_first);
  EXPECT_EQ(ids(store->ListJobs("", 2)), (std::vector<std::string>{"j-100", "j-11"}));
  // Ended: the ends in the log (SQLite, before Tidy) and folded into the rows.
  for (JobRecord j : jobs) {
    j.spec = "";
    j.state = "succeeded";
    j.update_ms = 600;
    ASSERT_TRUE(store->Commit({}, {j}, nullptr).ok());
  }
  for (bool tidied : {false, true}) {
    while (tidied && store->Tidy()) {
    }
    SCOPED_TRACE(tidied ? "after Tidy" : "before Tidy");
    EXPECT_EQ(ids(store->ListEndedJobs("", 10)), newest_first);
    EXPECT_EQ(ids(store->ListEndedJobs("", 3)),
              (std::vector<std::string>{"j-100", "j-11", "j-10"}));
    EXPECT_EQ(ids(store->ListJobs("succeeded", 2)), (std::vector<std::string>{"j-100", "j-11"}));
    EXPECT_EQ(ids(store->LoadJobs()), oldest_first);
  }
}

// What a job became after its submission (state, placement, reason, exit code) is what every
// read finds: right after the commit, after a reopen, after Tidy; and a job whose record is
// written whole again is what that record says, whatever progress came before it. (SQLite
// appends progress to a log that Tidy folds into the rows; PostgreSQL updates them in place.)
TEST_P(StoreSuite, EveryReadFindsAJobsLatestProgressBeforeAndAfterTidy) {
  const std::string url = NewUrl();
  auto store = MustOpen(url);
  ASSERT_NE(store, nullptr);
  JobRecord a = MakeJob("j-1", 1000);
  a.idempotency_key = "alice\nk1";
  JobRecord b = MakeJob("j-2", 1001);
  ASSERT_TRUE(store->Commit({}, {a, b}, nullptr).ok());
  a.spec = b.spec = "";
  a.state = b.state = "placed";
  a.placement = b.placement = "{\"node\":\"n1\"}";
  a.reason = b.reason = "";
  a.update_ms = b.update_ms = 2000;
  ASSERT_TRUE(store->Commit({}, {a, b}, nullptr).ok());
  b.state = "succeeded";
  b.exit_code = 0;
  b.update_ms = 5000;
  ASSERT_TRUE(store->Commit({}, {b}, nullptr).ok());

  const auto expect_current = [&](Store& s, const std::string& when) {
    SCOPED_TRACE(when);
    auto one = s.GetJob("j-1");
    ASSERT_TRUE(one.ok() && one->has_value()) << one.status().ToString();
    EXPECT_EQ((*one)->state, "placed");
    EXPECT_EQ((*one)->placement, "{\"node\":\"n1\"}");
    EXPECT_EQ((*one)->reason, "");
    EXPECT_EQ((*one)->spec, "{\"gpus\":1}");
    auto keyed = s.FindByIdempotencyKey("alice\nk1", 0);
    ASSERT_TRUE(keyed.ok() && keyed->has_value());
    EXPECT_EQ((*keyed)->state, "placed");
    auto ended = s.GetJob("j-2");
    ASSERT_TRUE(ended.ok() && ended->has_value());
    EXPECT_EQ((*ended)->state, "succeeded");
    EXPECT_EQ((*ended)->exit_code, std::optional<int>(0));
    EXPECT_EQ((*ended)->update_ms, 5000);
    auto placed = s.ListJobs("placed", 10);
    ASSERT_TRUE(placed.ok());
    ASSERT_EQ(placed->size(), 1u);
    EXPECT_EQ((*placed)[0].id, "j-1");
    EXPECT_EQ(s.ListJobs("succeeded", 10)->size(), 1u);
    auto ended_list = s.ListEndedJobs("", 10);
    ASSERT_TRUE(ended_list.ok()) << ended_list.status().ToString();
    ASSERT_EQ(ended_list->size(), 1u) << "j-1 is live";
    EXPECT_EQ((*ended_list)[0].id, "j-2");
    EXPECT_EQ((*ended_list)[0].update_ms, 5000);
    EXPECT_TRUE(s.ListEndedJobs("placed", 10)->empty());
    auto live = s.LoadLiveJobs();
    ASSERT_TRUE(live.ok());
    ASSERT_EQ(live->size(), 1u);
    EXPECT_EQ((*live)[0].id, "j-1");
    auto all = s.LoadJobs();
    ASSERT_TRUE(all.ok());
    ASSERT_EQ(all->size(), 2u);
    EXPECT_EQ((*all)[1].state, "succeeded");
  };
  expect_current(*store, "after the commits");
  store.reset();
  store = MustOpen(url);
  ASSERT_NE(store, nullptr);
  expect_current(*store, "after a reopen");
  while (store->Tidy()) {
  }
  expect_current(*store, "after Tidy");

  a.state = "running";  // progress, then the whole record written again: the record wins
  ASSERT_TRUE(store->Commit({}, {a}, nullptr).ok());
  JobRecord whole = MakeJob("j-1", 1000);
  whole.spec = "{\"gpus\":2}";
  ASSERT_TRUE(store->Commit({}, {whole}, nullptr).ok());
  for (bool tidied : {false, true}) {
    while (tidied && store->Tidy()) {
    }
    auto one = store->GetJob("j-1");
    ASSERT_TRUE(one.ok() && one->has_value());
    EXPECT_EQ((*one)->state, "pending") << tidied;
    EXPECT_EQ((*one)->spec, "{\"gpus\":2}") << tidied;
    EXPECT_EQ((*store->LoadJobs())[0].state, "pending") << tidied;
  }
  // The ended job's end time came with its progress: pruning by it removes the job.
  auto pruned = store->Prune(6000);
  ASSERT_TRUE(pruned.ok()) << pruned.status().ToString();
  EXPECT_FALSE(store->GetJob("j-2")->has_value());
  EXPECT_TRUE(store->GetJob("j-1")->has_value());
}

TEST_P(StoreSuite, SeqIsStrictlyIncreasingWithoutGaps) {
  auto store = MustOpen(NewUrl());
  ASSERT_NE(store, nullptr);
  std::vector<int64_t> all;
  for (int round = 0; round < 12; ++round) {
    std::vector<Event> batch;
    for (int k = 0; k < round % 4; ++k) batch.push_back(MakeEvent("job.x", "j", "engine"));
    std::vector<JobRecord> jobs;
    if (round % 3 == 0) jobs.push_back(MakeJob("j" + std::to_string(round), round));
    std::vector<int64_t> seqs;
    ASSERT_TRUE(store->Commit(batch, jobs, &seqs).ok());
    ASSERT_EQ(seqs.size(), batch.size());
    all.insert(all.end(), seqs.begin(), seqs.end());
  }
  // An empty commit is a no-op.
  std::vector<int64_t> none = {5};
  ASSERT_TRUE(store->Commit({}, {}, &none).ok());
  EXPECT_TRUE(none.empty());
  std::vector<int64_t> want(all.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = static_cast<int64_t>(i + 1);
  EXPECT_EQ(all, want);
  EXPECT_EQ(Seqs(AllEvents(*store)), want);
  EXPECT_EQ(*store->LastSeq(), static_cast<int64_t>(want.size()));
}

TEST_P(StoreSuite, ConcurrentCommitsFromThreadsGetDistinctOrderedSeqs) {
  auto store = MustOpen(NewUrl());
  ASSERT_NE(store, nullptr);
  constexpr int kThreads = 4;
  constexpr int kCommits = 40;
  std::vector<std::vector<int64_t>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCommits; ++i) {
        std::vector<int64_t> seqs;
        const std::string id = "t" + std::to_string(t) + "-" + std::to_string(i);
        auto s = store->Commit(
            {MakeEvent("job.submitted", id, "engine"), MakeEvent("job.placed", id, "engine")},
            {MakeJob(id, i)}, &seqs);
        if (!s.ok() || seqs.size() != 2 || seqs[1] != seqs[0] + 1) {
          ADD_FAILURE() << s.ToString();
          return;
        }
        got[t].insert(got[t].end(), seqs.begin(), seqs.end());
      }
    });
  }
  for (auto& th : threads) th.join();
  std::set<int64_t> seen;
  for (const auto& v : got) {
    EXPECT_TRUE(std::is_sorted(v.begin(), v.end()));
    seen.insert(v.begin(), v.end());
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kThreads * kCommits * 2));
  EXPECT_EQ(*seen.begin(), 1);
  EXPECT_EQ(*seen.rbegin(), kThreads * kCommits * 2);
  EXPECT_EQ(store->LoadJobs()->size(), static_cast<size_t>(kThreads * kCommits));
}

TEST_P(StoreSuite, FiltersByKindPrefixSubjectAndActor) {
  auto store = MustOpen(NewUrl());
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store
                  ->Commit({MakeEvent("job.submitted", "j1", "user:alice"),
                            MakeEvent("job.placed", "j1", "engine"),
                            MakeEvent("node.lost", "n1", "agent:n1"),
                            MakeEvent("job.finished", "j1", "agent:n1"),
                            MakeEvent("job.submitted", "j2", "user:bob"),
                            MakeEvent("jobs.weird", "j2", "engine"),
                            MakeEvent("a%b", "x", "engine"), MakeEvent("axxb", "x", "engine")},
                           {}, nullptr)
                  .ok());
  auto kinds = [&](const EventFilter& f) {
    std::vector<std::string> out;
    for (const auto& e : AllEvents(*store, f)) out.push_back(e.kind + "/" + e.subject);
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(kinds({"job.", "", ""}),
            (V{"job.submitted/j1", "job.placed/j1", "job.finished/j1", "job.submitted/j2"}));
  EXPECT_EQ(kinds({"job.finished", "", ""}), (V{"job.finished/j1"}));
  EXPECT_EQ(kinds({"job", "", ""}).size(), 5u);
  EXPECT_TRUE(kinds({"JOB.", "", ""}).empty()) << "prefix match must be case-sensitive";
  EXPECT_EQ(kinds({"a%", "", ""}), (V{"a%b/x"})) << "no wildcards in a prefix";
  EXPECT_EQ(kinds({"", "j2", ""}), (V{"job.submitted/j2", "jobs.weird/j2"}));
  EXPECT_EQ(kinds({"", "", "agent:n1"}), (V{"node.lost/n1", "job.finished/j1"}));
  EXPECT_EQ(kinds({"job.", "j1", "engine"}), (V{"job.placed/j1"}));
  EXPECT_EQ(kinds({"job.", "", "agent:n1"}), (V{"job.finished/j1"}));
  EXPECT_EQ(kinds({"", "j1", "agent:n1"}), (V{"job.finished/j1"}));
  EXPECT_EQ(kinds({"node.", "j1", ""}), V{});
  EXPECT_EQ(kinds({"job.", "j2", "user:bob"}), (V{"job.submitted/j2"}));
  EXPECT_EQ(kinds({"", "", ""}).size(), 8u);
}

TEST_P(StoreSuite, PagesByAfterSeqAndLimit) {
  auto store = MustOpen(NewUrl());
  ASSERT_NE(store, nullptr);
  for (int i = 0; i < 25; ++i) {
    ASSERT_TRUE(store
                    ->Commit({MakeEvent(i % 2 ? "job.placed" : "job.submitted",
                                        "j" + std::to_string(i), "engine", i)},
                             {}, nullptr)
                    .ok());
  }
  auto p1 = store->ListEvents(0, 10, {});
  ASSERT_TRUE(p1.ok());
  ASSERT_EQ(p1->size(), 10u);
  EXPECT_EQ(p1->front().seq, 1);
  EXPECT_EQ(p1->back().seq, 10);
  auto p3 = store->ListEvents(20, 10, {});
  ASSERT_EQ(p3->size(), 5u);
  EXPECT_EQ(p3->front().seq, 21);
  EXPECT_TRUE(store->ListEvents(25, 10, {})->empty());
  EXPECT_TRUE(store->ListEvents(0, 0, {})->empty());
  EXPECT_FALSE(store->ListEvents(0, -1, {}).ok());
  // Paging a filtered view: odd seqs are "job.submitted" (i even).
  auto f1 = store->ListEvents(0, 4, {"job.submitted", "", ""});
  ASSERT_EQ(Seqs(*f1), (std::vector<int64_t>{1, 3, 5, 7}));
  auto f2 = store->ListEvents(f1->back().seq, 4, {"job.submitted", "", ""});
  ASSERT_EQ(Seqs(*f2), (std::vector<int64_t>{9, 11, 13, 15}));
  EXPECT_EQ(AllEvents(*store, {"job.submitted", "", ""}).size(), 13u);
}

TEST_P(StoreSuite, JobsAreUpsertedAndListedInSubmitOrder) {
  auto store = MustOpen(NewUrl());
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(
      store->Commit({}, {MakeJob("c", 30), MakeJob("b", 10), MakeJob("a", 10)}, nullptr).ok());
  JobRecord done = MakeJob("c", 30);
  done.state = "failed";
  done.exit_code = 137;
  done.placement = "{\"node\":\"n2\"}";
  done.update_ms = 99;
  done.reason = "killed";
  ASSERT_TRUE(store->Commit({MakeEvent("job.finished", "c", "agent:n2")}, {done}, nullptr).ok());
  auto jobs = store->LoadJobs();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 3u);
  EXPECT_EQ((*jobs)[0].id, "a");
  EXPECT_EQ((*jobs)[1].id, "b");
  EXPECT_EQ((*jobs)[2].id, "c");
  ExpectSameJob((*jobs)[2], done);
  // Back to no exit code: NULL again, not 0.
  done.exit_code.reset();
  done.state = "pending";
  ASSERT_TRUE(store->Commit({}, {done}, nullptr).ok());
  auto c = store->GetJob("c");
  ASSERT_TRUE(c.ok() && c->has_value());
  ExpectSameJob(**c, done);
  // Exit code 0 is a value, not "none".
  done.exit_code = 0;
  ASSERT_TRUE(store->Commit({}, {done}, nullptr).ok());
  EXPECT_EQ((*store->GetJob("c"))->exit_code, std::optional<int>(0));
}

TEST_P(StoreSuite, InvalidCommitChangesNothing) {
  auto store = MustOpen(NewUrl());
  ASSERT_NE(store, nullptr);
  JobRecord nameless = MakeJob("", 1);
  auto s = store->Commit({MakeEvent("job.submitted", "j", "engine")}, {MakeJob("ok", 1), nameless},
                         nullptr);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*store->LastSeq(), 0);
  EXPECT_TRUE(store->LoadJobs()->empty());
}

TEST_P(StoreSuite, SettingsAreDurableKeyValues) {
  const std::string url = NewUrl();
  {
    auto store = MustOpen(url);
    ASSERT_NE(store, nullptr);
    auto missing = store->GetSetting("cluster.id");
    ASSERT_TRUE(missing.ok());
    EXPECT_FALSE(missing->has_value());
    ASSERT_TRUE(store->PutSetting("cluster.id", "c-1").ok());
    ASSERT_TRUE(store->PutSetting("cluster.id", "c-2").ok());
    ASSERT_TRUE(store->PutSetting("empty", "").ok());
  }
  auto store = MustOpen(url);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(*store->GetSetting("cluster.id"), std::optional<std::string>("c-2"));
  EXPECT_EQ(*store->GetSetting("empty"), std::optional<std::string>(""));
  EXPECT_EQ(*store->GetSetting("other"), std::nullopt);
  // By prefix, in key order; a prefix with LIKE's wildcards in it matches only itself.
  ASSERT_TRUE(store->PutSetting("node/b", "2").ok());
  ASSERT_TRUE(store->PutSetting("node/a", "1").ok());
  ASSERT_TRUE(store->PutSetting("node%x", "no").ok());
  ASSERT_TRUE(store->PutSetting("nodes", "no").ok());
  auto listed = store->ListSettings("node/");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  using KV = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(*listed, (KV{{"node/a", "1"}, {"node/b", "2"}}));
  EXPECT_TRUE(store->ListSettings("zzz/")->empty());
}

TEST_P(StoreSuite, NewerSchemaIsRefusedNamingBothVersions) {
  const std::string url = NewUrl();
  {
    auto store = MustOpen(url);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->PutSetting("k", "v").ok());
  }
  ASSERT_TRUE(internal::ExecSql(url, "UPDATE schema_version SET version = " +
                                         std::to_string(Store::LatestSchemaVersion() + 1))
                  .ok());
  for (int attempt = 0; attempt < 2; ++attempt) {  // refusing changes nothing: same answer twice
    auto again = Store::Open(url);
    ASSERT_FALSE(again.ok());
    EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(again.status().message().find(
                  "store schema version " + std::to_string(Store::LatestSchemaVersion() + 1) +
                  " is newer than this Tessera (knows up to " +
                  std::to_string(Store::LatestSchemaVersion()) + "); upgrade Tessera"),
              std::string::npos)
        << again.status().message();
  }
}

// Several servers on one store: one holds the lease, the other waits; once another server has
// taken the lead (epoch bumped), the deposed one's writes are refused whole and its lease check
// fails. PostgreSQL: the deposed leader's lease session is killed (as when it hangs or is cut
// off) and the standby takes the lock; SQLite: its flock cannot be taken from a live process,
// so the new leader's epoch bump is written directly.
TEST_P(StoreSuite, OneLeaderAtATimeAndADeposedLeaderCannotWrite) {
  const std::string url = NewUrl();
  auto a = MustOpen(url), b = MustOpen(url);
  ASSERT_TRUE(a && b);
  auto la = a->TryLead("http://a:8080");
  ASSERT_TRUE(la.ok()) << la.status().ToString();
  ASSERT_TRUE(la->has_value());
  EXPECT_EQ((*la)->epoch, 1);
  auto lb = b->TryLead("http://b:8080");
  ASSERT_TRUE(lb.ok()) << lb.status().ToString();
  EXPECT_FALSE(lb->has_value()) << "two leaders at once";
  EXPECT_EQ(b->Leader()->holder, "http://a:8080");
  ASSERT_TRUE(
      a->Commit({MakeEvent("job.submitted", "j1", "engine")}, {MakeJob("j1", 1)}, nullptr).ok());
  ASSERT_TRUE(a->PutSetting("node/n1", "{}").ok());
  EXPECT_TRUE(a->CheckLease().ok());

  if (is_postgres()) {
    ASSERT_TRUE(internal::ExecSql(url,
                                  "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE "
                                  "locktype = 'advisory' AND objid = 2119559073")
                    .ok());
    std::optional<Store::Leadership> now;
    for (int i = 0; i < 100 && !now; ++i) {  // the server ends the session asynchronously
      auto l = b->TryLead("http://b:8080");
      ASSERT_TRUE(l.ok()) << l.status().ToString();
      now = *l;
      if (!now) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_TRUE(now.has_value()) << "the standby never got the lease";
    EXPECT_EQ(now->epoch, 2);
  } else {
    ASSERT_TRUE(
        internal::ExecSql(url, "UPDATE leadership SET epoch = epoch + 1, holder = 'http://b:8080'")
            .ok());
  }
  EXPECT_EQ(b->Leader()->epoch, 2);
  const int64_t seq = *a->LastSeq();
  Status late = a->Commit({MakeEvent("job.placed", "j1", "engine")}, {MakeJob("j2", 2)}, nullptr);
  EXPECT_EQ(late.code(), StatusCode::kFailedPrecondition) << late.ToString();
  EXPECT_NE(late.message().find("deposed"), std::string::npos) << late.message();
  EXPECT_NE(late.message().find("http://b:8080"), std::string::npos) << late.message();
  EXPECT_EQ(*a->LastSeq(), seq) << "a refused commit wrote events";
  EXPECT_FALSE(b->GetJob("j2")->has_value()) << "a refused commit wrote a job";
  EXPECT_EQ(a->PutSetting("node/n2", "{}").code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(a->CheckLease().ok());
  if (is_postgres()) {
    EXPECT_TRUE(b->Commit({MakeEvent("job.placed", "j1", "engine")}, {}, nullptr).ok());
    EXPECT_TRUE(b->CheckLease().ok());
  }
}

TEST_P(StoreSuite, MigratesAVersionOneStore) {
  ASSERT_GE(Store::LatestSchemaVersion(), 2);
  const std::string url = NewUrl();
  {
    auto v1 = internal::OpenAtVersion(url, 1);
    ASSERT_TRUE(v1.ok()) << v1.status().ToString();
    EXPECT_EQ(*(*v1)->SchemaVersion(), 1);
    ASSERT_TRUE((*v1)->Commit({MakeEvent("job.submitted", "old", "user:alice")}, {}, nullptr).ok());
    ASSERT_TRUE((*v1)->PutSetting("cluster.id", "c-old").ok());
  }
  // A job row as version 1 wrote it: no reason column.
  ASSERT_TRUE(internal::ExecSql(url,
                                "INSERT INTO jobs (id, queue, identity, group_name, state, spec, "
                                "placement, submit_ms, update_ms, exit_code) VALUES ('old', 'q', "
                                "'alice', 'g', 'succeeded', '{}', '', 5, 6, 0)")
                  .ok());
  auto store = MustOpen(url);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(*store->SchemaVersion(), Store::LatestSchemaVersion());
  auto job = store->GetJob("old");
  ASSERT_TRUE(job.ok() && job->has_value()) << job.status().ToString();
  EXPECT_EQ((*job)->state, "succeeded");
  EXPECT_EQ((*job)->reason, "");
  EXPECT_EQ((*job)->exit_code, std::optional<int>(0));
  EXPECT_EQ(*store->GetSetting("cluster.id"), std::optional<std::string>("c-old"));
  std::vector<int64_t> seqs;
  JobRecord updated = **job;
  updated.reason = "migrated";
  ASSERT_TRUE(store->Commit({MakeEvent("job.noted", "old", "engine")}, {updated}, &seqs).ok());
  EXPECT_EQ(seqs, (std::vector<int64_t>{2}));
  EXPECT_EQ((*store->GetJob("old"))->reason, "migrated");
  // Opening again is a no-op.
  store.reset();
  store = MustOpen(url);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(AllEvents(*store).size(), 2u);
}

}  // namespace
}  // namespace tessera::store
