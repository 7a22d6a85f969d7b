// Start-up of the served engine over a store with a long history: --past ended jobs (each with
// its job.submitted and job.succeeded events) and --live pending ones, on SQLite in a temporary
// folder. Times Engine::Open (what `tessera serve` does before it listens), reports the jobs it
// holds in memory and the process's RSS, and, for comparison, how long reading every job record
// takes (what start-up cost before only live jobs were loaded).
//
//   startup_bench [--past 1000000] [--live 1000] [--nodes 100]
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
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

int64_t RssMiB() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) / 1024;
  }
  return -1;
}

const char* kConfig = R"(
identities:
  - {name: admin, role: admin, token: admin-token-1}
groups: [{name: research}]
profiles:
  - {name: card, gpus: 1, cpu: 1, memory: 1GiB, forms: [whole]}
queues:
  - {name: train, profile: card, groups: [research]}
)";

void Die(const std::string& what, const Status& st) {
  std::fprintf(stderr, "%s: %s\n", what.c_str(), st.ToString().c_str());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t past = 1'000'000, live = 1000;
  int nodes = 100;
  tessera::bench::CheckArgs(argc, argv, {"--past", "--live", "--nodes"});
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--past")) past = std::stoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--live")) live = std::stoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--nodes")) nodes = std::stoi(argv[i + 1]);
  }
  const std::string dir = std::filesystem::temp_directory_path().string() +
                          "/tessera-startup-bench-" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto config = api::ParseConfig(kConfig);
  if (!config.ok()) Die("config", config.status());

  // The history, written straight into the store in large transactions.
  auto t = Clock::now();
  {
    auto store = store::Store::Open(dir + "/tessera.db");
    if (!store.ok()) Die("store", store.status());
    for (int n = 0; n < nodes; ++n) {
      Json devs = Json::array();
      for (int d = 0; d < 8; ++d) {
        devs.push_back({{"index", d},
                        {"model", "H100-80GB"},
                        {"memory_mib", 81920},
                        {"uuid", "g" + std::to_string(n) + "-" + std::to_string(d)}});
      }
      Json inv = {{"node", "n" + std::to_string(n)},
                  {"pool", "default"},
                  {"cpu_milli", 128000},
                  {"memory_mib", 1 << 20},
                  {"devices", devs}};
      Status st = (*store)->PutSetting("node/n" + std::to_string(n), inv.dump());
      if (!st.ok()) Die("node", st);
    }
    const std::string spec = Json{
        {"command", {"true"}}, {"env", Json::object()}, {"class", "batch"},
        {"gpus", 1},           {"gpu_milli", 1000},     {"gpu_memory_mib", 81920},
        {"cpu_milli", 1000},   {"memory_mib", 1024},    {"walltime_s", 0},
        {"name", ""}}.dump();
    const int64_t total = past + live;
    constexpr int64_t kBatch = 20000;
    for (int64_t first = 1; first <= total; first += kBatch) {
      std::vector<store::Event> events;
      std::vector<store::JobRecord> jobs;
      for (int64_t k = first; k < first + kBatch && k <= total; ++k) {
        store::JobRecord r;
        r.id = "j-" + std::to_string(k);
        r.queue = "train";
        r.identity = "admin";
        r.group = "research";
        const bool ended = k <= past;
        r.state = ended ? "succeeded" : "pending";
        r.spec = spec;
        r.placement =
            ended
                ? R"({"preemptions":0,"node":"n1","form":"whole","borrowed":false,"grants":[],"parts_done":[]})"
                : R"({"preemptions":0})";
        r.submit_ms = 1'700'000'000'000 + k;
        r.update_ms = r.submit_ms + 1000;
        if (ended) r.exit_code = 0;
        jobs.push_back(std::move(r));
        events.push_back({0, 1'700'000'000'000 + k, "admin", "job.submitted",
                          "j-" + std::to_string(k), "", "{}"});
        if (ended)
          events.push_back({0, 1'700'000'001'000 + k, "agent:n1", "job.succeeded",
                            "j-" + std::to_string(k), "", "{}"});
      }
      Status st = (*store)->Commit(events, jobs, nullptr);
      if (!st.ok()) Die("history", st);
    }
  }
  const double wrote = Since(t);
  std::uintmax_t bytes = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    if (f.is_regular_file()) bytes += f.file_size();
  }
  std::printf(
      "start-up: SQLite store with %lld ended jobs (%lld events) + %lld live, %d nodes of 8 GPUs: "
      "%.0f MiB, "
      "written in %.1f s; 2 cores\n",
      static_cast<long long>(past), static_cast<long long>(2 * past + live),
      static_cast<long long>(live), nodes, static_cast<double>(bytes) / (1 << 20), wrote);

  const int64_t rss0 = RssMiB();
  t = Clock::now();
  auto store = store::Store::Open(dir + "/tessera.db");
  if (!store.ok()) Die("store", store.status());
  auto engine =
      api::Engine::Open(*config, std::move(*store), dir, [] { return int64_t{1'800'000'000'000}; });
  if (!engine.ok()) Die("engine", engine.status());
  const double open_s = Since(t);
  const Json health = (*engine)->views().Health();
  std::printf(
      "  Engine::Open (what tessera serve does before it listens): %.3f s, %lld jobs in memory, "
      "RSS %lld MiB "
      "(%lld MiB before)\n",
      open_s, static_cast<long long>(health["jobs_in_memory"].get<int64_t>()),
      static_cast<long long>(RssMiB()), static_cast<long long>(rss0));
  api::Identity admin{"admin", api::Role::kAdmin, {}, "", {}, "nobody", "", 0};
  t = Clock::now();
  auto oldest = (*engine)->views().GetJob(admin, "j-1");
  const double get_ms = 1000 * Since(t);
  t = Clock::now();
  auto page = (*engine)->views().ListJobs(admin, "succeeded", 100);
  const double list_ms = 1000 * Since(t);
  std::printf("  an ended job from the store: %.2f ms (%s); the newest 100 ended: %.2f ms (%zu)\n",
              get_ms,
              oldest.ok() ? (*oldest)["state"].get<std::string>().c_str()
                          : oldest.status().ToString().c_str(),
              list_ms, page.ok() ? (*page)["jobs"].size() : 0);
  auto next = (*engine)->Submit(admin, {{"queue", "train"}, {"command", {"true"}}});
  std::printf(
      "  the next submission is %s (numbering continues after the store's highest id)\n",
      next.ok() ? (*next)["id"].get<std::string>().c_str() : next.status().ToString().c_str());
  engine->reset();
  // For comparison: every record read back, as start-up did before it loaded live jobs only.
  auto again = store::Store::Open(dir + "/tessera.db");
  if (!again.ok()) Die("store", again.status());
  t = Clock::now();
  auto all = (*again)->LoadJobs();
  std::printf("  for comparison, reading all %zu job records: %.3f s\n", all.ok() ? all->size() : 0,
              Since(t));
  again->reset();
  std::filesystem::remove_all(dir);
  return 0;
}
