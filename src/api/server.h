// ApiServer: the control plane's HTTP + JSON API over an Engine, served by net::HttpServer
// (event-driven: kept-alive agent connections do not hold threads).
//
// Every request but GET /v1/health carries "Authorization: Bearer <token>"; tokens are looked up
// by their SHA-256. Errors are 4xx/5xx with {"error": "..."} naming the problem; a rejected
// request changes nothing. Bodies over 1 MiB are refused (413).
//
// The routes are registered once, from one table (api/routes.h: each route's method, path, who
// may call it, request-log level and handler); Routes() is derived from it, and tests check it
// against the OpenAPI description (docs/openapi.json, each operation's x-tessera-access) and
// against what each role gets over HTTP (tests/api/authz_matrix_test.cc).
//
// Thread-safety: Run() blocks serving; handlers run on a worker pool; Stop() may be called from
// any thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "api/engine.h"
#include "api/executors.h"
#include "api/request_slots.h"
#include "api/routes.h"
#include "net/http_server.h"

namespace tessera::api {

// The dashboard page served at `/` (src/api/dashboard/web, embedded at build: dashboard/README.md).
const char* DashboardHtml();

struct LeaderGate;  // server.cc

struct RouteInfo {
  std::string method;                 // GET, POST, PUT
  std::string openapi_path;           // "/v1/jobs/{id}"
  Access access = Access::kIdentity;  // who may call it, enforced before its handler runs
  log::Level request_log = log::Level::kInfo;
};

struct ApiServerOptions {
  // Threads that read and answer requests, each with its own event loop (a connection stays on
  // one). Heartbeats, submissions and order watches run on them: microseconds under the engine's
  // mutex, and none holds a thread while the store writes (a submission or a heartbeat with exits
  // is answered by the commit writer once durable, an order watch when its node has news).
  // 0: one per core. Measured at 10,000 agents on 2 cores (bench/README.md, session of
  // 2026-12-01, seventh; 60 s runs): 2 threads gave a heartbeat p99 of 14 ms against 34 ms
  // with 4; more threads than cores cost more in switching than they save. `tessera serve
  // --threads N`.
  int io_threads = 0;
  // Threads for every other route (registration, cancels, output, lists, history, metrics,
  // the dashboard): they may wait for the store or the disk, and a loop that waited would stall
  // every connection on it.
  int workers = 4;
  int idle_timeout_ms = 10 * 60 * 1000;
  // Open connections at most (0: the open-file limit less headroom) and per peer address
  // (loopback not counted unless `limit_loopback_peers`); over either a connection is closed at
  // once (net/http_server.h). `tessera serve --max-connections N --max-connections-per-peer N`:
  // raise the per-peer cap for agents behind one NAT address; `--limit-loopback-peers` on a
  // host whose local users are not trusted (each loopback address is then a peer of its own).
  int64_t max_connections = 0;
  int64_t max_connections_per_peer = 512;
  bool limit_loopback_peers = false;
  // SIGINT and SIGTERM stop Run() (tessera serve). A StandbyServer catches them itself
  // (signalled() says whether one came).
  bool stop_on_signals = false;
  // Set by ApiServer itself (requests in progress per identity, max_requests_per_identity).
  net::HttpAdmission admission;
  // Checked every tick when set (the store's leader lease): once it fails, every request is
  // answered 503 (saying this server no longer leads, so that clients move on to another
  // server), for a moment, and then Run() stops serving; deposed() says why. A deposed leader
  // must not answer as one.
  std::function<Status()> lease_check;
  // Checked before each request, and before each tick, when set (the store's LeaseFresh): while
  // false (this server cannot be sure it still leads, e.g. just after a stall) requests are
  // answered 503 and the engine does not tick. A handler's answer that a store write was refused
  // because another server leads becomes a 503 too.
  std::function<bool()> lease_fresh;
  // HTTPS: PEM certificate chain and key; with a client CA, mutual TLS (net/http_server.h).
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
};

class ApiServer {
 public:
  explicit ApiServer(Engine* engine, ApiServerOptions options = {});
  ~ApiServer();

  // Binds to host:port (port 0: any free port). Returns the port bound.
  Result<int> Bind(const std::string& host, int port);
  // Serves on a socket that already listens (a standby's, handed over: StandbyServer::Handover).
  Result<int> Adopt(int listening_fd);
  // Serves until Stop(). Also runs the engine's Tick() every `tick_ms` on a ticker thread, and
  // each external backend's passes every `tick_ms` on a thread of its own (BackendExecutors).
  void Run(int tick_ms = 200);
  void Stop();
  // Why Run() stopped on its own (the lease check failed); OK otherwise.
  Status deposed() const;

  // Every route the server registers (RouteTable, without its handlers), in the table's order.
  static const std::vector<RouteInfo>& Routes();

 private:
  Engine* engine_;
  std::unique_ptr<RequestSlots> slots_;  // requests in progress per identity
  std::function<Status()> lease_check_;
  std::function<bool()> lease_fresh_;
  std::shared_ptr<LeaderGate> gate_;  // answers 503 once this server may no longer lead
  std::unique_ptr<net::HttpServer> http_;
  std::atomic<bool> stop_{false};
  std::thread ticker_;
  std::unique_ptr<BackendExecutors> executors_;
  mutable std::mutex deposed_mu_;
  Status deposed_;
};

// A standby server: several `tessera serve` share one store and one of them leads. Until this
// one does, it answers GET /v1/health (role "standby", who leads) and every other API route with
// 503 {"error", "leader"} naming the leader, so that clients given several URLs move on to it.
class StandbyServer {
 public:
  StandbyServer(store::Store* store, ApiServerOptions options = {});
  ~StandbyServer();
  Result<int> Bind(const std::string& host, int port);
  // Until Stop() (or SIGINT/SIGTERM with stop_on_signals, caught from the start of Run() to its
  // end: one that comes as Stop() is called still counts).
  void Run();
  void Stop();
  // Stops for the leader that takes over its socket: connections made from here wait in the
  // socket's backlog, and the requests in progress are answered first (at most 1 s).
  void Handover();
  // Once Run() has returned after Handover(): the listening socket, for ApiServer::Adopt; -1
  // when there is none. Without it the socket closes with the server.
  int ReleaseListener();
  // Whether SIGINT or SIGTERM came during Run() (with stop_on_signals): the server must exit,
  // and not lead even if it took the lease meanwhile.
  bool signalled() const { return signalled_.load(); }

 private:
  store::Store* store_;
  bool catch_signals_ = false;
  std::atomic<bool> signalled_{false};
  std::unique_ptr<net::HttpServer> http_;
};

// While one is alive, SIGINT and SIGTERM are caught (sigaction: exec'd children get the default
// back) and `on_signal(sig)` runs for each on a thread of the watch's own, never in the handler;
// the previous handlers come back when it goes. At most one in a process at a time. For the
// commands that must do something before they stop (`tessera up` stops its agent first).
class SignalWatch {
 public:
  explicit SignalWatch(std::function<void(int)> on_signal);
  ~SignalWatch();
  SignalWatch(const SignalWatch&) = delete;
  SignalWatch& operator=(const SignalWatch&) = delete;

 private:
  int pipe_[2] = {-1, -1};
  std::thread thread_;
};

}  // namespace tessera::api
