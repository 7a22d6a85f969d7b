// The checks of a store written by the release at 29e72e9: see release_fixture.h.
#include "release_fixture.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <utility>
#include <vector>

#include "api/config.h"
#include "api/engine.h"
#include "store/store.h"

namespace tessera::store::testing {
namespace {

using api::Json;

Json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  Json j = Json::parse(ss.str(), nullptr, false);
  if (!in || j.is_discarded()) throw std::runtime_error("cannot read JSON " + path);
  return j;
}

const api::Identity& Who(const api::EngineConfig& c, const std::string& name) {
  for (const auto& i : c.identities) {
    if (i.name == name) return i;
  }
  throw std::runtime_error("no identity " + name + " in the fixture's config");
}

// Every field the release answered, today's answer has with the same value (today may add
// fields, at any depth: a placement's devices now say their isolation), but a job's `activity`:
// what its agent last reported (idle, last active, memory in use), kept in memory only, by the
// release as by today's server, and back with the next heartbeat. `what` names the object in the
// failure.
void ExpectAnswersAsTheRelease(const Json& release, const Json& today, const std::string& what) {
  ASSERT_TRUE(today.is_object()) << what << ": " << today.dump();
  for (const auto& [key, value] : release.items()) {
    if (key == "activity") continue;
    EXPECT_TRUE(today.contains(key))
        << what << ": no '" << key << "' (the release had " << value.dump() << ")";
    if (!today.contains(key)) continue;
    const Json& now = today[key];
    if (value.is_object() && now.is_object()) {
      ExpectAnswersAsTheRelease(value, now, what + "." + key);
    } else if (value.is_array() && now.is_array() && value.size() == now.size() && !value.empty() &&
               value[0].is_object()) {
      for (size_t i = 0; i < value.size(); ++i)
        ExpectAnswersAsTheRelease(value[i], now[i],
                                  what + "." + key + "[" + std::to_string(i) + "]");
    } else {
      EXPECT_EQ(now, value) << what << "." << key << ": today " << now.dump() << ", the release "
                            << value.dump();
    }
  }
}

// Today's GET /v1/events, paged `page` at a time from the start: every event.
std::vector<Json> AllEvents(api::Engine& engine, const api::Identity& who, int page,
                            const store::EventFilter& filter = {}) {
  std::vector<Json> out;
  int64_t after = 0;
  for (int round = 0; round < 1000; ++round) {
    auto r = engine.views().Events(who, after, page, filter);
    if (!r.ok()) throw std::runtime_error("events: " + r.status().ToString());
    for (const auto& e : (*r)["events"]) out.push_back(e);
    const int64_t next = (*r)["next"].get<int64_t>();
    if ((*r)["events"].empty() || next == after) break;
    after = next;
  }
  return out;
}

}  // namespace

std::string ReleaseFixtureDir() { return TESSERA_RELEASE_FIXTURE; }

void CheckReleaseStore(const std::string& url, const std::string& data_dir,
                       const std::string& backend) {
  const std::string dir = ReleaseFixtureDir() + "/" + backend;
  const Json release_jobs = ReadJson(dir + "/jobs.json")["jobs"];
  const Json release_details = ReadJson(dir + "/job_details.json");
  const Json release_events = ReadJson(dir + "/events.json")["events"];
  const Json release_nodes = ReadJson(dir + "/nodes.json")["nodes"];
  ASSERT_EQ(release_jobs.size(), 7u);
  ASSERT_FALSE(release_events.empty());

  // As `tessera serve` starts: open (migrating), take the lead, open the engine. The clock is a
  // minute after the release's last event, within the Idempotency-Key window and every node's
  // fresh heartbeat window.
  auto store = Store::Open(url);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto version = (*store)->SchemaVersion();
  ASSERT_TRUE(version.ok()) << version.status().ToString();
  EXPECT_EQ(*version, Store::LatestSchemaVersion());
  auto led = (*store)->TryLead("http://127.0.0.1:8080");
  ASSERT_TRUE(led.ok()) << led.status().ToString();
  ASSERT_TRUE(led->has_value()) << "the release's lease was not free";
  EXPECT_GT((*led)->epoch, 1) << "the release led in epoch 1";
  auto config = api::LoadConfig(ReleaseFixtureDir() + "/config.yaml");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  const int64_t now = release_events.back()["time_ms"].get<int64_t>() + 60'000;
  auto opened = api::Engine::Open(*config, std::move(*store), data_dir, [now] { return now; });
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  api::Engine& engine = **opened;
  const api::Identity& admin = Who(*config, "admin");
  const api::Identity& alice = Who(*config, "alice");
  // A server runs a cycle as soon as it starts; until then a waiting job's reason is "Queued".
  // This one decides what the release's last cycle decided (j-7 waits at production's limit).
  ASSERT_TRUE(engine.RunCycle().ok());
  ASSERT_TRUE(engine.Sync().ok());

  // GET /v1/jobs: every job, in the release's order, with its state, group, identity, queue,
  // times, exit code, reason, spec and placement.
  auto jobs = engine.views().ListJobs(admin, "", 1000);
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  const Json& today_jobs = (*jobs)["jobs"];
  ASSERT_EQ(today_jobs.size(), release_jobs.size()) << today_jobs.dump(1);
  for (size_t i = 0; i < release_jobs.size(); ++i) {
    const std::string id = release_jobs[i]["id"];
    EXPECT_EQ(today_jobs[i].value("id", ""), id) << "GET /v1/jobs order, row " << i;
    ExpectAnswersAsTheRelease(release_jobs[i], today_jobs[i], "GET /v1/jobs " + id);
  }
  // The states this fixture was made to hold.
  std::vector<std::string> states;
  for (const auto& j : today_jobs) states.push_back(j["state"]);
  EXPECT_EQ(states, (std::vector<std::string>{"pending", "running", "running", "cancelled",
                                              "running", "failed", "succeeded"}));
  // By state, as `tessera jobs --state` asks.
  auto running = engine.views().ListJobs(admin, "running", 1000);
  ASSERT_TRUE(running.ok()) << running.status().ToString();
  EXPECT_EQ((*running)["jobs"].size(), 3u);

  // GET /v1/jobs/{id}: the live ones out of memory, the ended ones out of the store.
  for (const auto& d : release_details) {
    const std::string id = d["id"];
    auto job = engine.views().GetJob(admin, id);
    ASSERT_TRUE(job.ok()) << id << ": " << job.status().ToString();
    ExpectAnswersAsTheRelease(d, *job, "GET /v1/jobs/" + id);
  }
  // A user sees her own jobs and not bob's.
  auto mine = engine.views().ListJobs(alice, "", 1000);
  ASSERT_TRUE(mine.ok()) << mine.status().ToString();
  for (const auto& j : (*mine)["jobs"]) EXPECT_EQ(j["identity"], "alice") << j.dump();
  EXPECT_EQ((*mine)["jobs"].size(), 4u);

  // GET /v1/events: the release's log, event for event, whatever the page size; filters by kind
  // and subject read the migrated indexes.
  for (int page : {1000, 7, 1}) {
    const std::vector<Json> events = AllEvents(engine, admin, page);
    ASSERT_GE(events.size(), release_events.size()) << "page " << page;
    for (size_t i = 0; i < release_events.size(); ++i) {
      ExpectAnswersAsTheRelease(
          release_events[i], events[i],
          "GET /v1/events (page " + std::to_string(page) + ") #" + std::to_string(i));
    }
  }
  std::vector<Json> placed;
  for (const auto& e : release_events) {
    if (e["kind"] == "job.placed") placed.push_back(e);
  }
  store::EventFilter by_kind;
  by_kind.kind_prefix = "job.placed";
  EXPECT_EQ(AllEvents(engine, admin, 2, by_kind), placed);
  std::vector<Json> of_j4;
  for (const auto& e : release_events) {
    if (e["subject"] == "j-4") of_j4.push_back(e);
  }
  store::EventFilter by_subject;
  by_subject.subject = "j-4";
  EXPECT_EQ(AllEvents(engine, admin, 100, by_subject), of_j4);
  EXPECT_EQ(of_j4.back()["kind"], "job.cancelled");

  // GET /v1/nodes: the registered node, its devices, the MIG layout and who holds what.
  auto nodes = engine.views().Nodes(admin);
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ((*nodes)["nodes"].size(), release_nodes.size()) << nodes->dump(1);
  for (size_t i = 0; i < release_nodes.size(); ++i) {
    const Json& r = release_nodes[i];
    const Json& t = (*nodes)["nodes"][i];
    for (const char* key : {"name", "pool", "cpu_milli", "memory_mib", "simulated", "state"})
      EXPECT_EQ(t[key], r[key]) << "node " << r["name"] << "." << key;
    ASSERT_EQ(t["devices"].size(), r["devices"].size());
    for (size_t d = 0; d < r["devices"].size(); ++d) {
      const Json& rd = r["devices"][d];
      const Json& td = t["devices"][d];
      for (const char* key : {"index", "model", "memory_mib", "uuid", "mig", "gpu_milli_used",
                              "gpu_memory_mib_used", "holders", "partitions"})
        EXPECT_EQ(td[key], rd[key]) << "node " << r["name"] << " device " << d << "." << key;
    }
  }

  // The Idempotency-Key the release recorded (alice's "fixture-key-1", on j-5) still finds its
  // job: a repeat makes nothing new.
  const Json keyed = {{"queue", "notebooks"}, {"name", "keyed"}, {"command", {"sleep", "3600"}}};
  bool replayed = false;
  auto again = engine.Submit(alice, keyed, "fixture-key-1", &replayed);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(replayed);
  EXPECT_EQ((*again)["id"], "j-5");

  // A new submission: accepted, numbered after the release's jobs, placed by the next cycle on
  // the release's node (a 8 GiB share fits beside what runs there).
  auto fresh = engine.Submit(alice, {{"queue", "notebooks"}, {"command", {"true"}}});
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_EQ((*fresh)["id"], "j-8");
  ASSERT_TRUE(engine.RunCycle().ok());
  ASSERT_TRUE(engine.Sync().ok());
  auto placed_job = engine.views().GetJob(admin, "j-8");
  ASSERT_TRUE(placed_job.ok()) << placed_job.status().ToString();
  const std::string state = (*placed_job)["state"];
  EXPECT_TRUE(state == "placed" || state == "starting") << placed_job->dump(1);
  EXPECT_EQ((*placed_job)["placement"].value("node", ""), "node-a") << placed_job->dump(1);
  // The waiting job still waits (production is at its limit), for the same reason.
  auto waiting = engine.views().GetJob(admin, "j-7");
  ASSERT_TRUE(waiting.ok());
  EXPECT_EQ((*waiting)["state"], "pending");
  // The engine's own invariants over the migrated state.
  EXPECT_TRUE(engine.CheckInvariants().ok()) << engine.CheckInvariants().ToString();

  // And a second start over the migrated store (a restart after the upgrade) reads the same.
  opened->reset();
  auto reopened_store = Store::Open(url);
  ASSERT_TRUE(reopened_store.ok()) << reopened_store.status().ToString();
  auto reopened =
      api::Engine::Open(*config, std::move(*reopened_store), data_dir, [now] { return now; });
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  auto after_restart = (*reopened)->views().ListJobs(admin, "", 1000);
  ASSERT_TRUE(after_restart.ok());
  EXPECT_EQ((*after_restart)["jobs"].size(), 8u);
  auto j8 = (*reopened)->views().GetJob(admin, "j-8");
  ASSERT_TRUE(j8.ok());
  EXPECT_EQ((*j8)["state"], state);
}

}  // namespace tessera::store::testing
