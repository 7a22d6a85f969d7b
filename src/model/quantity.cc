#include "model/quantity.h"

#include <array>
#include <cctype>
#include <cstdint>
#include <limits>

namespace tessera {
namespace {

// 128-bit intermediates keep decimal parsing exact without overflow checks at every step.
__extension__ typedef __int128 Int128;

// An exact decimal: value = mantissa / 10^scale.
struct Decimal {
  Int128 mantissa = 0;
  int scale = 0;
};

Result<Decimal> ParseDecimal(std::string_view num, std::string_view whole_text) {
  if (num.empty()) {
    return Status::InvalidArgument("'" + std::string(whole_text) + "' has no number");
  }
  Decimal d;
  bool seen_dot = false;
  bool seen_digit = false;
  for (char c : num) {
    if (c == '.') {
      if (seen_dot) {
        return Status::InvalidArgument("'" + std::string(whole_text) + "' has two decimal points");
      }
      seen_dot = true;
      continue;
    }
    if (!std::isdigit(static_cast<unsigned char>(c))) {
      return Status::InvalidArgument("'" + std::string(whole_text) + "' is not a number");
    }
    seen_digit = true;
    d.mantissa = d.mantissa * 10 + (c - '0');
    if (seen_dot) ++d.scale;
    if (d.mantissa > static_cast<Int128>(std::numeric_limits<int64_t>::max()) || d.scale > 18) {
      return Status::InvalidArgument("'" + std::string(whole_text) + "' is too large or too long");
    }
  }
  if (!seen_digit) {
    return Status::InvalidArgument("'" + std::string(whole_text) + "' has no digits");
  }
  return d;
}

Int128 Pow10(int n) {
  Int128 p = 1;
  for (int i = 0; i < n; ++i) p *= 10;
  return p;
}

struct Unit {
  std::string_view name;
  int64_t bytes;
};

constexpr int64_t kKi = 1024, kMi = kKi * 1024, kGi = kMi * 1024, kTi = kGi * 1024;
constexpr std::array<Unit, 16> kUnits = {{
    {"KiB", kKi},
    {"MiB", kMi},
    {"GiB", kGi},
    {"TiB", kTi},
    {"Ki", kKi},
    {"Mi", kMi},
    {"Gi", kGi},
    {"Ti", kTi},
    {"KB", 1000},
    {"MB", 1000'000},
    {"GB", 1000'000'000},
    {"TB", 1000'000'000'000},
    {"K", 1000},
    {"M", 1000'000},
    {"G", 1000'000'000},
    {"T", 1000'000'000'000},
}};

}  // namespace

Result<MiB> ParseMemoryMiB(std::string_view text) {
  std::string_view t = text;
  if (t.empty()) return Status::InvalidArgument("empty memory quantity");
  if (t.front() == '-') {
    return Status::InvalidArgument("memory quantity '" + std::string(text) +
                                   "' is negative (memory is 0 or more, e.g. 8GiB)");
  }
  size_t split = 0;
  while (split < t.size() &&
         (std::isdigit(static_cast<unsigned char>(t[split])) || t[split] == '.')) {
    ++split;
  }
  std::string_view num = t.substr(0, split);
  std::string_view unit = t.substr(split);
  if (unit.empty()) {
    return Status::InvalidArgument("memory quantity '" + std::string(text) +
                                   "' needs a unit (MiB, GiB, GB, ...)");
  }
  int64_t bytes_per_unit = 0;
  if (unit == "B") {
    bytes_per_unit = 1;
  } else {
    for (const Unit& u : kUnits) {
      if (unit == u.name) {
        bytes_per_unit = u.bytes;
        break;
      }
    }
  }
  if (bytes_per_unit == 0) {
    return Status::InvalidArgument("memory quantity '" + std::string(text) +
                                   "' has unknown unit '" + std::string(unit) +
                                   "' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)");
  }
  Result<Decimal> d = ParseDecimal(num, text);
  if (!d.ok()) return d.status();
  // bytes = mantissa * unit / 10^scale; MiB = ceil(bytes / 2^20), computed exactly.
  Int128 numer = d->mantissa * bytes_per_unit;
  Int128 denom = Pow10(d->scale) * kMi;
  Int128 mib = (numer + denom - 1) / denom;
  if (mib > std::numeric_limits<int64_t>::max() / 2) {
    return Status::InvalidArgument("memory quantity '" + std::string(text) + "' is too large");
  }
  return static_cast<MiB>(mib);
}

Result<int64_t> ParseMilli(std::string_view text) {
  if (text.empty()) return Status::InvalidArgument("empty quantity");
  if (text.front() == '-') {
    return Status::InvalidArgument("quantity '" + std::string(text) +
                                   "' is negative (a count is 0 or more, e.g. 2, 0.5 or 500m)");
  }
  bool milli_suffix = text.back() == 'm';
  std::string_view num = milli_suffix ? text.substr(0, text.size() - 1) : text;
  Result<Decimal> d = ParseDecimal(num, text);
  if (!d.ok()) return d.status();
  if (milli_suffix) {
    if (d->scale != 0) {
      return Status::InvalidArgument("'" + std::string(text) +
                                     "': milli-units must be whole (e.g. 500m)");
    }
    return static_cast<int64_t>(d->mantissa);
  }
  if (d->scale > 3) {
    // Allow trailing zeros beyond three decimals ("0.2500"), reject real precision loss.
    Int128 drop = Pow10(d->scale - 3);
    if (d->mantissa % drop != 0) {
      return Status::InvalidArgument("'" + std::string(text) +
                                     "' is finer than a thousandth (use at most 3 decimals)");
    }
    return static_cast<int64_t>(d->mantissa / drop);
  }
  Int128 milli = d->mantissa * Pow10(3 - d->scale);
  if (milli > std::numeric_limits<int64_t>::max() / 2) {
    return Status::InvalidArgument("'" + std::string(text) + "' is too large");
  }
  return static_cast<int64_t>(milli);
}

Result<int64_t> ParseNonNegativeInt(std::string_view text) {
  if (text.empty()) return Status::InvalidArgument("empty integer");
  Int128 v = 0;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) {
      return Status::InvalidArgument("'" + std::string(text) + "' is not a non-negative integer");
    }
    v = v * 10 + (c - '0');
    if (v > std::numeric_limits<int64_t>::max()) {
      return Status::InvalidArgument("'" + std::string(text) + "' is too large");
    }
  }
  return static_cast<int64_t>(v);
}

std::string FormatMiB(MiB mib) {
  if (mib != 0 && mib % (1024 * 1024) == 0) return std::to_string(mib / (1024 * 1024)) + "TiB";
  if (mib != 0 && mib % 1024 == 0) return std::to_string(mib / 1024) + "GiB";
  if (mib >= 1024 && mib % 256 == 0) {
    // Exact to two decimals, e.g. 1.5GiB, 9.75GiB: mib * 100 / 1024 is whole exactly when mib is a
    // multiple of 256, and is then (mib / 256) * 25, which cannot overflow (mib < 2^63 / 2^8 * 25).
    int64_t hundredths = (mib / 256) * 25;
    std::string frac = std::to_string(hundredths % 100);
    if (frac.size() == 1) frac = "0" + frac;
    if (frac.back() == '0') frac.pop_back();
    return std::to_string(hundredths / 100) + "." + frac + "GiB";
  }
  return std::to_string(mib) + "MiB";
}

std::string FormatMilli(int64_t milli) {
  std::string sign = milli < 0 ? "-" : "";
  int64_t v = milli < 0 ? -milli : milli;
  std::string out = sign + std::to_string(v / 1000);
  int64_t frac = v % 1000;
  if (frac != 0) {
    std::string f = std::to_string(frac);
    while (f.size() < 3) f = "0" + f;
    while (f.back() == '0') f.pop_back();
    out += "." + f;
  }
  return out;
}

}  // namespace tessera
