// The Alibaba openb trace readers (sim/openb.h): the same text read as a node list and as a pod
// list, through the in-memory entry points the file readers use.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "sim/openb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(tessera::fuzz::AsText(data, size));
  auto nodes = tessera::sim::ParseOpenbNodes(text, "fuzz.csv");
  if (nodes.ok()) {
    for (const auto& n : *nodes) {
      if (n.cpu_milli < 0 || n.memory_mib < 0) __builtin_trap();  // refused, never guessed at
    }
  }
  auto pods = tessera::sim::ParseOpenbPods(text, "fuzz.csv");
  if (pods.ok()) {
    for (const auto& p : *pods) {
      if (p.num_gpu < 0 || p.gpu_milli < 0) __builtin_trap();
    }
  }
  return 0;
}
