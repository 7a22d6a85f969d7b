// What `tessera usage`, `tessera whatif` and the utilization chart cost over a long history: --jobs
// ended jobs (each with job.submitted, job.placed with its grant, job.running, job.succeeded; one
// in ten also job.idle/job.active) spread over --days, and one utilization sample every 10 s of
// the last day, on SQLite in a temporary folder. Times Views::Usage over the whole history and
// over its last day, Views::Utilization for the last day (fine samples, 300 points) and
// Engine::WhatIfScenario for the last day.
//
//   history_bench [--jobs 100000] [--days 30]
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "api/engine.h"
#include "bench_args.h"

namespace {

using namespace tessera;
using Clock = std::chrono::steady_clock;
using api::Json;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

const char* kConfig = R"(
identities:
  - {name: admin, role: admin, token: admin-token-1}
groups: [{name: research}, {name: vision}, {name: speech}, {name: prod}]
profiles:
  - {name: card, gpus: 1, cpu: 1, memory: 1GiB, forms: [whole]}
queues:
  - {name: train, profile: card, groups: [research, vision, speech, prod]}
)";

void Die(const std::string& what, const Status& st) {
  std::fprintf(stderr, "%s: %s\n", what.c_str(), st.ToString().c_str());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t jobs = 100'000, days = 30;
  tessera::bench::CheckArgs(argc, argv, {"--jobs", "--days"});
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--jobs")) jobs = std::stoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--days")) days = std::stoll(argv[i + 1]);
  }
  const std::string dir = std::filesystem::temp_directory_path().string() +
                          "/tessera-history-bench-" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto config = api::ParseConfig(kConfig);
  if (!config.ok()) Die("config", config.status());
  const int64_t now = 1'800'000'000'000, span = days * 86'400'000, start = now - span;
  const char* groups[] = {"research", "vision", "speech", "prod"};

  auto t = Clock::now();
  int64_t events_written = 0;
  {
    auto store = store::Store::Open(dir + "/tessera.db");
    if (!store.ok()) Die("store", store.status());
    const std::string spec = Json{
        {"command", {"true"}}, {"env", Json::object()}, {"class", "batch"},
        {"gpus", 1},           {"gpu_milli", 1000},     {"gpu_memory_mib", 81920},
        {"cpu_milli", 1000},   {"memory_mib", 1024},    {"walltime_s", 0},
        {"name", ""}}.dump();
    constexpr int64_t kBatch = 20000;
    for (int64_t first = 1; first <= jobs; first += kBatch) {
      std::vector<store::Event> events;
      std::vector<store::JobRecord> recs;
      for (int64_t k = first; k < first + kBatch && k <= jobs; ++k) {
        const std::string id = "j-" + std::to_string(k);
        const std::string group = groups[k % 4];
        const int64_t submit = start + span * (k - 1) / jobs, placed = submit + 5'000,
                      end = placed + 3'600'000;
        store::JobRecord r;
        r.id = id;
        r.queue = "train";
        r.identity = "admin";
        r.group = group;
        r.state = "succeeded";
        r.spec = spec;
        r.placement =
            R"({"preemptions":0,"node":"n1","form":"whole","borrowed":false,"grants":[],"parts_done":[]})";
        r.submit_ms = submit;
        r.update_ms = end;
        r.exit_code = 0;
        recs.push_back(std::move(r));
        const std::string grant =
            R"({"node":"n1","form":"whole","grants":[{"node":"n1","device":)" +
            std::to_string(k % 8) +
            R"(,"compute":1000,"memory":81920,"cpu":1000,"host_memory":1024}],"borrowed":false,"admission":""})";
        events.push_back({0, submit, "admin", "job.submitted", id, "",
                          R"({"queue":"train","group":")" + group + "\"}"});
        events.push_back({0, placed, "engine", "job.placed", id, "", grant});
        events.push_back({0, placed + 1000, "agent:n1", "job.running", id, "", "{}"});
        if (k % 10 == 0) {
          events.push_back({0, placed + 600'000, "agent:n1", "job.idle", id, "",
                            "{\"since_ms\":" + std::to_string(placed + 1000) + "}"});
          events.push_back({0, placed + 1'200'000, "agent:n1", "job.active", id, "", "{}"});
        }
        events.push_back({0, end, "agent:n1", "job.succeeded", id, "", "{}"});
      }
      events_written += static_cast<int64_t>(events.size());
      Status st = (*store)->Commit(events, recs, nullptr);
      if (!st.ok()) Die("history", st);
    }
    // A day of fine samples (10 s), as the server writes them.
    Json by = {{"group", Json::object()},
               {"queue", {{"train", {{"gpu_milli", 8000}}}}},
               {"pool", Json::object()}};
    for (const char* g : groups)
      by["group"][g] = {{"gpu_milli", 2000}, {"gpu_memory_mib", 163840}, {"workers", 2}};
    const std::string sample = Json{
        {"gpu_milli_total", 8000},
        {"gpu_milli_allocated", 8000},
        {"workers", 8},
        {"by", by}}.dump();
    for (int64_t s = now - 86'400'000; s < now; s += 10'000) {
      Status st = (*store)->PutSample(10, {s, sample});
      if (!st.ok()) Die("samples", st);
    }
  }
  std::printf(
      "history: SQLite, %lld ended jobs over %lld days (%lld events), 8,640 samples: written in "
      "%.1f s; 2 cores\n",
      static_cast<long long>(jobs), static_cast<long long>(days),
      static_cast<long long>(events_written), Since(t));

  auto store = store::Store::Open(dir + "/tessera.db");
  if (!store.ok()) Die("store", store.status());
  auto engine = api::Engine::Open(*config, std::move(*store), dir, [&] { return now; });
  if (!engine.ok()) Die("engine", engine.status());
  api::Identity admin{"admin", api::Role::kAdmin, {}, "", {}, "nobody", "", 0};
  t = Clock::now();
  auto all = (*engine)->views().Usage(admin, {start, now, "group"});
  if (!all.ok()) Die("usage", all.status());
  std::printf("  usage by group over all %lld days: %.3f s (total %s GPU-hours)\n",
              static_cast<long long>(days), Since(t),
              (*all)["total"]["gpu_hours"].get<std::string>().c_str());
  t = Clock::now();
  auto day = (*engine)->views().Usage(admin, {now - 86'400'000, now, "form"});
  if (!day.ok()) Die("usage", day.status());
  std::printf(
      "  usage by form over the last day: %.3f s (total %s GPU-hours; the log is read from its "
      "start)\n",
      Since(t), (*day)["total"]["gpu_hours"].get<std::string>().c_str());
  t = Clock::now();
  api::Views::HistoryQuery q;
  q.since_ms = now - 86'400'000;
  q.until_ms = now;
  q.step_ms = 288'000;
  q.by = "group";
  auto util = (*engine)->views().Utilization(admin, q);
  if (!util.ok()) Die("utilization", util.status());
  std::printf("  utilization of the last day by group (8,640 samples -> %zu points): %.3f s\n",
              (*util)["samples"].size(), Since(t));
  t = Clock::now();
  auto w = (*engine)->views().WhatIfScenario(admin, now - 86'400'000, now);
  if (!w.ok()) Die("whatif", w.status());
  std::printf("  what-if scenario of the last day (%lld jobs): %.3f s\n",
              static_cast<long long>((*w)["jobs"].get<int64_t>()), Since(t));
  engine->reset();
  std::filesystem::remove_all(dir);
  return 0;
}
