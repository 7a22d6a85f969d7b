// The Slurm and PBS backends' reading of their schedulers' output, through Backend::Poll and
// Backend::List as the engine calls them: the backend runs its commands (found in
// BackendOptions::bin_dir) and parses what they print. Here every command is the stand-in
// (standin.cc), which prints the text this input gives it, so the parsing is the product's own:
// squeue's and scontrol's lines, sacct's fallback listing and qstat's JSON.
//
// Input: one byte choosing the scheduler, then its output.
//   even: PBS. The rest is what `qstat -x -f -F json` prints; the backend lists every job.
//   odd:  Slurm. The rest, cut at NUL bytes, is what squeue, scontrol and sacct print; ten jobs
//         ("100" .. "109") are polled, so scontrol is asked about those squeue shows running
//         (one call each, or one listing past eight) and sacct about those it does not show.
//
// Each input costs a few process starts (posix_spawn of the stand-in), so this target runs at
// hundreds, not hundreds of thousands, of inputs a second.
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "fuzz_util.h"

#ifndef TESSERA_FUZZ_STANDIN
#error "TESSERA_FUZZ_STANDIN: the path of the stand-in command (fuzz/CMakeLists.txt)"
#endif

namespace {

using namespace tessera::backends;

void Require(bool ok) {
  if (!ok) __builtin_trap();
}

struct Fixture {
  tessera::fuzz::ScratchDir bin{"tessera-fuzz-bin"};
  tessera::fuzz::ScratchDir out{"tessera-fuzz-out"};
  std::unique_ptr<Backend> slurm, pbs;
  std::vector<std::string> slurm_ids;

  Fixture() {
    for (const char* name : {"squeue", "scontrol", "sacct", "qstat"}) {
      if (symlink(TESSERA_FUZZ_STANDIN, (bin.path() + "/" + name).c_str()) != 0) abort();
    }
    setenv("TESSERA_FUZZ_STANDIN_DIR", out.path().c_str(), 1);
    BackendOptions o;
    o.bin_dir = bin.path();
    o.command_nice = 0;
    o.command_timeout_ms = 10000;
    slurm = MakeSlurmBackend(o);
    pbs = MakePbsBackend(o);
    for (int i = 100; i < 110; ++i) slurm_ids.push_back(std::to_string(i));
  }

  void Write(const char* name, const std::string& text) const {
    std::ofstream f(out.path() + "/" + name, std::ios::binary | std::ios::trunc);
    f << text;
    if (!f) abort();
  }
};

bool KnownState(const std::string& s) {
  return s == "pending" || s == "running" || s == "succeeded" || s == "failed" || s == "cancelled";
}

void CheckJob(const ExternalJob& j) { Require(KnownState(j.state)); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture fixture;  // for the whole run
  const Fixture* fx = &fixture;
  if (size == 0) return 0;
  const std::string_view text = tessera::fuzz::AsText(data + 1, size - 1);
  if (data[0] % 2 == 0) {
    fx->Write("qstat", std::string(text));
    auto jobs = fx->pbs->List("");
    if (jobs.ok()) {
      for (const ExternalJob& j : *jobs) CheckJob(j);
    }
    return 0;
  }
  const std::vector<std::string> parts = tessera::fuzz::SplitNul(text, 3);
  fx->Write("squeue", parts[0]);
  fx->Write("scontrol", parts.size() > 1 ? parts[1] : "");
  fx->Write("sacct", parts.size() > 2 ? parts[2] : "");
  auto polled = fx->slurm->Poll(fx->slurm_ids);
  if (polled.ok()) {
    for (const auto& [id, j] : *polled) CheckJob(j);
  }
  return 0;
}
