// Private to the HTTP server (http_server.cc: routes, connection caps, memory trims, TLS and the
// public methods; http_server_session.cc: accepting connections and the session that serves
// each): HttpServer::Impl and what both pieces use.
#pragma once

#include "net/http_server.h"

// Boost 1.74's Asio uses std::exchange without including <utility>.
#include <utility>

// clang-format off
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
// clang-format on
#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/log.h"
#include "common/status.h"

namespace tessera::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct RouteEntry {
  std::string method;
  std::vector<std::string> segments;  // "{...}" matches any one non-empty segment
  HttpHandler handler;
  HttpAsyncHandler async;                    // set instead of handler for routes that answer later
  log::Level log_level = log::Level::kInfo;  // of its request-log lines
};

using SteadyClock = std::chrono::steady_clock;

// The request log ("http").
const log::Logger& RequestLog();

// {"error":"<what>"}, the body of the server's own error answers.
std::string ErrorBody(const std::string& what);

// Who a peer is for the per-peer cap: its IPv4 address (IPv4-mapped IPv6 ones too), or the /64
// network of an IPv6 address (one host is commonly given a whole /64).
struct PeerKey {
  std::array<unsigned char, 9> bytes{};  // family, then the address or the /64 prefix
  bool operator==(const PeerKey& o) const { return bytes == o.bytes; }
};

struct PeerKeyHash {
  size_t operator()(const PeerKey& k) const {
    size_t h = 14695981039346656037ull;
    for (unsigned char b : k.bytes) h = (h ^ b) * 1099511628211ull;
    return h;
  }
};

class HttpServer::Impl {
 public:
  explicit Impl(HttpServerOptions o)
      : options(o),
        iocs(MakeContexts(std::max(1, o.io_threads))),
        accept_ioc(1),
        acceptor(accept_ioc),
        workers(static_cast<size_t>(std::max(1, o.workers))),
        trim_timer(accept_ioc) {
    for (auto& c : iocs) {
      keep.push_back(asio::make_work_guard(*c));
      loop_open.push_back(std::make_unique<std::atomic<int64_t>>(0));
    }
    keep.push_back(asio::make_work_guard(accept_ioc));
  }

  // One event loop per I/O thread, each connection on one of them for its life: no handler of a
  // connection runs on two threads (no strand needed), and a completion wakes only its own
  // thread. (One loop shared by four threads cost 105 us of server CPU per agent request at
  // 10,000 agents, against 94 us with a loop each: wake-ups and context switches.)
  static std::vector<std::unique_ptr<asio::io_context>> MakeContexts(int n) {
    std::vector<std::unique_ptr<asio::io_context>> v;
    for (int i = 0; i < n; ++i) v.push_back(std::make_unique<asio::io_context>(1));
    return v;
  }

  // The loop that takes the next connection: the one with the fewest open, ties drawn at
  // random. Clients open connections in patterns (an agent opens its heartbeat connection, then
  // its order watch), and round robin over two loops put every heartbeat on one loop and every
  // watch on the other.
  size_t NextLoop();

  // The route that takes req (its params filled), or null.
  const RouteEntry* Find(HttpRequest& req) const;

  // Runs the route's handler; returns the level of the request's log line.
  log::Level Dispatch(HttpRequest& req, HttpResponse& res) const;

  void Accept();
  Result<int> Listen();
  void AcceptPending();
  void OutOfDescriptors();

  // Whether a connection from `peer` may open now; when it may, it is counted in `open` and
  // (`*counted`) under its peer until its session ends (the session's destructor). Only the
  // acceptor's handler admits, so `open` cannot pass the cap.
  bool Admit(const PeerKey& peer, bool loopback, bool* counted);
  void Release(const PeerKey& peer);
  // A connection over a limit: closed at once, said in the log at most every 10 s with a count.
  void Refuse(int fd, const asio::ip::address& peer);

  // Memory that closed connections freed goes back to the system: glibc keeps freed heap pages
  // that live allocations fragment, so a flood of 20,000 connections left the server at 1.6 GB
  // after they closed. Checked every second on the acceptor's loop: a trim (Trim()) once at
  // least 64 connections, and at least as many as are still open, closed since the last one (a
  // flood ended: most of the connections' memory is free), and either fewer than 64 closed in
  // the last second (the burst is over: clients that come and go one at a time, a health probe
  // every 100 ms, are no burst and must not put the trim off) or the last trim is 5 s old. Not
  // for a steady churn beside many open connections: their freed memory is soon reused, and a
  // trim over a large heap holds each arena's lock for a while (200 ms over 1.2 GB), which the
  // loops would wait on.
  //
  // The acceptor has a thread of its own, and each session is made on its connection's loop: the
  // records the event loop keeps for every descriptor (never freed, reused) are then allocated
  // in the acceptor's heap arena, not between the connections' buffers in the loops' arenas,
  // where they would keep most freed pages from going back.
  static constexpr int64_t kTrimAfterCloses = 64;
  void TrimTick();

  // The trim: each loop empties its thread's malloc cache (net/heap.h: the chunks it keeps for
  // its next mallocs hold pages of the connections' memory), then the acceptor's thread empties
  // its own, frees them all through a thread of their own and trims. A loop that never runs the
  // handler (stopped) leaves the trim undone; the chunks taken are freed whatever happens.
  struct Taken {
    std::mutex mu;
    std::vector<void*> chunks;
    size_t loops_left = 0;
    ~Taken() {
      for (void* p : chunks) std::free(p);
    }
  };
  void Trim();

  // The certificate chain, key and (for mutual TLS) client CA of options; TLS 1.2 or newer.
  Status LoadTls();

  // Destroyed in reverse: the workers finish first, then the connections (which count down
  // `open`) with the I/O context.
  HttpServerOptions options;
  int64_t max_connections = 0;  // in force: options' or derived in Bind
  std::atomic<int64_t> open{0};
  std::atomic<int64_t> closed{0};   // connections ended, since the start (for TrimTick)
  std::atomic<int64_t> refused{0};  // connections closed at once for a limit
  std::mutex peers_mu;
  std::unordered_map<PeerKey, int64_t, PeerKeyHash> peers;  // open connections per counted peer
  // The acceptor's handler only:
  int64_t refused_unlogged = 0;
  SteadyClock::time_point refused_logged_at{};
  // TrimTick only:
  int64_t closed_at_trim = 0, closed_at_last_tick = 0;
  bool trimming = false;  // a Trim() under way (set and cleared on the acceptor's thread)
  SteadyClock::time_point trimmed_at{};
  std::atomic<bool> stopped{false};
  std::atomic<bool> out_of_descriptors{false};  // said once in the log
  std::vector<RouteEntry> routes;
  // Open connections per loop (outlives them).
  std::vector<std::unique_ptr<std::atomic<int64_t>>> loop_open;
  // The connections' loops; [0] also runs After()'s timers.
  std::vector<std::unique_ptr<asio::io_context>> iocs;
  asio::io_context accept_ioc;  // the acceptor's loop (its own thread) and TrimTick's
  // Loops without connections still run.
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> keep;
  std::minstd_rand draw{std::random_device{}()};  // only the acceptor's handler uses it
  std::optional<asio::ssl::context> ssl;          // set when the server speaks TLS
  tcp::acceptor acceptor;
  asio::thread_pool workers;
  asio::steady_timer trim_timer;  // TrimTick's
};

}  // namespace tessera::net
