// `tessera whatif --usage` at fleet size: generates a synthetic telemetry history (CSV, one
// sample per workload per step), then times reading it and replaying it under the three plans.
//
//   usage_whatif_bench [--workloads 1000] [--days 7] [--step-s 60] [--seed 1]
//                      [--openb FILE | --sessions] [--card H100-80GB] [--slice-s S]
//                      [--csv-out FILE] [--json]
//
// The synthetic estate: each workload is drawn from a GPU pod of the openb trace when --openb
// names one (its GPU count and, for sharing pods, its GPU fraction set the workload's kind and
// memory), else from a fixed mix. Kinds:
//   training     several GPUs, busy ~95% (idle stretches of 10-60 min), 50-75 GiB per GPU;
//   inference    one GPU, always on, 20-60% utilization, 10-40 GiB;
//   batch        one whole GPU, busy 40-80% in bursts of ~1 h, 30-70 GiB;
//   interactive  one GPU fraction f: busy 5-30% in bursts of ~20 min, holding f x 80 GiB
//                (at least 4 GiB) whether busy or not (notebooks keep their memory).
// 60% of workloads live through the whole history; the rest arrive in its first two days and
// stay 1 to 5 days. Activity is a two-state chain per step with the kind's duty and burst length.
// --sessions: the estate of the product description instead (`tessera sim swap`'s): interactive
// sessions only, 8-16 GiB each (whole GiB), active 20% of the time in bursts of 2 minutes (mean),
// all present throughout.
// Deterministic for a seed (SplitMix64).
#include "sim/usage_whatif.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "sim/openb.h"

namespace {

using tessera::sim::usage::History;

struct Rng {
  uint64_t s;
  uint64_t Next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  int64_t Uniform(int64_t lo, int64_t hi) {  // [lo, hi]
    return lo + static_cast<int64_t>(Next() % static_cast<uint64_t>(hi - lo + 1));
  }
  bool Chance(int64_t per_million) { return Uniform(0, 999'999) < per_million; }
};

struct Kind {
  const char* name;
  int gpus;
  int64_t mem_mib;
  int duty_pm;    // share of time busy
  int burst_min;  // mean busy stretch
  int util_pct;   // while busy
};

Kind Draw(Rng& r, int num_gpu, int64_t gpu_milli) {
  constexpr int64_t kGiB = 1024;
  if (num_gpu > 1) {
    return {"training",
            num_gpu,
            num_gpu * r.Uniform(50, 75) * kGiB,
            950,
            static_cast<int>(r.Uniform(120, 600)),
            static_cast<int>(r.Uniform(85, 100))};
  }
  if (gpu_milli < 1000) {
    return {"interactive",
            1,
            std::max<int64_t>(4 * kGiB, gpu_milli * 80 * kGiB / 1000),
            static_cast<int>(r.Uniform(50, 300)),
            static_cast<int>(r.Uniform(10, 30)),
            static_cast<int>(r.Uniform(30, 90))};
  }
  if (r.Chance(500'000)) {
    return {"inference", 1,  r.Uniform(10, 40) * kGiB,
            1000,        60, static_cast<int>(r.Uniform(20, 60))};
  }
  return {"batch",
          1,
          r.Uniform(30, 70) * kGiB,
          static_cast<int>(r.Uniform(400, 800)),
          60,
          static_cast<int>(r.Uniform(60, 100))};
}

}  // namespace

int main(int argc, char** argv) {
  int workloads = 1000, days = 7;
  int64_t step_s = 60;
  uint64_t seed = 1;
  std::string openb, card = "H100-80GB", csv_out;
  bool json = false, sessions = false;
  int64_t slice_s = 0;
  for (int i = 1; i < argc; ++i) {
    auto arg = [&](const char* f) { return std::strcmp(argv[i], f) == 0 && i + 1 < argc; };
    if (arg("--workloads")) {
      workloads = std::atoi(argv[++i]);
    } else if (arg("--days")) {
      days = std::atoi(argv[++i]);
    } else if (arg("--step-s")) {
      step_s = std::atoll(argv[++i]);
    } else if (arg("--seed")) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg("--openb")) {
      openb = argv[++i];
    } else if (arg("--card")) {
      card = argv[++i];
    } else if (arg("--csv-out")) {
      csv_out = argv[++i];
    } else if (arg("--slice-s")) {
      slice_s = std::atoll(argv[++i]);
    } else if (std::strcmp(argv[i], "--sessions") == 0) {
      sessions = true;
    } else if (std::strcmp(argv[i], "--json") == 0) {
      json = true;
    } else {
      std::fprintf(
          stderr,
          "usage: %s [--workloads N] [--days D] [--step-s S] [--seed N] "
          "[--openb FILE | --sessions] [--card MODEL] [--slice-s S] [--csv-out FILE] [--json]\n",
          argv[0]);
      return 2;
    }
  }
  if (workloads < 1 || days < 1 || step_s < 1) {
    std::fprintf(stderr, "workloads, days and step: positive\n");
    return 2;
  }
  // The pods to draw shapes from: (num_gpu, gpu_milli) of the trace's GPU pods, or a fixed mix
  // (10% training, 30% whole-GPU, 60% sharing).
  std::vector<std::pair<int, int64_t>> shapes;
  if (!openb.empty()) {
    auto pods = tessera::sim::ReadOpenbPods(openb);
    if (!pods.ok()) {
      std::fprintf(stderr, "%s\n", pods.status().message().c_str());
      return 1;
    }
    for (const auto& p : *pods) {
      if (p.num_gpu > 0) shapes.push_back({p.num_gpu, p.gpu_milli});
    }
  } else {
    for (int k = 0; k < 10; ++k) {
      shapes.push_back({k == 0 ? 4 : 1, k < 4 ? 1000 : 100 + 80 * (k - 4)});
    }
  }
  Rng rng{seed};
  const int64_t steps = int64_t{days} * 86400 / step_s;
  const int64_t t0 = 1'700'000'000;
  std::string csv = "workload,timestamp,gpu_util_pct,gpu_memory_bytes,team,requested_gpus\n";
  csv.reserve(static_cast<size_t>(workloads) * static_cast<size_t>(steps) * 44);
  std::map<std::string, int> kinds;
  for (int w = 0; w < workloads; ++w) {
    const auto& shape = shapes[static_cast<size_t>(rng.Uniform(0, shapes.size() - 1))];
    const Kind k = sessions ? Kind{"interactive", 1, rng.Uniform(8, 16) * 1024,
                                   200,           2, static_cast<int>(rng.Uniform(30, 90))}
                            : Draw(rng, shape.first, shape.second);
    ++kinds[k.name];
    int64_t from = 0, to = steps;
    if (!sessions && !rng.Chance(600'000)) {
      from = rng.Uniform(0, std::min<int64_t>(steps - 1, 2 * 86400 / step_s));
      to = std::min(steps, from + rng.Uniform(86400 / step_s, 5 * 86400 / step_s));
    }
    const std::string name = "w" + std::to_string(w),
                      tail = ",t" + std::to_string(w % 8) + "," + std::to_string(k.gpus) + "\n";
    // Per step: leave a busy stretch with 1/burst, start one so that the duty comes out.
    const int64_t burst_steps = std::max<int64_t>(1, k.burst_min * 60 / step_s);
    const int64_t p_stop = 1'000'000 / burst_steps;
    const int64_t p_start =
        k.duty_pm >= 1000 ? 1'000'000
                          : std::min<int64_t>(1'000'000, p_stop * k.duty_pm / (1000 - k.duty_pm));
    bool busy = rng.Chance(k.duty_pm * 1000);
    for (int64_t s = from; s < to; ++s) {
      busy = busy ? !(k.duty_pm < 1000 && rng.Chance(p_stop)) : rng.Chance(p_start);
      const int64_t util =
          busy ? std::clamp<int64_t>(k.util_pct + rng.Uniform(-10, 10), 1, 100) : 0;
      const int64_t mem = k.mem_mib * rng.Uniform(90, 100) / 100;
      csv += name;
      csv += ',';
      csv += std::to_string(t0 + s * step_s);
      csv += ',';
      csv += std::to_string(util);
      csv += ',';
      csv += std::to_string(mem * 1'048'576);
      csv += tail;
    }
  }
  if (!csv_out.empty()) {
    std::ofstream(csv_out) << csv;
  }
  const auto t_parse = std::chrono::steady_clock::now();
  History h;
  tessera::Status s = tessera::sim::usage::ParseUsageCsv(csv, "synthetic.csv", &h);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 1;
  }
  const auto t_replay = std::chrono::steady_clock::now();
  tessera::sim::usage::WhatIfOptions o;
  o.card = card;
  o.slice_ms = slice_s * 1000;
  auto r = tessera::sim::usage::RunWhatIfUsage(std::move(h), o);
  if (!r.ok()) {
    std::fprintf(stderr, "%s\n", r.status().message().c_str());
    return 1;
  }
  const auto t_end = std::chrono::steady_clock::now();
  const double parse_s = std::chrono::duration<double>(t_replay - t_parse).count();
  const double replay_s = std::chrono::duration<double>(t_end - t_replay).count();
  if (json) {
    std::printf("%s\n", tessera::sim::usage::UsageJson(*r).c_str());
    return 0;
  }
  std::printf("estate: %d workloads (", workloads);
  for (const auto& [name, n] : kinds) std::printf(" %s %d", name.c_str(), n);
  std::printf(" ), %d days at %lld s samples, %zu MB of CSV, seed %llu, shapes from %s\n", days,
              static_cast<long long>(step_s), csv.size() >> 20,
              static_cast<unsigned long long>(seed),
              sessions        ? "the product description's sessions"
              : openb.empty() ? "the built-in mix"
                              : openb.c_str());
  std::printf(
      "time: read %.2f s, replay %.2f s (three plans, %zu swap overcommits), total %.2f s\n",
      parse_s, replay_s, r->swap_tried.size(), parse_s + replay_s);
  std::printf(
      "cards needed: whole %d, forms %d, forms + swap %d (overcommit %d%%, wake p99 %.3f s)"
      "; lower bound %d (memory of the active workloads); duty cycles summed %.2f; utilization "
      "summed at the busiest step %d GPUs\n",
      r->whole.cards, r->forms.cards, r->swap.cards, r->swap.overcommit_pct,
      static_cast<double>(r->swap.wake_p99_ms) / 1000, r->lb_cards,
      static_cast<double>(r->duty_sum_milli) / 1000, r->lb_util_gpus);
  std::printf("\n%s", tessera::sim::usage::UsageText(*r, 10).c_str());
  return 0;
}
