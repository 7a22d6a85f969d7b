// The one reader of dates and UTC times (model/timestamp.h): what it takes, and the dates that do
// not exist, which it refuses instead of rolling them into the next month.
#include "model/timestamp.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

TEST(Timestamp, ReadsDatesAndUtcTimes) {
  EXPECT_EQ(*ParseTimestampMs("1970-01-01"), 0);
  EXPECT_EQ(*ParseTimestampMs("1970-01-02"), 86'400'000);
  EXPECT_EQ(*ParseTimestampMs("1970-01-01T00:00:01Z"), 1000);
  EXPECT_EQ(*ParseTimestampMs("1970-01-01T02:00:00+02:00"), 0);
  EXPECT_EQ(*ParseTimestampMs("2028-02-29"), *ParseTimestampMs("2028-02-28") + 86'400'000)
      << "2028 is a leap year";
  EXPECT_EQ(*ParseTimestampMs("2000-02-29"), *ParseTimestampMs("2000-03-01") - 86'400'000)
      << "2000 is a leap year (divisible by 400)";
  EXPECT_EQ(*ParseTimestampMs("2030-12-31T23:59:59Z") + 1000, *ParseTimestampMs("2031-01-01"));
}

TEST(Timestamp, RefusesDatesAndTimesThatDoNotExist) {
  for (const char* text :
       {"2030-02-30", "2030-02-29", "2100-02-29", "2030-04-31", "2030-06-31", "2030-09-31",
        "2030-11-31", "2030-13-01", "2030-00-10", "2030-01-00", "2030-01-32",
        "2030-01-01T24:00:00Z", "2030-01-01T-1:00:00Z", "2030-01-01T10:-5:00Z",
        "2030-01-01T10:00:-1Z", "2030-01-01T10:60:00Z", "1969-12-31", "next-week", ""}) {
    const Result<int64_t> at = ParseTimestampMs(text);
    EXPECT_FALSE(at.ok()) << "'" << text << "' read as " << (at.ok() ? *at : 0);
    if (!at.ok()) {
      EXPECT_NE(at.status().message().find(std::string("'") + text + "'"), std::string::npos)
          << at.status().message();
    }
  }
}

}  // namespace
}  // namespace tessera
