// scheduling_cycle_bench: one quota-engine scheduling cycle over a large backlog (default
// 100,000 pending jobs over 10,000 nodes of 8 GPUs). Prints the time per cycle, jobs admitted
// per second and the conditions. Same code as `tessera bench cycle`.
//
//   scheduling_cycle_bench [--nodes N] [--jobs J] [--seed S] [--models 1|4]
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "sim/scenario_bench.h"

int main(int argc, char** argv) {
  tessera::sim::CycleBenchOptions o;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--nodes") == 0)
      o.nodes = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--jobs") == 0)
      o.jobs = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--seed") == 0)
      o.seed = std::strtoull(argv[i + 1], nullptr, 10);
    else if (std::strcmp(argv[i], "--models") == 0 &&
             (std::atoi(argv[i + 1]) == 1 || std::atoi(argv[i + 1]) == 4))
      o.models = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: %s [--nodes N] [--jobs J] [--seed S] [--models 1|4]\n", argv[0]);
      return 2;
    }
  }
  auto r = tessera::sim::RunCycleBench(o);
  std::printf(
      "scheduling cycle: %d nodes x 8 %s (%d GPUs), %d pending jobs, seed %llu, "
      "single thread\n",
      r.nodes, o.models == 4 ? "GPUs of 4 models, quotas per model" : "H100-80GB", r.gpus,
      r.pending, static_cast<unsigned long long>(o.seed));
  std::printf(
      "  cycle 1: %d admitted in %.3f s = %.0f jobs admitted/s (%d preempted); thread CPU %.3f "
      "s\n",
      r.admitted, r.cycle_seconds, r.admitted_per_second, r.preempted, r.cycle_cpu_seconds);
  std::printf(
      "  cycle 2 (5%% finished, as many arrived): %d pending -> %d admitted in %.3f s; thread "
      "CPU %.3f s\n",
      r.second_pending, r.second_admitted, r.second_cycle_seconds, r.second_cycle_cpu_seconds);
  std::printf("  setup %.2f s; invariants: %s\n", r.setup_seconds, r.invariants.c_str());
  return r.invariants == "ok" ? 0 : 1;
}
