#include "model/quantity.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

struct MemCase {
  const char* text;
  MiB want;
};

TEST(ParseMemoryMiBTest, AcceptsBinaryAndDecimalUnits) {
  const MemCase cases[] = {
      {"8GiB", 8192},    {"8Gi", 8192},        {"512MiB", 512}, {"1.5GiB", 1536},
      {"1TiB", 1048576}, {"1048576KiB", 1024}, {"80GB", 76294}, {"1B", 1},
      {"0.5MiB", 1},     {"2048Mi", 2048},     {"0GiB", 0},     {"9.75GiB", 9984},
  };
  for (const auto& c : cases) {
    Result<MiB> got = ParseMemoryMiB(c.text);
    ASSERT_TRUE(got.ok()) << c.text << ": " << got.status().ToString();
    EXPECT_EQ(*got, c.want) << c.text;
  }
}

TEST(ParseMemoryMiBTest, RejectsWithMessageNamingTheText) {
  for (const char* bad : {"", "8", "GiB", "8XB", "1.2.3GiB", "-1GiB", "8 GiB", "abc"}) {
    Result<MiB> got = ParseMemoryMiB(bad);
    EXPECT_FALSE(got.ok()) << bad;
    EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
    if (*bad != '\0') {
      EXPECT_NE(got.status().message().find(bad), std::string::npos) << got.status().message();
    }
  }
}

TEST(ParseMilliTest, FractionsAndMilliSuffix) {
  EXPECT_EQ(*ParseMilli("0.25"), 250);
  EXPECT_EQ(*ParseMilli("500m"), 500);
  EXPECT_EQ(*ParseMilli("2"), 2000);
  EXPECT_EQ(*ParseMilli("1.5"), 1500);
  EXPECT_EQ(*ParseMilli("0.2500"), 250);
  EXPECT_EQ(*ParseMilli(".5"), 500);
}

TEST(ParseMilliTest, RejectsFinerThanMilliAndGarbage) {
  EXPECT_FALSE(ParseMilli("0.0005").ok());
  EXPECT_FALSE(ParseMilli("1.5m").ok());
  EXPECT_FALSE(ParseMilli("x").ok());
  EXPECT_FALSE(ParseMilli("").ok());
  EXPECT_FALSE(ParseMilli("-1").ok());
  EXPECT_FALSE(ParseMilli("99999999999999999999").ok());
}

TEST(FormatTest, RoundTrips) {
  EXPECT_EQ(FormatMiB(8192), "8GiB");
  EXPECT_EQ(FormatMiB(1536), "1.5GiB");
  EXPECT_EQ(FormatMiB(9984), "9.75GiB");
  EXPECT_EQ(FormatMiB(500), "500MiB");
  EXPECT_EQ(FormatMilli(250), "0.25");
  EXPECT_EQ(FormatMilli(2000), "2");
  EXPECT_EQ(FormatMilli(1005), "1.005");
  for (const char* s : {"8GiB", "1.5GiB", "9.75GiB", "500MiB"}) {
    EXPECT_EQ(FormatMiB(*ParseMemoryMiB(s)), s);
  }
}

// Found by fuzz/api_requests: the largest memory a request may name was formatted with an
// overflowing mib * 100.
TEST(FormatTest, TheLargestQuantitiesFormatExactly) {
  Result<MiB> big = ParseMemoryMiB("1333333333333330GiB");
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(FormatMiB(*big), "1333333333333330GiB");
  EXPECT_EQ(FormatMiB(int64_t{1} << 61), std::to_string(int64_t{1} << 41) + "TiB");
  EXPECT_EQ(FormatMiB((int64_t{1} << 61) - 256 * 3),
            std::to_string(((int64_t{1} << 61) - 768) / 1024) + ".25GiB");
}

TEST(ResourcesTest, ExactArithmetic) {
  Resources node{
      .gpu_milli = 2000, .gpu_memory_mib = 163840, .cpu_milli = 16000, .memory_mib = 65536};
  Resources job{.gpu_milli = 500, .gpu_memory_mib = 8192, .cpu_milli = 500, .memory_mib = 1024};
  EXPECT_TRUE(node.Covers(job));
  Resources left = node - job;
  EXPECT_EQ(left.gpu_milli, 1500);
  EXPECT_EQ(left + job, node);
  EXPECT_FALSE(job.Covers(node));
}

}  // namespace
}  // namespace tessera
