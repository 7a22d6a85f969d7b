// NVML opened for one part of the agent (telemetry, MIG, device health): each part lists the
// calls it makes in an Api struct (agent/dynamic_library.h's X rows), and OpenNvml loads the
// library, binds them and initialises NVML, each failure worded the same way for every part.
#pragma once

#include <memory>
#include <string>

#include "agent/dynamic_library.h"
#include "common/status.h"

namespace tessera::agent {

using NvmlReturn = int;  // nvmlReturn_t, an int-sized enum; 0 is success
constexpr NvmlReturn kNvmlSuccess = 0;

// `Api` is built from the library's path and holds `DynamicLibrary lib`, `bool BindCalls()`
// (false where a required call is missing) and the bound `init` (nvmlInit_v2) and `shutdown`
// (nvmlShutdown), which its destructor calls when set. kFailedPrecondition "no NVML: ..." naming
// the library and what failed: it does not load, it lacks `calls`, or nvmlInit fails.
template <typename Api>
Result<std::unique_ptr<Api>> OpenNvml(const std::string& library, const std::string& calls) {
  auto api = std::make_unique<Api>(library);
  if (!api->lib.loaded())
    return Status::FailedPrecondition("no NVML: cannot load " + library + ": " + api->lib.error());
  if (!api->BindCalls())
    return Status::FailedPrecondition("no NVML: " + library + " lacks " + calls);
  if (NvmlReturn rc = api->init(); rc != kNvmlSuccess) {
    api->shutdown = nullptr;  // not initialised: nothing to shut down
    const auto words = api->lib.template Symbol<const char* (*)(NvmlReturn)>("nvmlErrorString");
    const char* why = words != nullptr ? words(rc) : nullptr;
    return Status::FailedPrecondition("no NVML: " + library +
                                      ": nvmlInit failed: " + (why != nullptr ? why : "error") +
                                      " (NVML " + std::to_string(rc) + ")");
  }
  return api;
}

}  // namespace tessera::agent
