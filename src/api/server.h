// ApiServer: the control plane's HTTP + JSON API over an Engine (cpp-httplib).
//
// Every request but GET /v1/health carries "Authorization: Bearer <token>"; tokens are looked up
// by their SHA-256. Errors are 4xx/5xx with {"error": "..."} naming the problem; a rejected
// request changes nothing. Bodies over 1 MiB are refused (413).
//
// The route table (Routes()) is the single list the server registers and the OpenAPI
// description (docs/openapi.json) is checked against by a test.
//
// Thread-safety: Run() blocks serving on a thread pool; Stop() may be called from any thread.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "api/engine.h"

namespace httplib {
class Server;
}

namespace tessera::api {

// The dashboard page served at `/` (dashboard.cc).
const char* DashboardHtml();

struct RouteInfo {
  std::string method;        // GET, POST, PUT
  std::string openapi_path;  // "/v1/jobs/{id}"
};

class ApiServer {
 public:
  explicit ApiServer(Engine* engine);
  ~ApiServer();

  // Binds to host:port (port 0: any free port). Returns the port bound.
  Result<int> Bind(const std::string& host, int port);
  // Serves until Stop(). Also runs the engine's Tick() every `tick_ms`.
  void Run(int tick_ms = 200);
  void Stop();

  static const std::vector<RouteInfo>& Routes();

 private:
  Engine* engine_;
  std::unique_ptr<httplib::Server> http_;
  std::atomic<bool> stop_{false};
  std::thread ticker_;
};

}  // namespace tessera::api
