// model/timestamp.h: one reader of dates and RFC 3339 UTC times.
#include "model/timestamp.h"

#include <cctype>
#include <cstdio>

namespace tessera {

// "2027-06-30", "2027-06-30T18:00:00Z" or with an offset ("+02:00"): milliseconds since the
// epoch (UTC), or an error saying the forms.
Result<int64_t> ParseTimestampMs(const std::string& text) {
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, se = 0;
  char tail[8] = {0};
  int consumed = 0;
  const Status bad = Status::InvalidArgument(
      "'" + text + "' is not a date (2027-06-30) or UTC time (2027-06-30T18:00:00Z)");
  if (std::sscanf(text.c_str(), "%4d-%2d-%2d%n", &y, &mo, &d, &consumed) != 3 || consumed != 10)
    return bad;
  int64_t offset_min = 0;
  if (text.size() > 10) {
    if (std::sscanf(text.c_str() + 10, "T%2d:%2d:%2d%7s", &h, &mi, &se, tail) != 4) return bad;
    const std::string z = tail;
    if (z == "Z") {
    } else if (z.size() == 6 && (z[0] == '+' || z[0] == '-') && z[3] == ':' &&
               std::isdigit(static_cast<unsigned char>(z[1])) &&
               std::isdigit(static_cast<unsigned char>(z[2])) &&
               std::isdigit(static_cast<unsigned char>(z[4])) &&
               std::isdigit(static_cast<unsigned char>(z[5]))) {
      offset_min =
          (z[0] == '-' ? -1 : 1) * (std::stoi(z.substr(1, 2)) * 60 + std::stoi(z.substr(4)));
    } else {
      return bad;
    }
  }
  if (y < 1970 || mo < 1 || mo > 12 || h < 0 || h > 23 || mi < 0 || mi > 59 || se < 0 || se > 60)
    return bad;
  // A day the month has: 2030-02-30 would otherwise be read as 2030-03-02.
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (d < 1 || d > kDays[mo - 1] + (mo == 2 && leap ? 1 : 0)) return bad;
  // Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
  const int yy = mo <= 2 ? y - 1 : y;
  const int era = yy / 400;
  const int yoe = yy - era * 400;
  const int doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  const int64_t days = int64_t{era} * 146097 + doe - 719468;
  return ((days * 24 + h) * 60 + mi - offset_min) * 60'000 + int64_t{se} * 1000;
}

}  // namespace tessera
