// A small client of the Kubernetes API: HTTPS (OpenSSL, through cpp-httplib) with the
// connection's CA, client certificate or bearer token (a token file is re-read before every
// request, so a rotated service-account token is picked up), retries with backoff, and watch
// streams read line by line.
//
// Retries ("API concepts": 429 Too Many Requests with Retry-After, and 5xx): a request that gets
// 429, 500, 502, 503 or 504, or no answer at all, is sent again after Retry-After (capped) or an
// exponential backoff, up to `attempts` times; every other status is returned as it is, for the
// caller to read (404, 409, 410, 422 ...).
//
// Thread-safety: Call may be used from several threads (one connection each at a time, guarded);
// Stream runs on its own connection; Stop() may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "backends/kubernetes/connection.h"
#include "common/status.h"

namespace httplib {
class ClientImpl;
}

namespace tessera::backends::kube {

struct Response {
  int status = 0;
  std::string body;
};

struct ClientOptions {
  int attempts = 6;             // tries for a retryable answer (429, 5xx)
  int unanswered_attempts = 2;  // tries when no answer comes at all
  int64_t connect_timeout_ms = 3000;
  // After a call got no answer at all, calls fail at once for this long (the engine's pass is not
  // held up job by job by a server that is down).
  int64_t down_for_ms = 10000;
  int64_t backoff_ms = 100;  // the first pause; doubles up to max_backoff_ms
  int64_t max_backoff_ms = 5000;
  int64_t timeout_ms = 30000;  // connect/read timeout of one request
};

class Client {
 public:
  // Fails when the connection's certificates or key cannot be parsed.
  static Result<std::unique_ptr<Client>> Make(const Connection& c, ClientOptions o = {});
  ~Client();

  // `method` GET/POST/PUT/PATCH/DELETE on `path` (with its query). A status of any kind comes
  // back as a Response; an error only when no answer came after all attempts.
  Result<Response> Call(const std::string& method, const std::string& path,
                        const std::string& body = "",
                        const std::string& content_type = "application/json");

  // A streamed GET (a watch): on_line for each line of the body as it arrives; returns the
  // HTTP status once the stream ends (the server ended it, the connection dropped, on_line
  // returned false, or Stop()). `read_timeout_s`: how long without bytes ends it.
  Result<int> Stream(const std::string& path, int read_timeout_s,
                     const std::function<bool(const std::string&)>& on_line);

  // Ends a Stream in progress and refuses new ones.
  void Stop();

  const Connection& connection() const { return conn_; }
  // Requests sent (each attempt counts), for the benchmarks.
  int64_t requests() const { return requests_.load(); }

 private:
  Client(Connection c, ClientOptions o);
  Result<std::string> Token() const;

  Connection conn_;
  ClientOptions opt_;
  std::string host_;
  int port_ = 0;
  bool https_ = false;
  std::string connect_to_;  // the address to connect to when tls_server_name replaces the host
  Result<std::shared_ptr<httplib::ClientImpl>> NewConnection(int64_t read_timeout_ms) const;

  std::mutex mu_;  // guards the kept-alive connection of Call
  std::shared_ptr<httplib::ClientImpl> call_conn_;
  std::mutex stream_mu_;
  std::shared_ptr<httplib::ClientImpl> stream_conn_;
  std::atomic<bool> stopped_{false};
  std::atomic<int64_t> requests_{0};
  std::atomic<int64_t> down_until_ms_{0};  // steady-clock ms; see ClientOptions::down_for_ms
  std::string down_reason_;                // guarded by mu_
};

// Percent-encodes `s` for a query parameter value.
std::string QueryEscape(const std::string& s);

}  // namespace tessera::backends::kube
