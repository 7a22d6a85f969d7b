#include "capgpu/limits.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace tessera::capgpu {
namespace {

constexpr uint64_t kGiB = 1ULL << 30;

struct Case {
  const char* text;
  UnitStyle style;
  bool ok;
  uint64_t bytes;
};

TEST(Limits, ParseBytesTable) {
  const Case cases[] = {
      {"8GiB", UnitStyle::kTessera, true, 8 * kGiB},
      {"8Gi", UnitStyle::kTessera, true, 8 * kGiB},
      {"512MiB", UnitStyle::kTessera, true, 512ULL << 20},
      {"1.5GiB", UnitStyle::kTessera, true, 3 * kGiB / 2},
      {"8GB", UnitStyle::kTessera, true, 8000000000ULL},
      {"8G", UnitStyle::kTessera, true, 8000000000ULL},
      {"4294967296", UnitStyle::kTessera, true, 4 * kGiB},
      {"4g", UnitStyle::kHami, true, 4 * kGiB},
      {"4G", UnitStyle::kHami, true, 4 * kGiB},
      {"3000m", UnitStyle::kHami, true, 3000ULL << 20},
      {"1024", UnitStyle::kHami, true, 1024},
      {"1TiB", UnitStyle::kHami, true, 1024 * kGiB},
      {"", UnitStyle::kTessera, false, 0},
      {"GiB", UnitStyle::kTessera, false, 0},
      {"8 parsecs", UnitStyle::kTessera, false, 0},
      {"-1GiB", UnitStyle::kTessera, false, 0},
      {"0.5", UnitStyle::kTessera, false, 0},  // half a byte
      {"99999999999999999999", UnitStyle::kTessera, false, 0},
      {"20000000TiB", UnitStyle::kTessera, false, 0},
  };
  for (const Case& c : cases) {
    uint64_t bytes = 0;
    EXPECT_EQ(ParseBytes(c.text, c.style, &bytes), c.ok) << c.text;
    if (c.ok) {
      EXPECT_EQ(bytes, c.bytes) << c.text;
    }
  }
}

TEST(Limits, ParseList) {
  LimitList l;
  ASSERT_TRUE(ParseLimitList("8GiB,4GiB", UnitStyle::kTessera, &l));
  EXPECT_EQ(l.count, 2u);
  EXPECT_EQ(l.bytes[1], 4 * kGiB);
  EXPECT_FALSE(ParseLimitList("8GiB,", UnitStyle::kTessera, &l));
  EXPECT_FALSE(ParseLimitList("", UnitStyle::kTessera, &l));
  std::string many;
  for (int i = 0; i < 17; ++i) many += i ? ",1GiB" : "1GiB";
  EXPECT_FALSE(ParseLimitList(many.c_str(), UnitStyle::kTessera, &l));
}

std::map<std::string, std::string>* g_env;
const char* FakeGetEnv(const char* name) {
  auto it = g_env->find(name);
  return it == g_env->end() ? nullptr : it->second.c_str();
}

LimitList FromEnv(std::map<std::string, std::string> env, bool* malformed) {
  g_env = &env;
  LimitList l = LimitsFromEnvironment(FakeGetEnv, malformed);
  g_env = nullptr;
  return l;
}

TEST(Limits, EnvironmentPrecedence) {
  bool malformed = false;
  LimitList l = FromEnv({}, &malformed);
  EXPECT_EQ(l.count, 0u);

  l = FromEnv({{"TESSERA_GPU_MEMORY_LIMIT", "8GiB"}, {"CUDA_DEVICE_MEMORY_LIMIT", "1g"}},
              &malformed);
  EXPECT_EQ(l.count, 1u);
  EXPECT_EQ(l.bytes[0], 8 * kGiB);

  l = FromEnv({{"CUDA_DEVICE_MEMORY_LIMIT", "2g"}}, &malformed);
  EXPECT_EQ(l.count, 1u);
  EXPECT_EQ(l.bytes[0], 2 * kGiB);

  // HAMi-core per-device values override the all-device value.
  l = FromEnv({{"CUDA_DEVICE_MEMORY_LIMIT", "2g"}, {"CUDA_DEVICE_MEMORY_LIMIT_1", "1g"}},
              &malformed);
  EXPECT_EQ(l.count, kMaxDevices);
  EXPECT_EQ(l.bytes[0], 2 * kGiB);
  EXPECT_EQ(l.bytes[1], 1 * kGiB);
  EXPECT_EQ(l.bytes[2], 2 * kGiB);

  l = FromEnv({{"CUDA_DEVICE_MEMORY_LIMIT_0", "3000m"}}, &malformed);
  EXPECT_EQ(l.count, 1u);
  EXPECT_EQ(l.bytes[0], 3000ULL << 20);
  EXPECT_FALSE(malformed);

  l = FromEnv({{"TESSERA_GPU_MEMORY_LIMIT", "lots"}, {"CUDA_DEVICE_MEMORY_LIMIT", "1g"}},
              &malformed);
  EXPECT_TRUE(malformed);
  EXPECT_EQ(l.bytes[0], kGiB);
}

}  // namespace
}  // namespace tessera::capgpu
