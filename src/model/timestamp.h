// Timestamps as people and APIs write them: "2027-06-30" (midnight UTC), "2027-06-30T18:00:00Z"
// (RFC 3339 in UTC, as Kubernetes writes its status times) or with an offset
// ("2027-06-30T18:00:00+02:00"), read into milliseconds since the Unix epoch. Refused, with a
// message quoting the text and saying the forms: anything else (a year before 1970, a month 13,
// fractions of a second, another zone word).
//
// Thread-safety: a pure function.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace tessera {

Result<int64_t> ParseTimestampMs(const std::string& text);

}  // namespace tessera
