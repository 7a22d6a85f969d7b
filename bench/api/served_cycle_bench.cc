// The served engine against the bare cycle, on the same input (`tessera bench cycle`'s: 10,000
// nodes of 8 x H100-80GB, 100,000 pending jobs of whole cards, MIG partitions and shares).
//
//  1. Bare: quota::QuotaEngine, all jobs submitted, one RunCycle timed (after an empty one that
//     builds the placement policy's view of the cluster; the served engine gets the same).
//  2. Served: api::Engine over SQLite on disk (WAL, synchronous=FULL) in a temporary folder, the
//     nodes registered through RegisterNode, the jobs submitted through Submit (validated and
//     group-committed, `schedule_on_submit: false` so they wait), then one RunCycle timed: the
//     same cycle plus turning its decisions into job records, committing them in one
//     transaction and refreshing every waiting job's reason. Untimed in the ratio: the
//     dashboard's list of 500 jobs right after the cycle, and stopping the engine (the store's
//     upkeep).
//  3. Latency: a fresh served engine over the same nodes, `schedule_on_submit: true`; one second's
//     worth of untimed submissions first (the policy learns the workload mix), then paced
//     submitters at 1,000 submissions/s in all; the time from each submission's due time to its
//     reply, which carries the placement when the job was placed by the cycle after its commit.
//
//   served_cycle_bench [--nodes 10000] [--jobs 100000] [--rate 1000] [--seconds 5] [--threads 4]
//                      [--phases cycle,latency] [--placement tessera|bestfit|nextfit|...]
//                      [--warmup N (untimed submissions before the latency phase; default: --rate)]
//                      [--runs N (the cycle phase N times, each on fresh engines; prints every
//                       served/bare ratio and their median, the goal being the median within 1.5x)]
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

#include "api/engine.h"
#include "bench_args.h"
#include "partition/catalog.h"
#include "percentile.h"
#include "sim/scenario_bench.h"

namespace {

using tessera::bench::Percentile;

using namespace tessera;
using Clock = std::chrono::steady_clock;
using api::Json;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Minor page faults of the process so far: a cycle on a heap that must first grow pays one per
// new page, which on some machines (this project's VM) costs as much as the cycle's own work.
long PageFaults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Json Body(const quota::JobSpec& j) {
  Json b = {
      {"queue", j.queue}, {"group", j.group}, {"command", {"true"}}, {"walltime", j.walltime_s}};
  if (j.gpu_count) b["gpus"] = *j.gpu_count;
  if (j.gpu_memory_mib) b["gpu_memory"] = std::to_string(*j.gpu_memory_mib) + "MiB";
  return b;
}

struct Served {
  std::string dir;
  std::unique_ptr<api::Engine> engine;
  api::Identity admin{"admin", api::Role::kAdmin, {}, "", {}, "nobody", "", 0};
  double register_seconds = 0;
};

Served OpenServed(const sim::CycleBenchInput& in, bool schedule_on_submit,
                  const std::string& name) {
  Served s;
  s.dir = std::filesystem::temp_directory_path().string() + "/tessera-served-bench-" +
          std::to_string(getpid()) + "-" + name;
  std::filesystem::remove_all(s.dir);
  std::filesystem::create_directories(s.dir);
  api::EngineConfig c;
  c.policy = in.policy;
  c.schedule_on_submit = schedule_on_submit;
  c.heartbeat_timeout_ms = 24 * 3600 * 1000;
  for (const auto& q : in.policy.queues) {
    api::QueueRoute r;
    r.queue = q.name;
    c.routes.push_back(r);
  }
  auto store = store::Store::Open(s.dir + "/tessera.db");
  if (!store.ok()) {
    std::fprintf(stderr, "store: %s\n", store.status().ToString().c_str());
    std::exit(1);
  }
  auto e = api::Engine::Open(c, std::move(*store), s.dir, WallMs);
  if (!e.ok()) {
    std::fprintf(stderr, "engine: %s\n", e.status().ToString().c_str());
    std::exit(1);
  }
  s.engine = std::move(*e);
  const MiB mem = partition::Catalog::BuiltIn().Find("H100-80GB")->memory_mib;
  auto t = Clock::now();
  for (const quota::NodeSpec& n : in.nodes) {
    Json devs = Json::array();
    for (int i = 0; i < n.gpu_count; ++i) {
      devs.push_back({{"index", i},
                      {"model", n.gpu_model},
                      {"memory_mib", mem},
                      {"uuid", n.name + "-" + std::to_string(i)}});
    }
    auto r = s.engine->agents().RegisterNode(s.admin, {{"node", n.name},
                                                       {"pool", n.pool},
                                                       {"cpu_milli", n.cpu_milli},
                                                       {"memory_mib", n.memory_mib},
                                                       {"devices", devs}});
    if (!r.ok()) {
      std::fprintf(stderr, "register %s: %s\n", n.name.c_str(), r.status().ToString().c_str());
      std::exit(1);
    }
  }
  s.register_seconds = Since(t);
  // One cycle over the registered nodes before anything is timed: it builds the placement
  // policy's view of the cluster, which a running control plane has long had.
  (void)s.engine->RunCycle();
  return s;
}

// One bare cycle and one served cycle over the same input, each timed.
struct CycleRun {
  bool ok = false;
  double bare_s = 0, served_s = 0;
};

CycleRun RunCyclePhase(const sim::CycleBenchOptions& o, const sim::CycleBenchInput& in) {
  CycleRun run;
  ::sync();  // the earlier run's files written back first, so that none lands in this one's fsyncs
  // 1. Bare.
  auto created = quota::QuotaEngine::Create(in.policy, in.nodes, {});
  if (!created.ok()) {
    std::fprintf(stderr, "%s\n", created.status().ToString().c_str());
    return run;
  }
  (void)(*created)->RunCycle(0);  // as for the served engine: the policy's view built first
  for (const auto& j : in.jobs) (void)(*created)->Submit(j, 0);
  long faults = PageFaults();
  auto t = Clock::now();
  quota::CycleStats bare = (*created)->RunCycle(0);
  run.bare_s = Since(t);
  std::printf(
      "  bare cycle:   %d pending -> %d admitted in %.3f s = %.0f jobs admitted/s (%ld page "
      "faults)\n",
      bare.pending_at_start, bare.admitted, run.bare_s, bare.admitted / run.bare_s,
      PageFaults() - faults);
  created->reset();

  // 2. Served.
  Served s = OpenServed(in, false, "throughput");
  std::printf("  served: %d nodes registered in %.1f s\n", o.nodes, s.register_seconds);
  std::atomic<size_t> next{0};
  std::atomic<int> refused{0};
  t = Clock::now();
  std::vector<std::thread> pool;
  for (int k = 0; k < 8; ++k) {
    pool.emplace_back([&] {
      for (size_t i = next++; i < in.jobs.size(); i = next++) {
        api::Identity who{in.jobs[i].identity, api::Role::kAdmin, {}, "", {}, "nobody", "", 0};
        if (!s.engine->Submit(who, Body(in.jobs[i])).ok()) ++refused;
      }
    });
  }
  for (auto& th : pool) th.join();
  const double submit_s = Since(t);
  std::printf("  served: %d jobs submitted (8 threads, durable) in %.1f s = %.0f/s, %d refused\n",
              o.jobs, submit_s, o.jobs / submit_s, refused.load());
  faults = PageFaults();
  t = Clock::now();
  Status st = s.engine->RunCycle();
  run.served_s = Since(t);
  faults = PageFaults() - faults;
  // The dashboard's list right after the cycle (its jobs memory's, the rest the store's).
  t = Clock::now();
  auto listed = s.engine->views().ListJobs(s.admin, "", 500);
  std::printf("  served: the dashboard's list of 500 jobs right after the cycle in %.3f s (%s)\n",
              Since(t), listed.ok() ? "ok" : listed.status().ToString().c_str());
  auto placed = s.engine->views().ListJobs(s.admin, "placed", o.jobs + 1);
  const size_t admitted = placed.ok() ? (*placed)["jobs"].size() : 0;
  std::printf(
      "  served cycle: %zu admitted in %.3f s = %.0f jobs admitted/s (%s, %ld page faults), %.2fx "
      "the bare cycle's time; goal within 1.5x: %s\n",
      admitted, run.served_s, static_cast<double>(admitted) / run.served_s,
      st.ok() ? "committed" : st.ToString().c_str(), faults, run.served_s / run.bare_s,
      run.served_s <= 1.5 * run.bare_s ? "met" : "NOT met");
  Status inv = s.engine->CheckInvariants();
  std::printf("  served invariants: %s\n", inv.ok() ? "ok" : inv.ToString().c_str());
  // Untimed above: the store's upkeep once the writer is idle, which stopping the engine runs
  // (SQLite: the cycle's job progress folded into the job rows, the log copied into the file).
  t = Clock::now();
  s.engine.reset();
  std::printf("  served: engine stopped in %.3f s (the store's upkeep after the cycle)\n",
              Since(t));
  std::filesystem::remove_all(s.dir);
  run.ok = st.ok() && inv.ok();
  return run;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty()      ? 0
         : v.size() % 2 ? v[v.size() / 2]
                        : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  sim::CycleBenchOptions o;
  int rate = 1000, seconds = 5, threads = 4, warmup = -1, runs = 1;
  std::string phases = "cycle,latency";
  std::string placement = "tessera";
  tessera::bench::CheckArgs(argc, argv,
                            {"--nodes", "--jobs", "--rate", "--seconds", "--threads", "--warmup",
                             "--phases", "--runs", "--placement"});
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--nodes")) o.nodes = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--jobs")) o.jobs = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--rate")) rate = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--seconds")) seconds = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--warmup")) warmup = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--phases")) phases = argv[i + 1];
    if (!std::strcmp(argv[i], "--runs")) runs = std::max(1, std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--placement")) placement = argv[i + 1];
  }
  sim::CycleBenchInput in = sim::MakeCycleBenchInput(o);
  in.policy.placement = placement;
  std::printf(
      "served engine vs bare cycle: %d nodes x 8 H100-80GB, %d pending jobs (tessera bench cycle's "
      "input, seed %llu), placement %s, %u cores, SQLite on %s, %s (as tessera serve)\n",
      o.nodes, o.jobs, static_cast<unsigned long long>(o.seed), placement.c_str(),
      std::thread::hardware_concurrency(), std::filesystem::temp_directory_path().c_str(),
      TESSERA_MALLOC);

  // 1 and 2, --runs times: each run a fresh bare engine and a fresh served one.
  if (phases.find("cycle") != std::string::npos) {
    std::vector<double> ratios, bare_times, served_times;
    for (int run = 1; run <= runs; ++run) {
      if (runs > 1) std::printf(" run %d of %d\n", run, runs);
      const CycleRun r = RunCyclePhase(o, in);
      if (!r.ok) return 1;
      ratios.push_back(r.served_s / r.bare_s);
      bare_times.push_back(r.bare_s);
      served_times.push_back(r.served_s);
    }
    if (runs > 1) {
      std::sort(ratios.begin(), ratios.end());
      std::printf("  %d runs: served/bare", runs);
      for (double x : ratios) std::printf(" %.2f", x);
      std::printf(
          " (sorted); median %.2fx (bare median %.3f s, served median %.3f s); goal: the median "
          "within 1.5x: %s\n",
          Median(ratios), Median(bare_times), Median(served_times),
          Median(ratios) <= 1.5 ? "met" : "NOT met");
    }
  }

  // 3. Submit-to-placed latency at a steady rate. The throughput phase's files are flushed
  // first, so that their write-back does not land in this phase's fsyncs.
  if (phases.find("latency") != std::string::npos) {
    ::sync();
    std::this_thread::sleep_for(std::chrono::seconds(2));
    Served s = OpenServed(in, true, "latency");
    const int total = rate * seconds;
    // Warm-up, untimed: as many submissions as one second brings, so that the policy has learned
    // the workload mix (tessera rebuilds its index while the mix it learned still moves).
    if (warmup < 0) warmup = rate;
    for (int i = 0; i < warmup; ++i) {
      quota::JobSpec w = in.NextJob();
      (void)s.engine->Submit(
          api::Identity{w.identity, api::Role::kAdmin, {}, "", {}, "nobody", "", 0}, Body(w));
    }
    std::vector<quota::JobSpec> jobs;
    for (int i = 0; i < total; ++i) jobs.push_back(in.NextJob());
    std::mutex mu;
    std::vector<double> placed_ms, pending_ms;
    std::atomic<int> failed{0};
    const auto start = Clock::now();
    std::vector<std::thread> pool;
    for (int k = 0; k < threads; ++k) {
      pool.emplace_back([&, k] {
        for (int i = k; i < total; i += threads) {
          // Open loop: submission i is due at i / rate seconds, whatever the earlier ones took.
          const auto due = start + std::chrono::microseconds(static_cast<int64_t>(1e6 * i / rate));
          std::this_thread::sleep_until(due);
          api::Identity who{jobs[i].identity, api::Role::kAdmin, {}, "", {}, "nobody", "", 0};
          auto r = s.engine->Submit(who, Body(jobs[i]));
          const double ms = 1000 * std::chrono::duration<double>(Clock::now() - due).count();
          std::lock_guard<std::mutex> lock(mu);
          if (!r.ok()) {
            ++failed;
          } else if ((*r)["state"] == "placed") {
            placed_ms.push_back(ms);
          } else {
            pending_ms.push_back(ms);
          }
        }
      });
    }
    for (auto& th : pool) th.join();
    const double took = Since(start);
    std::printf(
        "  latency: after %d untimed warm-up submissions, %d submissions at %d/s offered (%d "
        "threads, open loop) "
        "over %.1f s: %zu placed at once, %zu left pending, %d failed\n",
        warmup, total, rate, threads, took, placed_ms.size(), pending_ms.size(), failed.load());
    std::printf(
        "  submit-to-placed (from the submission's due time): p50 %.1f ms, p99 %.1f ms, max %.1f "
        "ms; "
        "goal p99 under 100 ms: %s\n",
        Percentile(placed_ms, 50), Percentile(placed_ms, 99), Percentile(placed_ms, 100),
        Percentile(placed_ms, 99) < 100 ? "met" : "NOT met");
    s.engine.reset();
    std::filesystem::remove_all(s.dir);
  }
  return 0;
}
