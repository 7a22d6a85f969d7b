#include "common/status.h"

#include "common/enum_names.h"

namespace tessera {

namespace {
constexpr auto kCodeNames = NamesUpTo<StatusCode::kInternal>(
    "ok", "invalid argument", "not found", "failed precondition", "resource exhausted",
    "unauthenticated", "permission denied", "internal");
}  // namespace

const char* StatusCodeName(StatusCode code) { return kCodeNames.Of(code, "unknown"); }

std::string Status::ToString() const {
  if (ok()) return "ok";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

}  // namespace tessera
