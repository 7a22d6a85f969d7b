// A base fixture for tests against a real `tessera serve` process: start it over DIR/config.yaml
// (restarts keep the port), call the API with a bearer token, read a job's state and output, wait
// for a condition.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

#include "proc.h"

namespace tessera::testing {

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class ServeFixture : public ::testing::Test {
 protected:
  using Json = nlohmann::json;

  // Starts `tessera serve` with dir_/config.yaml and dir_/data, on port_ once it has one.
  void StartServer() {
    server_ = std::make_unique<Proc>(
        std::vector<std::string>{kTessera, "serve", "--config", dir_ + "/config.yaml", "--data",
                                 dir_ + "/data", "--listen", "127.0.0.1:" + std::to_string(port_)},
        dir_ + "/serve.log");
    port_ = server_->WaitForPort();
    ASSERT_GT(port_, 0) << server_->Log();
    client_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
  }
  // The parsed JSON reply (its body as a string when not JSON; null when there was no answer).
  Json Call(const std::string& method, const std::string& path, const Json& body = Json::object(),
            const std::string& token = "alice-token-1") {
    httplib::Headers h = {{"Authorization", "Bearer " + token}};
    auto r = method == "POST" ? client_->Post(path.c_str(), h, body.dump(), "application/json")
                              : client_->Get(path.c_str(), h);
    if (!r) return Json();
    Json j = Json::parse(r->body, nullptr, false);
    return j.is_discarded() ? Json(r->body) : j;
  }
  Json Job(const std::string& id) { return Call("GET", "/v1/jobs/" + id); }
  std::string State(const std::string& id) {
    Json j = Job(id);
    return j.is_object() ? j.value("state", "") : "";
  }
  std::string Output(const std::string& id) {
    auto out = client_->Get(("/v1/jobs/" + id + "/output").c_str(),
                            {{"Authorization", "Bearer alice-token-1"}});
    return out ? out->body : "";
  }
  // Polls f every 50 ms until it holds or timeout_ms (default wait_ms_) passes.
  template <typename F>
  bool WaitFor(F f, int timeout_ms = 0) {
    if (timeout_ms <= 0) timeout_ms = wait_ms_;
    for (int t = 0; t < timeout_ms; t += 50) {
      if (f()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  std::string dir_;
  int port_ = 0;
  int wait_ms_ = 15000;
  std::unique_ptr<Proc> server_;
  std::unique_ptr<httplib::Client> client_;
};

}  // namespace tessera::testing
