#include "model/duration.h"

#include <array>
#include <cctype>

namespace tessera {
namespace {

// 128-bit intermediates keep the arithmetic exact without an overflow check at every step.
__extension__ typedef __int128 Int128;

struct Unit {
  std::string_view name;
  int64_t ms;
};
// In the order a duration must name them.
constexpr std::array<Unit, 5> kUnits = {{
    {"d", 86'400'000},
    {"h", 3'600'000},
    {"m", 60'000},
    {"s", 1000},
    {"ms", 1},
}};

Status Bad(std::string_view text, const std::string& why) {
  return Status::InvalidArgument("'" + std::string(text) + "' is not a duration: " + why +
                                 " (e.g. 500ms, 30s, 1.5m, 1h30m, 7d)");
}

bool IsNumberChar(char c) { return std::isdigit(static_cast<unsigned char>(c)) || c == '.'; }

// One term's number `num` of `text`: its value times `unit_ms`, exactly, or an error.
Result<Int128> ReadTerm(std::string_view text, std::string_view num, int64_t unit_ms) {
  Int128 mantissa = 0, scale = 1;
  bool seen_dot = false, seen_digit = false;
  for (char c : num) {
    if (c == '.') {
      if (seen_dot) return Bad(text, "'" + std::string(num) + "' has two decimal points");
      seen_dot = true;
      continue;
    }
    seen_digit = true;
    mantissa = mantissa * 10 + (c - '0');
    if (seen_dot) scale *= 10;
    // Past the longest duration in any unit, or more decimals than could matter.
    if (mantissa > Int128{kMaxDurationMs} * 1'000'000'000 || scale > 1'000'000'000'000'000'000) {
      return Bad(text, "too long or too many decimals");
    }
  }
  if (!seen_digit) return Bad(text, "'" + std::string(num) + "' has no digits");
  const Int128 numer = mantissa * unit_ms;
  if (numer % scale != 0) return Bad(text, "finer than a millisecond");
  return numer / scale;
}

}  // namespace

Result<int64_t> ParseDurationMs(std::string_view text) {
  if (text.empty()) return Bad(text, "empty");
  if (text.front() == '-') return Bad(text, "negative: a duration is 0 or more");
  Int128 total = 0;
  size_t i = 0;
  size_t next_unit = 0;  // the units before this one in kUnits may no longer follow
  while (i < text.size()) {
    size_t end = i;
    while (end < text.size() && IsNumberChar(text[end])) ++end;
    if (end == i) return Bad(text, "expected a number at '" + std::string(text.substr(i)) + "'");
    std::string_view num = text.substr(i, end - i);
    size_t unit_end = end;
    while (unit_end < text.size() && !IsNumberChar(text[unit_end])) ++unit_end;
    std::string_view unit = text.substr(end, unit_end - end);
    int64_t unit_ms = 0;
    if (unit.empty()) {
      // A bare number is seconds, and only as the whole text ("90"; not "1h30").
      if (i != 0) return Bad(text, "'" + std::string(num) + "' needs a unit");
      unit_ms = 1000;
    } else {
      size_t k = 0;
      while (k < kUnits.size() && kUnits[k].name != unit) ++k;
      if (k == kUnits.size()) {
        return Bad(text, "unknown unit '" + std::string(unit) + "': use d, h, m, s or ms");
      }
      if (k < next_unit) {
        return Bad(text, "units must go from the largest to the smallest, each at most once");
      }
      next_unit = k + 1;
      unit_ms = kUnits[k].ms;
    }
    Result<Int128> term = ReadTerm(text, num, unit_ms);
    if (!term.ok()) return term.status();
    total += *term;
    if (total > kMaxDurationMs) return Bad(text, "longer than 36500d, 100 years");
    i = unit_end;
  }
  return static_cast<int64_t>(total);
}

Result<int64_t> ParseDurationSeconds(std::string_view text) {
  Result<int64_t> ms = ParseDurationMs(text);
  if (!ms.ok()) return ms.status();
  if (*ms % 1000 != 0) {
    return Status::InvalidArgument("'" + std::string(text) +
                                   "' is not a whole number of seconds (kept in seconds: use "
                                   "e.g. 1s, 90s, 1.5m)");
  }
  return *ms / 1000;
}

std::string FormatDurationMs(int64_t ms) {
  if (ms <= 0) return ms == 0 ? "0s" : std::to_string(ms) + "ms";
  std::string out;
  for (const Unit& u : kUnits) {
    if (ms >= u.ms) {
      out += std::to_string(ms / u.ms);
      out += u.name;
      ms %= u.ms;
    }
  }
  return out;
}

}  // namespace tessera
