#include "model/cluster.h"

#include "common/enum_names.h"

namespace tessera {

namespace {
constexpr auto kFormNames = NamesUpTo<AllocationForm::kShare>("whole", "partition", "share");
}  // namespace

const char* AllocationFormName(AllocationForm form) { return kFormNames.Of(form, "unknown"); }

const std::string& Node::gpu_model() const {
  static const std::string kNone;
  return devices.empty() ? kNone : devices.front().model;
}

Status ValidateNodeName(const std::string& node) {
  bool printable = !node.empty() && node.size() <= 253;
  for (unsigned char c : node) printable = printable && c > 0x20 && c < 0x7f && c != '/';
  if (printable) return Status::Ok();
  std::string shown;
  for (unsigned char c : node.substr(0, 64))
    shown += c > 0x20 && c < 0x7f ? static_cast<char>(c) : '?';
  return Status::InvalidArgument(
      "node name '" + shown +
      "' must be 1 to 253 printable ASCII characters, without spaces or '/'");
}

}  // namespace tessera
