// Slurm's listings as the Slurm backend reads them (backends/backend.h): each line as a line of
// `squeue -h -t all -O JobID:|,State:|,NodeList:|,Reason:|,exit_code:|,TimeUsed:|,Name:|` and of
// `scontrol show job -d -o`, as a GRES index list ("0-2,5") and as a duration ("1-02:03:04"). In
// process, so it runs fast; the sacct fallback and PBS's qstat, parsed inside Backend::Poll, are
// backend_poll_fuzz's.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "backends/backend.h"
#include "fuzz_util.h"

namespace {

bool KnownState(const std::string& s) {
  return s == "pending" || s == "running" || s == "succeeded" || s == "failed" || s == "cancelled";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::backends;
  std::string_view text = tessera::fuzz::AsText(data, size);
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const std::string line(text.substr(0, nl));
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (auto job = ParseSqueueLine(line)) {
      if (job->external_id.empty() || !KnownState(job->state) || job->run_s < -1) __builtin_trap();
    }
    const ExternalJob job = ParseScontrolLine(line);
    if (!KnownState(job.state)) __builtin_trap();
    (void)ParseIndexList(line);
    if (ClockSeconds(line) < -1) __builtin_trap();
  }
  return 0;
}
