#include "model/resources.h"

#include "model/quantity.h"

namespace tessera {

std::string Resources::ToString() const {
  return "gpu=" + FormatMilli(gpu_milli) + " gpu_mem=" + FormatMiB(gpu_memory_mib) +
         " cpu=" + FormatMilli(cpu_milli) + " mem=" + FormatMiB(memory_mib);
}

}  // namespace tessera
