// `tessera bench placement`: decisions per second and latency of the placement core on a
// synthetic cluster, with jobs drawn from a trace's job mix. Single-threaded.
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/choices.h"
#include "cli/commands.h"
#include "sched/scheduler.h"
#include "sim/openb.h"

#ifndef TESSERA_DEFAULT_PODS
#define TESSERA_DEFAULT_PODS "bench/traces/alibaba-openb/openb_pod_list_default.csv"
#endif

namespace tessera::cli {
namespace {

struct BenchOptions {
  int nodes = 10000;
  int gpus_per_node = 8;
  int jobs = 100000;
  std::string policy = std::string(sched::kDefaultPolicy);
  std::string pods = TESSERA_DEFAULT_PODS;
  uint64_t seed = 42;
  bool json = false;
  int models = 1;         // GPU models in the cluster, node i of model i % models
  int constrained = 0;    // percent of GPU jobs pinned to one model, drawn uniformly
  bool cpu_time = false;  // also time each decision by the thread's CPU clock
};

// A cluster shaped like the openb trace's 8-GPU nodes: 12 cores and 48 GiB of host memory per
// GPU; one model ("G2") or, heterogeneous, models M0..M{models-1} in turn.
std::vector<Node> SyntheticNodes(const BenchOptions& o) {
  std::vector<Node> nodes(static_cast<size_t>(o.nodes));
  for (int i = 0; i < o.nodes; ++i) {
    Node& n = nodes[static_cast<size_t>(i)];
    n.name = "node-" + std::to_string(i);
    n.cpu_milli = int64_t{12000} * o.gpus_per_node;
    n.memory_mib = int64_t{49152} * o.gpus_per_node;
    const std::string model = o.models == 1 ? "G2" : "M" + std::to_string(i % o.models);
    for (int d = 0; d < o.gpus_per_node; ++d) n.devices.push_back(Device{d, model, 0});
  }
  return nodes;
}

// The trace's job mix, GPU-model constraints dropped since the synthetic cluster has one model.
std::vector<sched::PlacementRequest> JobMix(const std::vector<sim::TracePod>& pods,
                                            int gpus_per_node) {
  std::vector<sched::PlacementRequest> mix;
  for (const auto& p : pods) {
    sched::PlacementRequest r;
    r.cpu_milli = p.cpu_milli;
    r.memory_mib = p.memory_mib;
    r.gpu_count = std::min(p.num_gpu, gpus_per_node);
    r.gpu_milli = p.num_gpu > 0 ? p.gpu_milli : 0;
    mix.push_back(r);
  }
  return mix;
}

// No one decision may take longer than this (issue 31): a decision that rebuilds the policy's
// whole index stalls every submission queued behind it.
constexpr double kMaxDecisionGoalUs = 5000;

struct BenchResult {
  double setup_s = 0;
  int64_t placed = 0;
  double total_s = 0;
  std::vector<double> sorted_us;  // decision latencies, ascending
  std::vector<double> cpu_us;     // with --cpu-time: each decision's CPU time, ascending
  double rate = 0;                // decisions per second
  double util = 0;                // GPU allocated at the end, percent
};

double ThreadCpuUs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

// Places each job in turn, timing every decision (and, with cpu_time, its CPU time: on a shared
// machine a decision's wall time includes other processes' turns on its core).
void TimeDecisions(sched::Scheduler* scheduler, const std::vector<sched::PlacementRequest>& jobs,
                   bool cpu_time, BenchResult* r) {
  std::vector<double> latency_us;
  latency_us.reserve(jobs.size());
  const auto start = std::chrono::steady_clock::now();
  for (const auto& j : jobs) {
    const double c0 = cpu_time ? ThreadCpuUs() : 0;
    const auto t0 = std::chrono::steady_clock::now();
    sched::PlacementResult res = scheduler->Place(j);
    const auto t1 = std::chrono::steady_clock::now();
    if (cpu_time) r->cpu_us.push_back(ThreadCpuUs() - c0);
    latency_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    r->placed += res.placed() ? 1 : 0;
  }
  std::sort(r->cpu_us.begin(), r->cpu_us.end());
  r->total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r->sorted_us = latency_us;
  std::sort(r->sorted_us.begin(), r->sorted_us.end());
  r->rate = static_cast<double>(jobs.size()) / r->total_s;
  r->util = 100.0 * static_cast<double>(scheduler->state().gpu_allocated()) /
            static_cast<double>(scheduler->state().gpu_capacity());
}

void PrintBench(const BenchOptions& o, const BenchResult& r) {
  const std::vector<double>& sorted = r.sorted_us;
  auto pct = [&](double p) {
    size_t k = static_cast<size_t>(p * static_cast<double>(sorted.size() - 1));
    return sorted[k];
  };
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  const double peak_mib = static_cast<double>(ru.ru_maxrss) / 1024.0;
  auto over = [](const std::vector<double>& us) {
    return static_cast<int64_t>(us.end() -
                                std::upper_bound(us.begin(), us.end(), kMaxDecisionGoalUs));
  };
  if (o.json) {
    nlohmann::json j = {
        {"policy", o.policy},
        {"nodes", o.nodes},
        {"gpus_per_node", o.gpus_per_node},
        {"jobs", o.jobs},
        {"models", o.models},
        {"constrained_pct", o.constrained},
        {"placed", r.placed},
        {"placements_per_second", r.rate},
        {"latency_us", {{"p50", pct(0.50)}, {"p99", pct(0.99)}, {"max", sorted.back()}}},
        {"max_goal_us", kMaxDecisionGoalUs},
        {"max_goal_met", sorted.back() <= kMaxDecisionGoalUs},
        {"over_goal", over(sorted)},
        {"seconds", r.total_s},
        {"setup_seconds", r.setup_s},
        {"gpu_allocated_pct", r.util},
        {"peak_rss_mib", peak_mib},
        {"threads", 1}};
    if (!r.cpu_us.empty()) {
      j["cpu_us"] = {
          {"p99", r.cpu_us[static_cast<size_t>(0.99 * static_cast<double>(r.cpu_us.size() - 1))]},
          {"max", r.cpu_us.back()}};
      j["over_goal_cpu"] = over(r.cpu_us);
    }
    std::cout << j.dump(2) << "\n";
  } else {
    std::printf(
        "placement benchmark: policy %s, %d nodes x %d GPUs of %d model(s), %d jobs from %s (%d%% "
        "of GPU jobs pinned to a model), seed %llu, 1 thread\n",
        o.policy.c_str(), o.nodes, o.gpus_per_node, o.models, o.jobs, o.pods.c_str(), o.constrained,
        static_cast<unsigned long long>(o.seed));
    std::printf("  decisions/s   %.0f  (%lld placed, %lld unschedulable; GPU allocated %.1f%%)\n",
                r.rate, static_cast<long long>(r.placed), static_cast<long long>(o.jobs - r.placed),
                r.util);
    std::printf("  latency (us)  p50 %.1f  p99 %.1f  max %.1f  (goal: max within %.0f: %s)\n",
                pct(0.50), pct(0.99), sorted.back(), kMaxDecisionGoalUs,
                sorted.back() <= kMaxDecisionGoalUs ? "met" : "NOT met");
    if (!r.cpu_us.empty()) {
      std::printf(
          "  on CPU (us)   p99 %.1f  max %.1f  (decisions over %.0f: %lld by the clock, %lld on "
          "CPU)\n",
          r.cpu_us[static_cast<size_t>(0.99 * static_cast<double>(r.cpu_us.size() - 1))],
          r.cpu_us.back(), kMaxDecisionGoalUs, static_cast<long long>(over(sorted)),
          static_cast<long long>(over(r.cpu_us)));
    }
    std::printf("  total %.2fs, setup %.2fs, peak RSS %.0f MiB\n", r.total_s, r.setup_s, peak_mib);
  }
}

int RunPlacementBench(const BenchOptions& o) {
  if (o.nodes <= 0 || o.jobs <= 0 || o.gpus_per_node <= 0 || o.gpus_per_node > sched::kMaxDevices) {
    std::cerr << "tessera bench: --nodes and --jobs must be positive and --gpus-per-node within 1.."
              << sched::kMaxDevices << "\n";
    return kExitBadInput;
  }
  if (o.models < 1 || o.models > 16 || o.constrained < 0 || o.constrained > 100) {
    std::cerr << "tessera bench: --models must be within 1..16 and --constrained within 0..100\n";
    return kExitBadInput;
  }
  auto pods = sim::ReadOpenbPods(o.pods);
  if (!pods.ok()) {
    std::cerr << "tessera bench: " << pods.status().message() << "\n";
    return kExitBadInput;
  }
  std::vector<Node> nodes = SyntheticNodes(o);
  auto state = sched::ClusterState::FromNodes(nodes);
  if (!state.ok()) {
    std::cerr << "tessera bench: " << state.status().message() << "\n";
    return kExitBadInput;
  }
  // Jobs drawn with replacement from the trace (its job mix).
  std::vector<sched::PlacementRequest> mix = JobMix(*pods, o.gpus_per_node);
  std::mt19937_64 rng(o.seed);
  std::vector<sched::PlacementRequest> jobs(static_cast<size_t>(o.jobs));
  for (auto& j : jobs) {
    j = mix[rng() % mix.size()];
    // A constrained job names one model (uniform: every model has the same capacity here).
    if (j.gpu_count > 0 && static_cast<int>(rng() % 100) < o.constrained) {
      const int id = state->model_id(
          o.models == 1 ? "G2" : "M" + std::to_string(rng() % static_cast<uint64_t>(o.models)));
      j.models = sched::ModelMask{1} << id;
    }
  }

  sched::PolicyConfig config;
  config.target_mix = sched::TypicalMix(mix);
  auto policy = sched::MakePolicy(o.policy, config);
  if (!policy.ok()) {
    std::cerr << "tessera bench: " << policy.status().message() << "\n";
    return kExitBadInput;
  }
  BenchResult r;
  const auto setup_start = std::chrono::steady_clock::now();
  sched::Scheduler scheduler(std::move(*state), std::move(*policy), o.seed);
  r.setup_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - setup_start).count();
  TimeDecisions(&scheduler, jobs, o.cpu_time, &r);
  PrintBench(o, r);
  return kExitOk;
}

}  // namespace

void RegisterBenchCommands(CLI::App& app, CommandContext& ctx) {
  auto* bench = CommandFamily(app, "bench", "Benchmarks of the engine's parts");
  auto o = std::make_shared<BenchOptions>();
  auto* placement =
      bench->add_subcommand("placement", "Placement decisions per second and latency");
  placement->add_option("--nodes", o->nodes, "nodes in the synthetic cluster (10000)");
  placement->add_option("--gpus-per-node", o->gpus_per_node, "GPUs per node (8)");
  placement->add_option("--jobs", o->jobs, "jobs to place (100000)");
  Choices(placement->add_option("--policy", o->policy, "placement policy (tessera)"), "policy",
          sched::PolicyNames());
  placement->add_option("--pods", o->pods, "trace whose job mix the jobs are drawn from");
  placement->add_option("--seed", o->seed, "seed for jobs and tie-breaks (42)");
  placement->add_option("--models", o->models,
                        "GPU models in the cluster, nodes taking them in turn (1)");
  placement->add_option("--constrained", o->constrained,
                        "percent of GPU jobs pinned to one model (0)");
  placement->add_flag(
      "--cpu-time", o->cpu_time,
      "also time each decision by the thread's CPU clock (two more clock reads a decision)");
  placement->add_flag("--json", o->json, "print one JSON object");
  placement->callback([o, &ctx] { ctx.exit_code = RunPlacementBench(*o); });
}

}  // namespace tessera::cli
