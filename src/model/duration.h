// The one grammar for durations: every duration a person writes (the server's config, the
// scheduling policy, scenario files, a job's walltime, the command line) is read here.
//
//   duration = number | term { term }        a bare number is seconds: "90" == 90s, "1.5" == 1.5s
//   term     = number unit                   units in decreasing order, each at most once
//   unit     = "d" | "h" | "m" | "s" | "ms"  day (24h), hour, minute, second, millisecond
//   number   = digits [ "." digits ]
//
//   ParseDurationMs("500ms") == 500        ParseDurationMs("1.5m") == 90'000
//   ParseDurationMs("1h30m") == 5'400'000  ParseDurationMs("2") == 2000
//
// Refused, with a message quoting the text: an empty text, a sign ("-1s" is negative), spaces,
// another unit ("5 parsecs", "1us", "1y"), units out of order or repeated ("30m1h", "1s1s"), a
// value that is not a whole number of milliseconds ("0.0001s"), and more than kMaxDurationMs.
// No floating point: decimals are read digit by digit into integers, so "0.1s" is exactly 100 ms.
//
// A field kept in whole seconds (the quota cycle's clock counts seconds: the policy's grace, a
// walltime, scenario times) reads with ParseDurationSeconds, which refuses a value that is not a
// whole number of seconds ("500ms") rather than rounding it; the caller names the field.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tessera {

// The longest duration: 36,500 days (100 years), in milliseconds. Far beyond any timeout or
// retention, and small enough that microseconds (x1000) and sums of a few stay in int64.
inline constexpr int64_t kMaxDurationMs = int64_t{36'500} * 86'400'000;

// The grammar above, in milliseconds.
Result<int64_t> ParseDurationMs(std::string_view text);

// The same grammar for a field in whole seconds: "1.5m" == 90, "2h" == 7200; "500ms" and "1.5s"
// are refused ("... is not a whole number of seconds").
Result<int64_t> ParseDurationSeconds(std::string_view text);

// Whole units, the largest first, that ParseDurationMs reads back as `ms` (>= 0): "500ms",
// "1h30m", "1s500ms", "0s".
std::string FormatDurationMs(int64_t ms);

}  // namespace tessera
