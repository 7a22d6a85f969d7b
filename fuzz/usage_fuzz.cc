// The fleet telemetry readers of `tessera whatif --usage` (sim/usage_history.h): the first byte
// picks the reader (0: CSV, 1: Prometheus range-query JSON, else ParseUsage, which tells them
// apart), the rest is the file. What they accept is then normalized and analyzed, and must hold
// the readers' promises: utilization within a GPU, memory and counts not negative, a duty cycle
// within its workload's time.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "sim/usage_history.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  namespace u = tessera::sim::usage;
  const std::string text(tessera::fuzz::AsText(data + 1, size - 1));
  u::History h;
  tessera::Status s = data[0] == 0   ? u::ParseUsageCsv(text, "fuzz.csv", &h)
                      : data[0] == 1 ? u::ParsePrometheus(text, "fuzz.json", &h)
                                     : u::ParseUsage(text, "fuzz", &h);
  if (!s.ok()) {
    if (s.message().empty()) __builtin_trap();  // every refusal says why
    return 0;
  }
  for (const u::Series& w : h.workloads) {
    if (w.name.empty() || w.gpus < 1) __builtin_trap();
    for (const u::Sample& x : w.samples) {
      if (x.util_pm < -1 || x.util_pm > 1000 || x.mem_mib < -1) __builtin_trap();
    }
  }
  if (!u::Normalize(&h).ok()) return 0;
  if (h.gaps < 0 || h.gap_ms < 0 || h.resets < 0 || h.end_ms < h.start_ms) __builtin_trap();
  for (const u::Series& w : h.workloads) {
    for (size_t i = 1; i < w.samples.size(); ++i) {
      if (w.samples[i].t_ms <= w.samples[i - 1].t_ms) __builtin_trap();  // ordered, no duplicate
    }
    const u::WorkloadStats st = u::Analyze(w, h.step_ms, h.max_gap_ms, 10);
    if (st.active_ms < 0 || st.active_ms > st.present_ms || st.duty_pm < 0 || st.duty_pm > 1000 ||
        st.mean_util_pm > 1000 || st.used_gpu_milli_ms < 0) {
      __builtin_trap();
    }
  }
  return 0;
}
