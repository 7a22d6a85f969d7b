// The structured log: JSON lines that parse and carry time, level, component, message and the
// fields; the text form; level filtering; escaping that keeps one event on one line.
#include "common/log.h"

#include <gtest/gtest.h>

#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

namespace tessera::log {
namespace {

using Json = nlohmann::json;

class LogTest : public ::testing::Test {
 protected:
  void Capture(Level level, Format format) {
    ConfigureForTesting(level, format, [this](std::string_view line) {
      std::lock_guard<std::mutex> l(mu_);
      lines_.emplace_back(line);
    });
  }
  void TearDown() override { Configure(Level::kInfo, Format::kText); }
  std::vector<std::string> Lines() {
    std::lock_guard<std::mutex> l(mu_);
    return lines_;
  }

  std::mutex mu_;
  std::vector<std::string> lines_;
};

TEST_F(LogTest, JsonLineParsesAndCarriesTimeLevelComponentMessageAndFields) {
  Capture(Level::kInfo, Format::kJson);
  const Logger logger("serve");
  const std::string node = "n-1";
  logger.Info(
      "listening on http://127.0.0.1:8080",
      {{"port", 8080}, {"node", node}, {"ratio", 0.5}, {"leader", true}, {"bytes", size_t{42}}});
  const auto lines = Lines();
  ASSERT_EQ(lines.size(), 1u);
  ASSERT_FALSE(lines[0].empty());
  EXPECT_EQ(lines[0].back(), '\n');
  EXPECT_EQ(lines[0].find('\n'), lines[0].size() - 1) << "one line per event";
  const Json j = Json::parse(lines[0], nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << lines[0];
  EXPECT_EQ(j["level"], "info");
  EXPECT_EQ(j["component"], "serve");
  EXPECT_EQ(j["message"], "listening on http://127.0.0.1:8080");
  EXPECT_EQ(j["port"], 8080);
  EXPECT_EQ(j["node"], "n-1");
  EXPECT_EQ(j["ratio"], 0.5);
  EXPECT_EQ(j["leader"], true);
  EXPECT_EQ(j["bytes"], 42);
  // RFC 3339, UTC, milliseconds.
  const std::string time = j["time"];
  EXPECT_TRUE(std::regex_match(time, std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)")))
      << time;
}

TEST_F(LogTest, JsonEscapesQuotesControlCharactersAndBytesThatAreNotUtf8) {
  Capture(Level::kDebug, Format::kJson);
  const Logger logger("http");
  const std::string path =
      std::string("/v1/jobs/a\"b\\c\nd\x01") + "\xff\xfe" + "\xc3\xa9";  // é is kept
  logger.Warn("two\nlines \"quoted\"", {{"path", path}, {"key with \"quote\"", "v"}});
  const auto lines = Lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].find('\n'), lines[0].size() - 1) << lines[0];
  const Json j = Json::parse(lines[0], nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << lines[0];
  EXPECT_EQ(j["level"], "warn");
  EXPECT_EQ(j["message"], "two\nlines \"quoted\"");
  EXPECT_EQ(j["path"], "/v1/jobs/a\"b\\c\nd\x01\xef\xbf\xbd\xef\xbf\xbd\xc3\xa9");
  EXPECT_EQ(j["key with \"quote\""], "v");
}

TEST_F(LogTest, TextLineHasTimeLevelComponentMessageAndQuotedFields) {
  Capture(Level::kInfo, Format::kText);
  const Logger logger("agent");
  logger.Info("registered with the control plane; heartbeat every 1000 ms",
              {{"node", "n1"},
               {"server", "http://127.0.0.1:1"},
               {"note", "two words"},
               {"empty", ""},
               {"n", -3}});
  logger.Error("job j-1 ended:\nbadly");
  const auto lines = Lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_TRUE(std::regex_match(
      lines[0],
      std::regex(
          R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z INFO  agent: registered with the control plane; )"
          R"(heartbeat every 1000 ms node=n1 server=http://127\.0\.0\.1:1 note="two words" empty="" n=-3\n)")))
      << lines[0];
  EXPECT_NE(lines[1].find(" ERROR agent: job j-1 ended:\\nbadly\n"), std::string::npos) << lines[1];
  EXPECT_EQ(lines[1].find('\n'), lines[1].size() - 1);
}

TEST_F(LogTest, LinesBelowTheLevelAreNotWritten) {
  Capture(Level::kInfo, Format::kJson);
  const Logger logger("http");
  EXPECT_FALSE(Enabled(Level::kDebug));
  EXPECT_TRUE(Enabled(Level::kInfo));
  logger.Debug("request", {{"path", "/v1/agent/heartbeat"}});
  logger.Info("request", {{"path", "/v1/jobs"}});
  logger.Warn("slow");
  logger.Error("failed");
  auto lines = Lines();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(Json::parse(lines[0])["path"], "/v1/jobs");
  EXPECT_EQ(Json::parse(lines[1])["level"], "warn");
  EXPECT_EQ(Json::parse(lines[2])["level"], "error");

  lines_.clear();
  Capture(Level::kError, Format::kText);
  logger.Info("no");
  logger.Warn("no");
  logger.Error("yes");
  ASSERT_EQ(Lines().size(), 1u);
  EXPECT_NE(Lines()[0].find("ERROR http: yes"), std::string::npos);

  lines_.clear();
  Capture(Level::kDebug, Format::kText);
  EXPECT_TRUE(Enabled(Level::kDebug));
  logger.Debug("request");
  ASSERT_EQ(Lines().size(), 1u);
  EXPECT_NE(Lines()[0].find(" DEBUG http: request\n"), std::string::npos) << Lines()[0];
  EXPECT_EQ(CurrentLevel(), Level::kDebug);
  EXPECT_EQ(CurrentFormat(), Format::kText);
}

TEST(LogParseTest, LevelsAndFormatsByName) {
  EXPECT_EQ(*ParseLevel("debug"), Level::kDebug);
  EXPECT_EQ(*ParseLevel("info"), Level::kInfo);
  EXPECT_EQ(*ParseLevel("warn"), Level::kWarn);
  EXPECT_EQ(*ParseLevel("warning"), Level::kWarn);
  EXPECT_EQ(*ParseLevel("error"), Level::kError);
  EXPECT_FALSE(ParseLevel("loud").ok());
  EXPECT_NE(ParseLevel("loud").status().message().find("debug, info, warn, error"),
            std::string::npos);
  EXPECT_EQ(*ParseFormat("text"), Format::kText);
  EXPECT_EQ(*ParseFormat("json"), Format::kJson);
  EXPECT_FALSE(ParseFormat("xml").ok());
  EXPECT_STREQ(LevelName(Level::kWarn), "warn");
}

}  // namespace
}  // namespace tessera::log
