#include "capgpu/limits.h"

#include <cstdio>
#include <cstring>

namespace tessera::capgpu {
namespace {

bool EqualsIgnoreCase(const char* a, size_t a_len, const char* b) {
  size_t b_len = std::strlen(b);
  if (a_len != b_len) return false;
  for (size_t i = 0; i < a_len; ++i) {
    char x = a[i] >= 'A' && a[i] <= 'Z' ? static_cast<char>(a[i] - 'A' + 'a') : a[i];
    if (x != b[i]) return false;
  }
  return true;
}

// Multiplier for a unit, or 0 when the unit is unknown.
uint64_t UnitMultiplier(const char* unit, size_t len, UnitStyle style) {
  constexpr uint64_t kKi = 1024ULL;
  if (len == 0 || EqualsIgnoreCase(unit, len, "b")) return 1;
  struct Unit {
    const char* name;
    uint64_t binary;
    uint64_t decimal;
  };
  static const Unit kUnits[] = {{"k", kKi, 1000ULL},
                                {"m", kKi * kKi, 1000000ULL},
                                {"g", kKi * kKi * kKi, 1000000000ULL},
                                {"t", kKi * kKi * kKi * kKi, 1000000000000ULL}};
  for (const Unit& u : kUnits) {
    char buf[8];
    // "Gi" / "GiB": binary in both styles.
    std::snprintf(buf, sizeof(buf), "%si", u.name);
    if (EqualsIgnoreCase(unit, len, buf)) return u.binary;
    std::snprintf(buf, sizeof(buf), "%sib", u.name);
    if (EqualsIgnoreCase(unit, len, buf)) return u.binary;
    // "GB": decimal in both styles.
    std::snprintf(buf, sizeof(buf), "%sb", u.name);
    if (EqualsIgnoreCase(unit, len, buf)) return u.decimal;
    // "G": decimal for Tessera (as its quantity parser), binary for HAMi-core.
    if (EqualsIgnoreCase(unit, len, u.name)) {
      return style == UnitStyle::kHami ? u.binary : u.decimal;
    }
  }
  return 0;
}

}  // namespace

bool ParseBytes(const char* text, UnitStyle style, uint64_t* bytes) {
  if (text == nullptr) return false;
  const char* p = text;
  while (*p == ' ') ++p;
  uint64_t whole = 0;
  int digits = 0;
  while (*p >= '0' && *p <= '9') {
    uint64_t d = static_cast<uint64_t>(*p - '0');
    if (whole > (UINT64_MAX - d) / 10) return false;
    whole = whole * 10 + d;
    ++p;
    ++digits;
  }
  if (digits == 0) return false;
  // Fraction digits kept as numerator / 10^k. At most 6 digits, so numerator x 2^40 (TiB) fits
  // in 64 bits.
  uint64_t frac = 0, frac_scale = 1;
  if (*p == '.') {
    ++p;
    int fdigits = 0;
    while (*p >= '0' && *p <= '9') {
      if (fdigits == 6) return false;
      frac = frac * 10 + static_cast<uint64_t>(*p - '0');
      frac_scale *= 10;
      ++p;
      ++fdigits;
    }
    if (fdigits == 0) return false;
  }
  const char* unit = p;
  while (*p != '\0' && *p != ' ') ++p;
  const size_t unit_len = static_cast<size_t>(p - unit);
  while (*p == ' ') ++p;
  if (*p != '\0') return false;
  const uint64_t mult = UnitMultiplier(unit, unit_len, style);
  if (mult == 0) return false;
  if (whole != 0 && whole > UINT64_MAX / mult) return false;
  uint64_t result = whole * mult;
  if (frac != 0) {
    // frac * mult / frac_scale must be a whole number of bytes.
    const uint64_t f = frac * mult;
    if (f % frac_scale != 0) return false;
    const uint64_t add = f / frac_scale;
    if (result > UINT64_MAX - add) return false;
    result += add;
  }
  *bytes = result;
  return true;
}

bool ParseLimitList(const char* text, UnitStyle style, LimitList* out) {
  if (text == nullptr || *text == '\0') return false;
  LimitList list;
  const char* p = text;
  while (true) {
    const char* comma = std::strchr(p, ',');
    size_t len = comma ? static_cast<size_t>(comma - p) : std::strlen(p);
    if (list.count == kMaxDevices || len == 0 || len >= 64) return false;
    char item[64];
    std::memcpy(item, p, len);
    item[len] = '\0';
    if (!ParseBytes(item, style, &list.bytes[list.count])) return false;
    ++list.count;
    if (!comma) break;
    p = comma + 1;
  }
  *out = list;
  return true;
}

LimitList LimitsFromEnvironment(GetEnvFn getenv_fn, bool* malformed) {
  *malformed = false;
  LimitList list;
  const char* tessera = getenv_fn("TESSERA_GPU_MEMORY_LIMIT");
  if (tessera != nullptr && *tessera != '\0') {
    if (ParseLimitList(tessera, UnitStyle::kTessera, &list)) return list;
    *malformed = true;
    list = LimitList{};
  }
  // HAMi-core: one value for all devices, per-device values override.
  uint64_t all = kNoLimit;
  bool have_all = false;
  const char* hami = getenv_fn("CUDA_DEVICE_MEMORY_LIMIT");
  if (hami != nullptr && *hami != '\0') {
    if (ParseBytes(hami, UnitStyle::kHami, &all)) {
      have_all = true;
    } else {
      *malformed = true;
    }
  }
  uint64_t per[kMaxDevices];
  uint32_t highest = 0;
  bool have_per = false;
  for (uint32_t d = 0; d < kMaxDevices; ++d) {
    per[d] = all;
    char name[40];
    std::snprintf(name, sizeof(name), "CUDA_DEVICE_MEMORY_LIMIT_%u", d);
    const char* v = getenv_fn(name);
    if (v == nullptr || *v == '\0') continue;
    if (ParseBytes(v, UnitStyle::kHami, &per[d])) {
      have_per = true;
      highest = d + 1;
    } else {
      *malformed = true;
    }
  }
  if (have_per) {
    // Devices past the highest per-device value keep the all-device value (or no limit).
    list.count = have_all ? kMaxDevices : highest;
    for (uint32_t d = 0; d < list.count; ++d) list.bytes[d] = per[d];
  } else if (have_all) {
    list.count = 1;
    list.bytes[0] = all;
  }
  return list;
}

}  // namespace tessera::capgpu
