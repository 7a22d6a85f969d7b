// The HTTP server's request log, in-process on a loopback port: one line per request with
// method, path, status, duration, bytes and peer; never the Authorization header, the query
// string or a body; agent-style routes only at debug.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "net/http_server.h"
#include "support/wait.h"

namespace tessera::net {
namespace {

using Json = nlohmann::json;

constexpr const char* kSecret = "s3cret-T0KEN";

class RequestLogTest : public ::testing::Test {
 protected:
  void Start(log::Level level, log::Format format, int workers = 0) {
    log::ConfigureForTesting(level, format, [this](std::string_view line) {
      std::lock_guard<std::mutex> l(mu_);
      lines_.emplace_back(line);
    });
    HttpServerOptions o;
    o.io_threads = 1;
    o.workers = workers;
    server_ = std::make_unique<HttpServer>(o);
    server_->Route("GET", "/v1/jobs/{id}", [](const HttpRequest& req, HttpResponse& res) {
      res.body = "{\"id\":\"" + req.params[0] + "\"}";
    });
    server_->Route("POST", "/v1/jobs", [](const HttpRequest&, HttpResponse& res) {
      res.status = 201;
      res.body = "{}";
    });
    server_->Route(
        "POST", "/v1/agent/heartbeat",
        [](const HttpRequest&, HttpResponse& res) { res.body = "{}"; }, log::Level::kDebug);
    auto port = server_->Bind("127.0.0.1", 0);
    ASSERT_TRUE(port.ok());
    thread_ = std::thread([this] { server_->Run(); });
    client_ = std::make_unique<httplib::Client>("127.0.0.1", *port);
    client_->set_bearer_token_auth(kSecret);
  }
  void TearDown() override {
    if (server_) server_->Stop();
    if (thread_.joinable()) thread_.join();
    log::Configure(log::Level::kInfo, log::Format::kText);
  }
  // The lines so far, once there are at least `n` (the line follows the response's write).
  std::vector<std::string> WaitLines(size_t n) {
    tessera::testing::WaitFor(
        [&] {
          std::lock_guard<std::mutex> l(mu_);
          return lines_.size() >= n;
        },
        std::chrono::seconds(2));
    std::lock_guard<std::mutex> l(mu_);
    return lines_;
  }

  std::mutex mu_;
  std::vector<std::string> lines_;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(RequestLogTest, JsonLineCarriesMethodPathStatusAndNeverTheToken) {
  Start(log::Level::kInfo, log::Format::kJson);
  auto r = client_->Get((std::string("/v1/jobs/j-7?token=") + kSecret).c_str());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  r = client_->Post("/v1/jobs", std::string("{\"env\":{\"KEY\":\"") + kSecret + "\"}}",
                    "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 201);
  const auto lines = WaitLines(2);
  ASSERT_EQ(lines.size(), 2u);
  for (const std::string& line : lines) {
    EXPECT_EQ(line.find(kSecret), std::string::npos) << line;
    EXPECT_EQ(line.find("Bearer"), std::string::npos) << line;
  }
  Json j = Json::parse(lines[0], nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << lines[0];
  EXPECT_EQ(j["component"], "http");
  EXPECT_EQ(j["level"], "info");
  EXPECT_EQ(j["message"], "request");
  EXPECT_EQ(j["method"], "GET");
  EXPECT_EQ(j["path"], "/v1/jobs/j-7");  // no query string
  EXPECT_EQ(j["status"], 200);
  EXPECT_EQ(j["bytes"], 12);  // the response body: {"id":"j-7"}
  EXPECT_TRUE(j["duration_us"].is_number_integer());
  EXPECT_GE(j["duration_us"].get<int64_t>(), 0);
  EXPECT_EQ(j["in_bytes"], 0);
  EXPECT_EQ(j["peer"].get<std::string>().rfind("127.0.0.1:", 0), 0u) << j.dump();
  j = Json::parse(lines[1], nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << lines[1];
  EXPECT_EQ(j["method"], "POST");
  EXPECT_EQ(j["path"], "/v1/jobs");
  EXPECT_EQ(j["status"], 201);
  EXPECT_GT(j["in_bytes"].get<int64_t>(), 0);
}

TEST_F(RequestLogTest, TextLineAndUnknownPathsAtInfo) {
  Start(log::Level::kInfo, log::Format::kText);
  auto r = client_->Get("/nowhere?secret=x");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  const auto lines = WaitLines(1);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find(" INFO  http: request method=GET path=/nowhere status=404 duration_us="),
            std::string::npos)
      << lines[0];
  EXPECT_NE(lines[0].find(" peer=127.0.0.1:"), std::string::npos) << lines[0];
  EXPECT_EQ(lines[0].find("secret"), std::string::npos) << lines[0];
}

TEST_F(RequestLogTest, AgentRoutesLogOnlyAtDebug) {
  Start(log::Level::kInfo, log::Format::kJson);
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(client_->Post("/v1/agent/heartbeat", "{}", "application/json"));
  ASSERT_TRUE(client_->Get("/v1/jobs/j-1"));
  auto lines = WaitLines(1);
  // Time for a heartbeat's line, were there one, to come too (a sleep on purpose: none may).
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  lines = WaitLines(1);
  ASSERT_EQ(lines.size(), 1u) << "heartbeats are not logged at info";
  EXPECT_EQ(Json::parse(lines[0])["path"], "/v1/jobs/j-1");

  TearDown();
  lines_.clear();
  Start(log::Level::kDebug, log::Format::kJson);
  ASSERT_TRUE(client_->Post("/v1/agent/heartbeat", "{}", "application/json"));
  lines = WaitLines(1);
  ASSERT_EQ(lines.size(), 1u);
  const Json j = Json::parse(lines[0]);
  EXPECT_EQ(j["level"], "debug");
  EXPECT_EQ(j["path"], "/v1/agent/heartbeat");
  EXPECT_EQ(j["status"], 200);
}

TEST_F(RequestLogTest, HandlersOnAWorkerPoolAreLoggedToo) {
  Start(log::Level::kInfo, log::Format::kJson, 2);
  ASSERT_TRUE(client_->Get("/v1/jobs/j-2"));
  const auto lines = WaitLines(1);
  ASSERT_EQ(lines.size(), 1u);
  const Json j = Json::parse(lines[0]);
  EXPECT_EQ(j["path"], "/v1/jobs/j-2");
  EXPECT_EQ(j["status"], 200);
}

TEST_F(RequestLogTest, NothingAtWarn) {
  Start(log::Level::kWarn, log::Format::kText);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(client_->Get("/v1/jobs/j-1"));
  // Time for a line, were there one, to come (a sleep on purpose: none may).
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::lock_guard<std::mutex> l(mu_);
  EXPECT_TRUE(lines_.empty());
}

}  // namespace
}  // namespace tessera::net
