// Scenario files (`tessera sim scenario FILE.yaml`): sim::ParseScenario over arbitrary text, and
// ParseDurationMs (model/duration.h, the one duration grammar: "500ms", "1.5m", "1h30m", "90")
// over its first line, which must read back from its formatted value. Only parsing: running a
// scenario is bounded by its `until`, which the text chooses.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_util.h"
#include "model/duration.h"
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
  auto ms = tessera::ParseDurationMs(text.substr(0, text.find('\n')));
  if (ms.ok()) {
    if (*ms < 0 || *ms > tessera::kMaxDurationMs) __builtin_trap();
    auto back = tessera::ParseDurationMs(tessera::FormatDurationMs(*ms));
    if (!back.ok() || *back != *ms) __builtin_trap();
  }
  return 0;
}
