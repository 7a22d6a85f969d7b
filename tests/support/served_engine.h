// An api::Engine over a SQLite store in a test's directory, served in this process by a real
// ApiServer on a free port of 127.0.0.1 (its own thread), with an HTTP client for it: what tests
// of the HTTP surface start (roles, OpenID Connect, `tessera login`, the dashboard's sign-in).
// Stop(), or the destructor, stops the server and joins its thread. Tests that use it link
// tessera_api and tessera_httplib.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "api/server.h"
#include "store/store.h"
#include "support/wait.h"

namespace tessera::testing {

// Milliseconds since the epoch by the wall clock (an engine clock for tests that talk to real
// processes, which read the same clock).
inline int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class ServedEngine {
 public:
  ServedEngine() = default;
  ServedEngine(const ServedEngine&) = delete;
  ServedEngine& operator=(const ServedEngine&) = delete;
  ~ServedEngine() { Stop(); }

  // Parses `config_yaml` (then lets `adjust` change it, as `tessera serve` wires parts in), opens
  // the engine over DIR/t.db with `clock` and serves it; fails, saying why, when any step does or
  // the server does not answer /v1/health within 2 s. Starting again over the same DIR is a
  // restart over the same store.
  ::testing::AssertionResult Start(const std::string& dir, const std::string& config_yaml,
                                   api::Clock clock = WallMs,
                                   const std::function<void(api::EngineConfig&)>& adjust = {}) {
    Stop();
    auto config = api::ParseConfig(config_yaml);
    if (!config.ok()) return ::testing::AssertionFailure() << config.status().ToString();
    if (adjust) adjust(*config);
    auto store = store::Store::Open(dir + "/t.db");
    if (!store.ok()) return ::testing::AssertionFailure() << store.status().ToString();
    auto engine = api::Engine::Open(*config, std::move(*store), dir, std::move(clock));
    if (!engine.ok()) return ::testing::AssertionFailure() << engine.status().ToString();
    engine_ = std::move(*engine);
    server_ = std::make_unique<api::ApiServer>(engine_.get());
    auto port = server_->Bind("127.0.0.1", 0);
    if (!port.ok()) return ::testing::AssertionFailure() << port.status().ToString();
    port_ = *port;
    thread_ = std::thread([this] { server_->Run(50); });
    client_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
    if (!WaitFor([&] { return static_cast<bool>(client_->Get("/v1/health")); },
                 std::chrono::seconds(2))) {
      return ::testing::AssertionFailure() << "the server on port " << port_ << " did not answer";
    }
    return ::testing::AssertionSuccess();
  }
  void Stop() {
    if (server_) server_->Stop();
    if (thread_.joinable()) thread_.join();
    client_.reset();
    server_.reset();
    engine_.reset();
  }

  // Sends `method` (GET, POST, PUT or DELETE) to `path` with `token` as its bearer (none when
  // empty); the answer's status (0: no answer), its body in body().
  int Send(const std::string& method, const std::string& path, const std::string& token,
           const std::string& body = "", const std::string& content_type = "application/json") {
    httplib::Headers h;
    if (!token.empty()) h.emplace("Authorization", "Bearer " + token);
    httplib::Result r = method == "GET"    ? client_->Get(path.c_str(), h)
                        : method == "POST" ? client_->Post(path.c_str(), h, body, content_type)
                        : method == "PUT"  ? client_->Put(path.c_str(), h, body, content_type)
                                           : client_->Delete(path.c_str(), h);
    body_ = r ? r->body : "";
    return r ? r->status : 0;
  }
  const std::string& body() const { return body_; }

  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  api::Engine& engine() { return *engine_; }
  httplib::Client& client() { return *client_; }

 private:
  std::unique_ptr<api::Engine> engine_;
  std::unique_ptr<api::ApiServer> server_;
  std::unique_ptr<httplib::Client> client_;
  std::thread thread_;
  int port_ = 0;
  std::string body_;
};

}  // namespace tessera::testing
