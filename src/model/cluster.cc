#include "model/cluster.h"

namespace tessera {

const char* AllocationFormName(AllocationForm form) {
  switch (form) {
    case AllocationForm::kWhole: return "whole";
    case AllocationForm::kPartition: return "partition";
    case AllocationForm::kShare: return "share";
  }
  return "unknown";
}

const std::string& Node::gpu_model() const {
  static const std::string kNone;
  return devices.empty() ? kNone : devices.front().model;
}

}  // namespace tessera
