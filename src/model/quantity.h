// Parsing and printing of human quantities into fixed units, exactly.
//
//   ParseMemoryMiB("8GiB") == 8192      ParseMemoryMiB("512Mi") == 512
//   ParseMemoryMiB("1.5GiB") == 1536    ParseMemoryMiB("80GB") == 76294 (decimal GB, rounded up)
//   ParseMilli("0.25") == 250           ParseMilli("500m") == 500     ParseMilli("2") == 2000
//
// Errors name the text and what is wrong with it (a negative value says so: "'-2' is negative"). No
// floating point is involved: decimals are parsed digit by digit into integers.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "model/resources.h"

namespace tessera {

// Memory with a unit: B, KiB/Ki, MiB/Mi, GiB/Gi, TiB/Ti (binary) or KB/K, MB/M, GB/G, TB/T
// (decimal). A unit is required. Fractions of a MiB are rounded up (a request never gets less
// than it asked for).
Result<MiB> ParseMemoryMiB(std::string_view text);

// A count in thousandths: "0.25" -> 250, "500m" -> 500, "3" -> 3000. Used for GPU fractions
// and CPU cores. More than three decimals is an error (finer than the unit).
Result<int64_t> ParseMilli(std::string_view text);

// A non-negative integer with no sign, no spaces and no trailing text.
Result<int64_t> ParseNonNegativeInt(std::string_view text);

// "8GiB", "1.5GiB", "512MiB": the shortest exact form.
std::string FormatMiB(MiB mib);
// "0.25", "2", "1.5": milli-units printed as a decimal, exactly.
std::string FormatMilli(int64_t milli);

}  // namespace tessera
