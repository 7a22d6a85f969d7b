// `tessera sim scenario FILE.yaml [--json] [--plot DIR]` and `tessera bench cycle`.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/scenario_commands.h"
#include "model/duration.h"
#include "sim/scenario.h"
#include "sim/scenario_bench.h"
#include "sim/swap_model.h"

namespace tessera::cli {
namespace {

struct ScenarioOptions {
  std::string file;
  bool json = false;
  bool events = false;
  std::string plot;
};

int RunScenarioCommand(const ScenarioOptions& o) {
  auto scenario = sim::LoadScenario(o.file);
  if (!scenario.ok()) {
    std::cerr << "tessera sim scenario: " << scenario.status().message() << "\n";
    return kExitBadInput;
  }
  std::vector<quota::Event> events;
  sim::RunOptions run_options;
  if (o.events) run_options.events = &events;
  auto report = sim::RunScenario(*scenario, run_options);
  if (!report.ok()) {
    std::cerr << "tessera sim scenario: " << report.status().message() << "\n";
    return kExitBadInput;
  }
  if (!o.plot.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.plot, ec);
    std::vector<const sim::RunReport*> runs{&report->run};
    if (report->baseline) runs.push_back(&*report->baseline);
    for (const sim::RunReport* r : runs) {
      std::string path = o.plot + "/" + scenario->name + "-" + r->name + "-gpu-held.svg";
      std::ofstream out(path, std::ios::binary);
      out << sim::ReportSvg(*r);
      if (!out) {
        std::cerr << "tessera sim scenario: cannot write " << path << "\n";
        return kExitBadInput;
      }
    }
  }
  for (const quota::Event& e : events) {
    std::cout << "t=" << e.time << "s " << quota::EventKindName(e.kind) << " " << e.job << " "
              << e.detail << "\n";
  }
  std::cout << (o.json ? sim::ReportJson(*report) + "\n" : sim::ReportText(*report));
  bool violated = !report->run.invariant_violations.empty() ||
                  (report->baseline && !report->baseline->invariant_violations.empty());
  return violated ? kExitUnsatisfiable : kExitOk;
}

struct CycleBenchCli {
  sim::CycleBenchOptions options;
  bool json = false;
};

int RunCycleBenchCommand(const CycleBenchCli& c) {
  sim::CycleBenchResult r = sim::RunCycleBench(c.options);
  if (c.json) {
    nlohmann::json j = {{"nodes", r.nodes},
                        {"gpus", r.gpus},
                        {"pending", r.pending},
                        {"admitted", r.admitted},
                        {"preempted", r.preempted},
                        {"repartitioned", r.repartitioned},
                        {"cycle_seconds", r.cycle_seconds},
                        {"cycle_cpu_seconds", r.cycle_cpu_seconds},
                        {"second_cycle_cpu_seconds", r.second_cycle_cpu_seconds},
                        {"admitted_per_second", r.admitted_per_second},
                        {"second_pending", r.second_pending},
                        {"second_admitted", r.second_admitted},
                        {"second_cycle_seconds", r.second_cycle_seconds},
                        {"setup_seconds", r.setup_seconds},
                        {"models", c.options.models},
                        {"invariants", r.invariants}};
    std::cout << j.dump(2) << "\n";
  } else {
    std::printf(
        "scheduling cycle: %d nodes x 8 %s (%d GPUs; pools 50%% whole, 20%% "
        "partition, 30%% share), 8 groups%s, seed %llu, single thread\n",
        r.nodes,
        c.options.models == 4 ? "GPUs of 4 models (H100-80GB, H200-141GB, A100-80GB, A100-40GB)"
                              : "H100-80GB",
        r.gpus, c.options.models == 4 ? " with quotas per model" : "",
        static_cast<unsigned long long>(c.options.seed));
    std::printf(
        "  cycle 1: %d pending -> %d admitted in %.3f s = %.0f jobs admitted/s "
        "(%d preempted, %d repartitions); thread CPU %.3f s\n",
        r.pending, r.admitted, r.cycle_seconds, r.admitted_per_second, r.preempted, r.repartitioned,
        r.cycle_cpu_seconds);
    std::printf(
        "  cycle 2 (5%% finished, as many arrived): %d pending -> %d admitted in %.3f s; thread "
        "CPU %.3f s\n",
        r.second_pending, r.second_admitted, r.second_cycle_seconds, r.second_cycle_cpu_seconds);
    std::printf("  setup %.2f s; invariants after both cycles: %s\n", r.setup_seconds,
                r.invariants.c_str());
  }
  return r.invariants == "ok" ? kExitOk : kExitUnsatisfiable;
}

}  // namespace

void RegisterScenarioCommands(CLI::App& app, CommandContext& ctx) {
  CLI::App* sim = CommandFamily(app, "sim", "Simulate scheduling");
  CLI::App* bench = CommandFamily(app, "bench", "Benchmarks of the engine's parts");

  auto o = std::make_shared<ScenarioOptions>();
  auto* scenario = sim->add_subcommand(
      "scenario", "Run a YAML scenario (cluster, policy, workload) through the quota engine");
  scenario->add_option("file", o->file, "scenario YAML")->required();
  scenario->add_flag("--json", o->json, "print one JSON object");
  scenario->add_flag("--events", o->events,
                     "print every event of the run first (time, kind, job, why)");
  scenario->add_option("--plot", o->plot, "write SVG charts of GPU held per group to DIR");
  scenario->callback([o, &ctx] { ctx.exit_code = RunScenarioCommand(*o); });

  // `tessera sim swap`: the swap model (sim/swap_model.h) over an estate of interactive sessions.
  struct SwapCli {
    sim::SwapEstate e;
    int64_t cap_min_gib = 8, cap_max_gib = 16, card_gib = 80, host_ram_gib = 1024;
    std::string burst = "2m", duration = "24h", idle = "30s", slice = "0s";
  };
  auto w = std::make_shared<SwapCli>();
  auto* swap = sim->add_subcommand(
      "swap",
      "Interactive sessions on cards with and without swapping: cards needed, time-to-resume");
  swap->add_option("--sessions", w->e.sessions, "sessions (50)");
  swap->add_option("--cap-min", w->cap_min_gib, "smallest cap, GiB (8)");
  swap->add_option("--cap-max", w->cap_max_gib, "largest cap, GiB (16)");
  swap->add_option("--card-memory", w->card_gib, "device memory, GiB (80)");
  swap->add_option("--active", w->e.active_percent, "percent of time each session is active (20)");
  swap->add_option("--burst", w->burst, "mean active period (2m)");
  swap->add_option("--overcommit", w->e.overcommit_percent,
                   "caps per card with swapping, percent of its memory (200)");
  swap->add_option("--host-mbps", w->e.host_mbps, "host link MB/s (50000: PCIe Gen5 x16)");
  swap->add_option("--disk-mbps", w->e.disk_mbps, "disk tier MB/s (5000)");
  swap->add_option("--host-ram", w->host_ram_gib,
                   "host RAM for swapped bytes per card, GiB (1024)");
  swap->add_option("--duration", w->duration, "simulated time (24h)");
  swap->add_option(
      "--swap-idle", w->idle,
      "idle this long, a session is swapped out ahead of need (30s; the agent's --swap-idle)");
  swap->add_option("--swap-slice", w->slice,
                   "0s: a wake waits for active sessions; else it may take the place of one active "
                   "this long (the agent's --swap-slice)");
  swap->add_flag("--lazy", w->e.lazy, "swap out only when room is needed, never ahead of need");
  swap->add_option("--seed", w->e.seed, "seed (1)");
  swap->callback([w, &ctx] {
    // Durations in the one grammar (model/duration.h), in milliseconds: "500ms" is half a second.
    std::pair<const char*, std::string*> flags[] = {{"--burst", &w->burst},
                                                    {"--duration", &w->duration},
                                                    {"--swap-idle", &w->idle},
                                                    {"--swap-slice", &w->slice}};
    int64_t ms[4] = {};
    for (int i = 0; i < 4; ++i) {
      auto d = ParseDurationMs(*flags[i].second);
      if (!d.ok()) {
        std::cerr << "tessera sim swap: " << flags[i].first << ": " << d.status().message() << "\n";
        ctx.exit_code = 2;
        return;
      }
      ms[i] = *d;
    }
    w->e.burst_us = ms[0] * 1000;
    w->e.duration_us = ms[1] * 1000;
    w->e.idle_us = ms[2] * 1000;
    w->e.slice_us = ms[3] * 1000;
    w->e.cap_min_mib = w->cap_min_gib * 1024;
    w->e.cap_max_mib = w->cap_max_gib * 1024;
    w->e.card_memory_mib = w->card_gib * 1024;
    w->e.host_ram_mib = w->host_ram_gib * 1024;
    auto report = sim::RunSwapEstate(w->e);
    if (!report.ok()) {
      std::cerr << "tessera sim swap: " << report.status().message() << "\n";
      ctx.exit_code = 2;
      return;
    }
    std::cout << report->Text(w->e);
    ctx.exit_code = 0;
  });

  auto c = std::make_shared<CycleBenchCli>();
  auto* cycle = bench->add_subcommand(
      "cycle", "One quota-engine scheduling cycle over a large backlog: time and jobs admitted/s");
  cycle->add_option("--nodes", c->options.nodes, "nodes of 8 GPUs (10000)");
  cycle->add_option("--jobs", c->options.jobs, "pending jobs (100000)");
  cycle->add_option("--seed", c->options.seed, "seed of the job mix (42)");
  cycle
      ->add_option("--models", c->options.models,
                   "GPU models in the fleet: 1, or 4 with quotas per model (1)")
      ->check(CLI::IsMember({1, 4}));
  cycle->add_flag("--json", c->json, "print one JSON object");
  cycle->callback([c, &ctx] { ctx.exit_code = RunCycleBenchCommand(*c); });
}

}  // namespace tessera::cli
