// Scenario files (`tessera sim scenario FILE.yaml`): sim::ParseScenario over arbitrary text, and
// sim::ParseDuration (the scenario's durations: "30s", "5m", "2h", "1d", "90") over its first
// line. Only parsing: running a scenario is bounded by its `until`, which the text chooses.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_util.h"
#include "sim/scenario.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = tessera::fuzz::AsText(data, size);
  auto scenario = tessera::sim::ParseScenario(text);
  if (scenario.ok()) {
    // A scenario that loads has a policy that passes the same checks as the server's.
    for (const auto& w : scenario->workload) {
      if (w.count < 0) __builtin_trap();
    }
  }
  auto duration = tessera::sim::ParseDuration(text.substr(0, text.find('\n')));
  if (duration.ok() && *duration < 0) __builtin_trap();
  return 0;
}
