// The Slurm and PBS backends' reading of their schedulers' output, through Backend::Poll and
// Backend::List as the engine calls them: the backend runs its commands through
// BackendOptions::runner, which here answers each command with the text this input gives it
// (in-process: no process per command), so the parsing is the product's own: squeue's and
// scontrol's lines, sacct's fallback listing and qstat's JSON.
//
// Input: one byte choosing the scheduler, then its output.
//   even: PBS. The rest is what `qstat -x -f -F json` prints; the backend lists every job.
//   odd:  Slurm. The rest, cut at NUL bytes, is what squeue, scontrol and sacct print; ten jobs
//         ("100" .. "109") are polled, so scontrol is asked about those squeue shows running
//         (one call each, or one listing past eight) and sacct about those it does not show.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "fuzz_util.h"

namespace {

using namespace tessera::backends;

void Require(bool ok) {
  if (!ok) __builtin_trap();
}

struct Fixture {
  std::map<std::string, std::string> output;  // command name -> what it prints
  std::unique_ptr<Backend> slurm, pbs;
  std::vector<std::string> slurm_ids;

  Fixture() {
    BackendOptions o;
    o.command_nice = 0;
    o.runner = [this](const std::vector<std::string>& argv, const std::string&) {
      CommandResult r;
      auto it = output.find(argv.empty() ? "" : argv[0]);
      r.exit_code =
          it == output.end() ? 1 : 0;  // a command with no text "fails", as the stand-in did
      if (it != output.end()) r.out = it->second;
      return r;
    };
    slurm = MakeSlurmBackend(o);
    pbs = MakePbsBackend(o);
    for (int i = 100; i < 110; ++i) slurm_ids.push_back(std::to_string(i));
  }
};

bool KnownState(const std::string& s) {
  return s == "pending" || s == "running" || s == "succeeded" || s == "failed" || s == "cancelled";
}

void CheckJob(const ExternalJob& j) { Require(KnownState(j.state)); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture fixture;  // for the whole run
  Fixture* fx = &fixture;
  if (size == 0) return 0;
  const std::string_view text = tessera::fuzz::AsText(data + 1, size - 1);
  if (data[0] % 2 == 0) {
    fx->output = {{"qstat", std::string(text)}};
    auto jobs = fx->pbs->List("");
    if (jobs.ok()) {
      for (const ExternalJob& j : *jobs) CheckJob(j);
    }
    return 0;
  }
  const std::vector<std::string> parts = tessera::fuzz::SplitNul(text, 3);
  fx->output = {{"squeue", parts[0]},
                {"scontrol", parts.size() > 1 ? parts[1] : ""},
                {"sacct", parts.size() > 2 ? parts[2] : ""}};
  auto polled = fx->slurm->Poll(fx->slurm_ids);
  if (polled.ok()) {
    for (const auto& [id, j] : *polled) CheckJob(j);
  }
  return 0;
}
