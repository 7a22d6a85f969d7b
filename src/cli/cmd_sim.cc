// `tessera sim openb`: replay an Alibaba openb trace under the FGD paper's protocol.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/choices.h"
#include "cli/commands.h"
#include "cli/table.h"
#include "model/quantity.h"
#include "sched/policy.h"
#include "sim/openb.h"
#include "sim/replay.h"
#include "sim/report.h"

namespace tessera::cli {
namespace {

struct SimOptions {
  std::string nodes;
  std::string pods;
  std::string policies = std::string(sched::kDefaultPolicy);
  std::string seeds = "42-51";
  std::string tune = "1.3";
  bool json = false;
  std::string csv;
  std::string plot;
  int threads = 0;
  bool timed = false;
  int64_t compress = 1;
};

std::string TraceName(const std::string& path) {
  std::string base = path.substr(path.find_last_of('/') + 1);
  if (base.size() > 4 && base.substr(base.size() - 4) == ".csv") base.resize(base.size() - 4);
  return base;
}

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t comma = s.find(',', start);
    out.push_back(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

bool WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  return static_cast<bool>(out);
}

// The validated inputs of an openb run.
struct OpenbInput {
  std::vector<uint64_t> seeds;
  int64_t tune_milli = 0;
  std::vector<std::string> policies;
  std::vector<Node> nodes;
  std::vector<sim::TracePod> pods;
  std::string trace;
};

bool KnownPolicies(const std::vector<std::string>& policies) {
  for (const std::string& p : policies) {
    const auto& names = sched::PolicyNames();
    if (std::find(names.begin(), names.end(), p) == names.end()) {
      std::cerr << "tessera sim: " << UnknownChoice("policy", p, names) << "\n";
      return false;
    }
  }
  return true;
}

// False (after printing why) when an option or a trace file is bad.
bool LoadOpenbInput(const SimOptions& o, OpenbInput* in) {
  auto seeds = sim::ParseSeeds(o.seeds);
  if (!seeds.ok()) {
    std::cerr << "tessera sim: " << seeds.status().message() << "\n";
    return false;
  }
  in->seeds = std::move(*seeds);
  auto tune = ParseMilli(o.tune);
  if (!tune.ok() || *tune <= 0) {
    std::cerr << "tessera sim: bad --tune '" << o.tune << "' (a positive factor such as 1.3)\n";
    return false;
  }
  in->tune_milli = *tune;
  in->policies = SplitList(o.policies);
  if (!KnownPolicies(in->policies)) return false;
  auto nodes = sim::ReadOpenbNodes(o.nodes);
  if (!nodes.ok()) {
    std::cerr << "tessera sim: " << nodes.status().message() << "\n";
    return false;
  }
  in->nodes = std::move(*nodes);
  auto pods = sim::ReadOpenbPods(o.pods);
  if (!pods.ok()) {
    std::cerr << "tessera sim: " << pods.status().message() << "\n";
    return false;
  }
  in->pods = std::move(*pods);
  in->trace = TraceName(o.pods);
  return true;
}

nlohmann::json TimedJson(const std::string& p, const std::string& trace,
                         const sim::TimedReport& r) {
  return {{"policy", p},
          {"trace", trace},
          {"pods", r.pods},
          {"started", r.started},
          {"never_schedulable", r.never_schedulable},
          {"queued", r.queued},
          {"wait_s",
           {{"mean", r.wait_mean_s},
            {"p50", r.wait_p50_s},
            {"p99", r.wait_p99_s},
            {"max", r.wait_max_s}}},
          {"gpu_allocated_pct",
           {{"mean", r.gpu_allocated_mean_pct}, {"peak", r.gpu_allocated_peak_pct}}},
          {"makespan_s", r.makespan_s}};
}

// --timed: each policy replays the trace on its own clock with the first seed.
int RunOpenbTimed(const SimOptions& o, const OpenbInput& in) {
  nlohmann::json all = nlohmann::json::array();
  if (!o.json) {
    std::printf(
        "trace %s on its own clock (arrivals at creation_time, held for deletion - creation, "
        "queued when they do not fit), arrivals compressed %lldx, seed %llu\n",
        in.trace.c_str(), static_cast<long long>(o.compress),
        static_cast<unsigned long long>(in.seeds[0]));
    std::printf("%-16s %7s %7s %7s %7s %10s %10s %10s %9s %9s\n", "policy", "pods", "started",
                "never", "queued", "wait mean", "wait p99", "wait max", "GPU mean", "GPU peak");
  }
  for (const std::string& p : in.policies) {
    auto r = sim::ReplayOpenbTimed(in.nodes, in.pods, p, in.seeds[0], o.compress);
    if (!r.ok()) {
      std::cerr << "tessera sim: " << r.status().message() << "\n";
      return kExitBadInput;
    }
    if (o.json) {
      all.push_back(TimedJson(p, in.trace, *r));
    } else {
      std::printf("%-16s %7lld %7lld %7lld %7lld %9.0fs %9.0fs %9.0fs %8.1f%% %8.1f%%\n", p.c_str(),
                  static_cast<long long>(r->pods), static_cast<long long>(r->started),
                  static_cast<long long>(r->never_schedulable), static_cast<long long>(r->queued),
                  r->wait_mean_s, r->wait_p99_s, r->wait_max_s, r->gpu_allocated_mean_pct,
                  r->gpu_allocated_peak_pct);
    }
  }
  if (o.json) std::cout << (all.size() == 1 ? all[0].dump(2) : all.dump(2)) << "\n";
  return kExitOk;
}

// One seed sweep per policy; false (after printing why) when one fails.
bool SweepPolicies(const SimOptions& o, const OpenbInput& in, std::vector<sim::SeedSweep>* sweeps) {
  int threads = o.threads > 0 ? o.threads
                              : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

  // Progress on stderr once a run has taken more than two seconds.
  const auto start = std::chrono::steady_clock::now();
  const std::vector<std::string>& policies = in.policies;
  for (size_t i = 0; i < policies.size(); ++i) {
    auto progress = [&](int done, int total) {
      double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (t < 2.0) return;
      std::fprintf(stderr, "\r[sim %s] policy %zu/%zu %-14s seeds %d/%d  %.0fs   ",
                   in.trace.c_str(), i + 1, policies.size(), policies[i].c_str(), done, total, t);
      std::fflush(stderr);
    };
    auto sweep =
        sim::SweepSeeds(in.nodes, in.pods, policies[i], in.seeds, in.tune_milli, threads, progress);
    if (!sweep.ok()) {
      std::cerr << "\ntessera sim: " << sweep.status().message() << "\n";
      return false;
    }
    sweeps->push_back(std::move(*sweep));
  }
  if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >= 2.0) {
    std::fprintf(stderr, "\n");
  }
  return true;
}

nlohmann::json SweepJson(const sim::SeedSweep& s, const std::string& trace) {
  nlohmann::json j;
  j["policy"] = s.policy;
  j["trace"] = trace;
  j["seeds"] = s.seeds;
  j["seconds"] = s.seconds;
  nlohmann::json u;
  for (int p : sim::kReportPoints) {
    const auto& st = s.unallocated[p];
    u[std::to_string(p)] = {{"mean", st.mean}, {"median", st.median}, {"sd", st.sd}};
  }
  j["unallocated_gpu_pct"] = u;
  int64_t dropped = 0, pods_total = 0;
  for (const auto& c : s.curves) {
    dropped += c.dropped;
    pods_total += c.pods;
  }
  j["pods"] = pods_total;
  j["dropped"] = dropped;
  return j;
}

// The report on stdout, then the --csv and --plot files.
int WriteSweeps(const SimOptions& o, const std::string& trace,
                const std::vector<sim::SeedSweep>& sweeps) {
  if (o.json) {
    nlohmann::json all = nlohmann::json::array();
    for (const auto& s : sweeps) all.push_back(SweepJson(s, trace));
    std::cout << (all.size() == 1 ? all[0].dump(2) : all.dump(2)) << "\n";
  } else {
    std::cout << sim::FormatTable(trace, sweeps);
  }
  if (!o.csv.empty() && !WriteFile(o.csv, sim::FormatCsv(trace, sweeps))) {
    std::cerr << "tessera sim: cannot write '" << o.csv << "'\n";
    return kExitBadInput;
  }
  if (!o.plot.empty() &&
      !WriteFile(o.plot, sim::RenderSvg("Unallocated GPU vs arrived workload: " + trace, sweeps))) {
    std::cerr << "tessera sim: cannot write '" << o.plot << "'\n";
    return kExitBadInput;
  }
  return kExitOk;
}

// Whether `path` could be written now: its directory exists and takes files, and a file already
// there may be replaced. Checked before a replay, which may take minutes.
bool Writable(const std::string& path) {
  const std::filesystem::path p(path);
  const std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
  // A file there already is written in place (/dev/stdout; a file in a read-only directory).
  if (access(path.c_str(), F_OK) == 0) return access(path.c_str(), W_OK) == 0;
  return access(dir.c_str(), W_OK) == 0;
}

int RunOpenb(const SimOptions& o) {
  for (const std::string* out : {&o.csv, &o.plot}) {
    if (!out->empty() && !Writable(*out)) {
      std::cerr << "tessera sim: cannot write '" << *out << "'\n";
      return kExitBadInput;
    }
  }
  OpenbInput in;
  if (!LoadOpenbInput(o, &in)) return kExitBadInput;
  if (o.timed) return RunOpenbTimed(o, in);
  std::vector<sim::SeedSweep> sweeps;
  if (!SweepPolicies(o, in, &sweeps)) return kExitBadInput;
  return WriteSweeps(o, in.trace, sweeps);
}

}  // namespace

void RegisterSimCommands(CLI::App& app, CommandContext& ctx) {
  auto* sim = CommandFamily(app, "sim", "Simulate placement on recorded traces");
  auto opts = std::make_shared<SimOptions>();
  auto* openb =
      sim->add_subcommand("openb", "Replay an Alibaba openb trace under the FGD paper's protocol");
  openb->add_option("--nodes", opts->nodes, "node list CSV (sn,cpu_milli,memory_mib,gpu,model)")
      ->required();
  openb->add_option("--pods", opts->pods, "pod list CSV")->required();
  Choices(openb->add_option("--policy", opts->policies,
                            "policy name, or several separated by commas (default: tessera)"),
          "policy", sched::PolicyNames(), /*list=*/true);
  openb->add_option("--seeds", opts->seeds, "seeds, e.g. 42-51 or 42,43 (default 42-51)");
  openb->add_option("--tune", opts->tune, "tune the workload to this factor of GPU capacity (1.3)");
  openb->add_flag("--json", opts->json, "print one JSON object (an array for several policies)");
  openb->add_option("--csv", opts->csv, "write the whole curve (0..130%) as CSV");
  openb->add_option("--plot", opts->plot, "write an SVG chart of the curves");
  openb->add_option("--threads", opts->threads, "worker threads (default: all cores)")
      ->check(CLI::Range(0, 1024));
  openb->add_flag(
      "--timed", opts->timed,
      "replay on the trace's own clock with departures and queueing instead of dropping");
  openb->add_option("--compress", opts->compress,
                    "with --timed: divide arrival times by this (N x the load)");
  openb->callback([opts, &ctx] { ctx.exit_code = RunOpenb(*opts); });
}

}  // namespace tessera::cli
