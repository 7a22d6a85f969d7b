#include "common/status.h"

#include <gtest/gtest.h>

#include "common/enum_names.h"

namespace tessera {
namespace {

TEST(StatusTest, OkIsDefault) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "ok");
}

TEST(StatusTest, ErrorCarriesCodeAndMessage) {
  Status s = Status::InvalidArgument("bad quantity '8XB'");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.ToString(), "invalid argument: bad quantity '8XB'");
}

TEST(ResultTest, HoldsValueOrError) {
  Result<int> good = 7;
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 7);
  Result<int> bad = Status::NotFound("no such model 'X'");
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kNotFound);
}

enum class Shade { kLight, kDark, kNone };
constexpr auto kShadeNames = NamesUpTo<Shade::kNone>("light", "dark", "none");

TEST(EnumNamesTest, NamesBothWaysAndLists) {
  static_assert(kShadeNames.Of(Shade::kDark, "?") == std::string_view("dark"));
  EXPECT_STREQ(kShadeNames.Of(Shade::kLight, "?"), "light");
  EXPECT_STREQ(kShadeNames.Of(static_cast<Shade>(7), "?"), "?");
  EXPECT_STREQ(kShadeNames.Of(static_cast<Shade>(-1), "unknown"), "unknown");
  EXPECT_EQ(kShadeNames.Find("none"), Shade::kNone);
  EXPECT_EQ(kShadeNames.Find("Dark"), std::nullopt);
  EXPECT_EQ(kShadeNames.Find("Dark", /*ignore_case=*/true), Shade::kDark);
  EXPECT_EQ(kShadeNames.Find(""), std::nullopt);
  EXPECT_EQ(kShadeNames.List(), "light, dark, none");
  EXPECT_TRUE(EqualIgnoringAsciiCase("MiG", "mig"));
  EXPECT_FALSE(EqualIgnoringAsciiCase("mig", "migs"));
}

TEST(StatusTest, CodeNames) {
  EXPECT_STREQ(StatusCodeName(StatusCode::kOk), "ok");
  EXPECT_STREQ(StatusCodeName(StatusCode::kPermissionDenied), "permission denied");
  EXPECT_STREQ(StatusCodeName(StatusCode::kInternal), "internal");
  EXPECT_STREQ(StatusCodeName(static_cast<StatusCode>(99)), "unknown");
}

}  // namespace
}  // namespace tessera
