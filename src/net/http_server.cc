#include "net/http_server.h"

#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

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
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>

#include "net/heap.h"
#include "net/http_framing.h"
#include "net/tls.h"

namespace tessera::net {
namespace {

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

const log::Logger& RequestLog() {
  static const log::Logger logger("http");
  return logger;
}

// What the request log says of one request, filled only when its level is on (level kOff: no
// line). The strings are moved from the request once it has been handled: no copies.
struct RequestLogEntry {
  log::Level level = log::Level::kOff;
  SteadyClock::time_point start;
  std::string method;
  std::string path;
  size_t in_bytes = 0;
  int status = 0;
  size_t bytes = 0;
};

std::vector<std::string> Split(const std::string& path) {
  std::vector<std::string> out;
  size_t i = 1;  // after the leading '/'
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    out.push_back(path.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

bool Matches(const RouteEntry& r, const std::vector<std::string>& segs,
             std::vector<std::string>* params) {
  if (r.segments.size() != segs.size()) return false;
  params->clear();
  for (size_t i = 0; i < segs.size(); ++i) {
    const std::string& p = r.segments[i];
    if (!p.empty() && p.front() == '{') {
      if (segs[i].empty()) return false;
      params->push_back(segs[i]);
    } else if (p != segs[i]) {
      return false;
    }
  }
  return true;
}

std::string ErrorBody(const std::string& what) {
  std::string out = "{\"error\":\"";
  for (char c : what) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"}";
}

std::string TooLarge(size_t max) {
  constexpr size_t kMiB = 1024 * 1024;
  return "body over " +
         (max % kMiB == 0 ? std::to_string(max / kMiB) + " MiB" : std::to_string(max) + " bytes");
}

// Each agent holds two connections (heartbeats and its order watch): 10,000 agents need more
// descriptors than the usual hard limit of 20,000 (or less). A privileged server (root, or
// CAP_SYS_RESOURCE) raises the hard limit too; otherwise the soft limit goes up to the hard one.
void RaiseOpenFileLimit() {
  constexpr rlim_t kWanted = 262144;
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return;
  if (r.rlim_max != RLIM_INFINITY && r.rlim_max < kWanted) {
    rlimit raised{kWanted, kWanted};
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) return;
  }
  if (r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}

// The connection cap when none is set: the open-file limit less 1,024 descriptors for the rest of
// the process (the store, logs, job output, the backends' commands), at most 50,000 (an idle TLS
// connection holds about 80 KB: the TLS stream's buffers).
int64_t DefaultMaxConnections() {
  constexpr int64_t kKept = 1024, kMost = 50000;
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return kMost;
  if (r.rlim_cur == RLIM_INFINITY) return kMost;
  const int64_t limit = static_cast<int64_t>(r.rlim_cur);
  return std::min(kMost, limit > 2 * kKept ? limit - kKept : limit / 2);
}

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

// The peer's key, and whether it is a loopback address.
std::pair<PeerKey, bool> KeyOf(const asio::ip::address& at) {
  PeerKey k;
  if (at.is_v6() && !at.to_v6().is_v4_mapped()) {
    const auto b = at.to_v6().to_bytes();
    k.bytes[0] = 6;
    std::copy(b.begin(), b.begin() + 8, k.bytes.begin() + 1);
    return {k, at.is_loopback()};
  }
  const asio::ip::address_v4 v4 =
      at.is_v4() ? at.to_v4() : asio::ip::make_address_v4(asio::ip::v4_mapped, at.to_v6());
  const auto b = v4.to_bytes();
  k.bytes[0] = 4;
  std::copy(b.begin(), b.end(), k.bytes.begin() + 1);
  return {k, v4.is_loopback()};
}

}  // namespace

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
  size_t NextLoop() {
    size_t best = 0, ties = 0;
    for (size_t i = 0; i < iocs.size(); ++i) {
      const int64_t n = loop_open[i]->load(), b = loop_open[best]->load();
      if (i == 0 || n < b) {
        best = i;
        ties = 1;
      } else if (n == b && std::uniform_int_distribution<size_t>(0, ties++)(draw) == 0) {
        best = i;  // each of the tied loops equally likely
      }
    }
    return best;
  }

  // The route that takes req (its params filled), or null.
  const RouteEntry* Find(HttpRequest& req) const {
    const std::vector<std::string> segs = Split(req.path);
    for (const RouteEntry& r : routes) {
      if (r.method == req.method && Matches(r, segs, &req.params)) return &r;
    }
    return nullptr;
  }

  // Runs the route's handler; returns the level of the request's log line.
  log::Level Dispatch(HttpRequest& req, HttpResponse& res) const {
    const std::vector<std::string> segs = Split(req.path);
    for (const RouteEntry& r : routes) {
      if (r.method != req.method || !Matches(r, segs, &req.params)) continue;
      try {
        r.handler(req, res);
      } catch (const std::exception&) {
        res = HttpResponse{500, "application/json", ErrorBody("internal error"), {}};
      }
      return r.log_level;
    }
    res = HttpResponse{404, "application/json", ErrorBody("no such endpoint"), {}};
    return log::Level::kInfo;
  }

  void Accept();
  void AcceptPending();
  void OutOfDescriptors();

  // Whether a connection from `peer` may open now; when it may, it is counted in `open` and
  // (`*counted`) under its peer until its session ends (the session's destructor). Only the
  // acceptor's handler admits, so `open` cannot pass the cap.
  bool Admit(const PeerKey& peer, bool loopback, bool* counted) {
    *counted = false;
    if (open.load() >= max_connections) return false;
    if (options.max_connections_per_peer > 0 && (!loopback || options.limit_loopback_peers)) {
      std::lock_guard<std::mutex> l(peers_mu);
      int64_t& n = peers[peer];
      if (n >= options.max_connections_per_peer) return false;
      ++n;
      *counted = true;
    }
    ++open;
    return true;
  }
  void Release(const PeerKey& peer) {
    std::lock_guard<std::mutex> l(peers_mu);
    auto it = peers.find(peer);
    if (it != peers.end() && --it->second <= 0) peers.erase(it);
  }
  // A connection over a limit: closed at once, said in the log at most every 10 s with a count.
  void Refuse(int fd, const asio::ip::address& peer) {
    ++refused;  // counted before the client can see the close
    ++refused_unlogged;
    ::close(fd);
    const auto now = SteadyClock::now();
    if (now - refused_logged_at < std::chrono::seconds(10)) return;
    refused_logged_at = now;
    RequestLog().Warn("connections over the limit closed",
                      {{"refused", refused_unlogged},
                       {"open", open.load()},
                       {"limit", max_connections},
                       {"per_peer_limit", options.max_connections_per_peer},
                       {"peer", peer.to_string()}});
    refused_unlogged = 0;
  }

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
  void TrimTick() {
    trim_timer.expires_after(std::chrono::seconds(1));
    trim_timer.async_wait([this](beast::error_code ec) {
      if (ec || stopped.load()) return;
      const int64_t now_closed = closed.load();
      const auto now = SteadyClock::now();
      const bool burst_over = now_closed - closed_at_last_tick < kTrimAfterCloses;
      const int64_t freed = now_closed - closed_at_trim;
      if (!trimming && freed >= kTrimAfterCloses && freed >= open.load() &&
          (burst_over || now - trimmed_at >= std::chrono::seconds(5))) {
        Trim();
        closed_at_trim = now_closed;
        trimmed_at = now;
      }
      closed_at_last_tick = now_closed;
      TrimTick();
    });
  }

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
  void Trim() {
    trimming = true;
    auto taken = std::make_shared<Taken>();
    taken->loops_left = iocs.size();
    for (auto& loop : iocs) {
      asio::post(*loop, [this, taken] {
        std::vector<void*> mine = TakeThreadCache();
        std::lock_guard<std::mutex> l(taken->mu);
        taken->chunks.insert(taken->chunks.end(), mine.begin(), mine.end());
        if (--taken->loops_left > 0) return;
        asio::post(accept_ioc, [this, taken] {
          std::vector<void*> chunks;
          {
            std::lock_guard<std::mutex> l2(taken->mu);
            chunks.swap(taken->chunks);
          }
          std::vector<void*> acceptors = TakeThreadCache();
          chunks.insert(chunks.end(), acceptors.begin(), acceptors.end());
          FreeAndTrim(std::move(chunks));
          trimming = false;
        });
      });
    }
  }

  // The certificate chain, key and (for mutual TLS) client CA of options; TLS 1.2 or newer.
  Status LoadTls() {
    const HttpServerOptions& o = options;
    if (o.tls_cert_file.empty() || o.tls_key_file.empty()) {
      return Status::InvalidArgument(
          "TLS needs both a certificate (--tls-cert) and its key (--tls-key)");
    }
    ssl.emplace(asio::ssl::context::tls_server);
    ssl->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                     asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                     asio::ssl::context::no_tlsv1_1 | asio::ssl::context::single_dh_use);
    if (Status st = HardenServerTls(ssl->native_handle()); !st.ok()) return st;
    beast::error_code ec;
    ssl->use_certificate_chain_file(o.tls_cert_file, ec);
    if (ec) return Status::InvalidArgument("--tls-cert " + o.tls_cert_file + ": " + ec.message());
    ssl->use_private_key_file(o.tls_key_file, asio::ssl::context::pem, ec);
    if (ec) return Status::InvalidArgument("--tls-key " + o.tls_key_file + ": " + ec.message());
    if (!o.tls_client_ca_file.empty()) {
      ssl->load_verify_file(o.tls_client_ca_file, ec);
      if (ec)
        return Status::InvalidArgument("--tls-client-ca " + o.tls_client_ca_file + ": " +
                                       ec.message());
      ssl->set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert);
    }
    return Status::Ok();
  }

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

namespace {

// One connection: read a request, hand it to the workers, write the answer, read the next.
// `Stream`: beast::tcp_stream, or an ssl_stream over one (TLS: the handshake comes first).
template <class Stream>
class Session : public std::enable_shared_from_this<Session<Stream>> {
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;
  using std::enable_shared_from_this<Session<Stream>>::shared_from_this;

 public:
  // `peer`: the key the connection is counted under in the per-peer cap, when `counted`.
  template <class... Args>
  explicit Session(HttpServer::Impl* server, std::atomic<int64_t>* loop_open, const PeerKey& peer,
                   bool counted, Args&&... args)
      : stream_(std::forward<Args>(args)...),
        server_(server),
        loop_open_(loop_open),
        peer_key_(peer),
        counted_(counted) {}
  ~Session() {
    if (release_) release_();  // a request whose answer never came (its connection went first)
    if (counted_) server_->Release(peer_key_);
    --server_->open;
    --*loop_open_;
    ++server_->closed;
  }

  void Start() {
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] {
      if constexpr (kTls) {
        // A client that connects and says nothing, or speaks no TLS, is dropped within 10 s.
        self->Lowest().expires_after(std::chrono::seconds(10));
        self->stream_.async_handshake(asio::ssl::stream_base::server, [self](beast::error_code ec) {
          if (ec) return self->Close();
          self->Read();
        });
      } else {
        self->Read();
      }
    });
  }

 private:
  beast::tcp_stream& Lowest() { return beast::get_lowest_layer(stream_); }

  // The next request: its first byte within the idle deadline (bytes already read, or a
  // connection's first request, go straight to the header), then the header within the header
  // deadline, then the body within the body deadline. While idle, a connection holds no buffer:
  // the wait for the first byte reads one byte into the session itself.
  void Read() {
    parser_.emplace();
    ConfigureParser(*parser_, HttpParseLimits{kMaxHeaderBytes, server_->options.max_body_bytes});
    if (first_request_ || buffer_.size() > 0) {
      first_request_ = false;
      return ReadHeader();
    }
    Lowest().expires_after(std::chrono::milliseconds(server_->options.idle_timeout_ms));
    stream_.async_read_some(
        asio::buffer(&first_byte_, 1), [self = shared_from_this()](beast::error_code ec, size_t n) {
          if (ec) return self->OnRead(ec);
          if (n == 1) {
            *static_cast<char*>(self->buffer_.prepare(1).data()) = self->first_byte_;
            self->buffer_.commit(1);
          }
          self->ReadHeader();
        });
  }

  void ReadHeader() {
    Lowest().expires_after(std::chrono::milliseconds(server_->options.header_timeout_ms));
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  // The header is in: its framing is checked before any of the body is read.
  void OnHeader(beast::error_code ec) {
    if (ec) return OnRead(ec);
    const std::string bad = FramingError(parser_->get());
    if (!bad.empty()) {
      linger_ = true;  // what the client still sends is drained, so that it reads the 400
      return Send(
          HttpResponse{400, "application/json", ErrorBody("malformed HTTP request: " + bad), {}},
          11, false, RefusedEntry());
    }
    if (parser_->is_done()) return OnRead(ec);
    Lowest().expires_after(std::chrono::milliseconds(server_->options.body_timeout_ms));
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code e, size_t) { self->OnRead(e); });
  }

  void OnRead(beast::error_code ec) {
    // Closed by the client, possibly within a request (partial_message), or past a deadline.
    if (ec == http::error::end_of_stream || ec == http::error::partial_message ||
        ec == beast::error::timeout || ec == asio::error::eof ||
        ec == asio::error::connection_reset || ec == asio::error::operation_aborted ||
        ec == asio::ssl::error::stream_truncated) {
      return Close();
    }
    if (ec == http::error::body_limit) {
      // The client may still be sending the body: drain it after the answer, so that the client
      // reads the 413 instead of a reset connection.
      linger_ = true;
      return Send(
          HttpResponse{
              413, "application/json", ErrorBody(TooLarge(server_->options.max_body_bytes)), {}},
          11, false, RefusedEntry());
    }
    if (ec) {
      return Send(HttpResponse{400, "application/json", ErrorBody("malformed HTTP request"), {}},
                  11, false, RefusedEntry());
    }
    // The request log's clock starts once the request has been read (a kept-alive connection
    // may sit idle before it); no clock read when no request could be logged.
    const SteadyClock::time_point start =
        log::Enabled(log::Level::kInfo) ? SteadyClock::now() : SteadyClock::time_point{};
    http::request<http::string_body> msg = parser_->release();
    parser_.reset();
    // An idle connection keeps no read buffer (one that held a 60 KB header would keep 64 KB).
    if (buffer_.size() == 0) buffer_.shrink_to_fit();
    const unsigned version = msg.version();
    const bool keep_alive = msg.keep_alive();
    auto req = std::make_shared<HttpRequest>(ToHttpRequest(std::move(msg)));
    const RouteEntry* route = server_->Find(*req);
    if (route != nullptr && server_->options.admission) {
      HttpResponse refusal;
      if (!server_->options.admission(*req, &refusal, &release_)) {
        return Send(std::move(refusal), version, keep_alive, Entry(route->log_level, start, *req));
      }
    }
    if (route != nullptr && route->async)
      return DispatchAsync(*route, req, version, keep_alive, start);
    if (server_->options.workers <= 0) {  // handlers run on the I/O threads: no hand-offs
      HttpResponse res;
      const log::Level level = server_->Dispatch(*req, res);
      return Send(std::move(res), version, keep_alive, Entry(level, start, *req));
    }
    asio::post(server_->workers, [self = shared_from_this(), req, version, keep_alive, start] {
      auto res = std::make_shared<HttpResponse>();
      const log::Level level = self->server_->Dispatch(*req, *res);
      asio::post(self->stream_.get_executor(),
                 [self, res, version, keep_alive, entry = Entry(level, start, *req)]() mutable {
                   self->Send(std::move(*res), version, keep_alive, std::move(entry));
                 });
    });
  }

  // An async route: its handler gets a one-shot reply that brings the answer back onto this
  // connection's executor from whichever thread calls it; called from the handler itself (an
  // answer ready at once) it is sent there and then, not queued behind every other connection.
  void DispatchAsync(const RouteEntry& r, std::shared_ptr<HttpRequest> req, unsigned version,
                     bool keep_alive, SteadyClock::time_point start) {
    auto once = std::make_shared<std::atomic<bool>>(false);
    const log::Level level = r.log_level;
    HttpReply reply = [self = shared_from_this(), req, version, keep_alive, start, level,
                       once](HttpResponse res) {
      if (once->exchange(true)) return;
      asio::dispatch(self->stream_.get_executor(), [self, req, version, keep_alive, start, level,
                                                    res = std::move(res)]() mutable {
        self->Send(std::move(res), version, keep_alive, Entry(level, start, *req));
      });
    };
    try {
      r.async(*req, reply);
    } catch (const std::exception&) {
      reply(HttpResponse{500, "application/json", ErrorBody("internal error"), {}});
    }
  }

  // The log entry of a handled request (whose strings it takes), or none when `level` is off.
  static RequestLogEntry Entry(log::Level level, SteadyClock::time_point start, HttpRequest& req) {
    RequestLogEntry e;
    if (!log::Enabled(level)) return e;
    e.level = level;
    e.start = start;
    e.method = std::move(req.method);
    e.path = std::move(req.path);
    e.in_bytes = req.body.size();
    return e;
  }

  // The log entry of a request the server refuses itself (malformed, body too large): its
  // method and path when its header was read.
  RequestLogEntry RefusedEntry() {
    RequestLogEntry e;
    if (!log::Enabled(log::Level::kInfo)) return e;
    e.level = log::Level::kInfo;
    e.start = SteadyClock::now();
    e.method = "-";
    e.path = "-";
    if (parser_ && parser_->is_header_done()) {
      const auto& m = parser_->get();
      e.method = std::string(m.method_string());
      const std::string_view target(m.target().data(), m.target().size());
      e.path = HttpServer::Decode(std::string(target.substr(0, target.find('?'))), false);
    }
    return e;
  }

  void LogRequest() {
    RequestLogEntry& e = logged_;
    if (e.level == log::Level::kOff) return;
    if (peer_.empty()) {
      beast::error_code ec;
      const tcp::endpoint at = Lowest().socket().remote_endpoint(ec);
      peer_ = ec ? "-" : at.address().to_string() + ":" + std::to_string(at.port());
    }
    const auto us =
        std::chrono::duration_cast<std::chrono::microseconds>(SteadyClock::now() - e.start).count();
    RequestLog().Log(e.level, "request",
                     {{"method", e.method},
                      {"path", e.path},
                      {"status", e.status},
                      {"duration_us", us},
                      {"bytes", e.bytes},
                      {"in_bytes", e.in_bytes},
                      {"peer", peer_}});
    e.level = log::Level::kOff;
  }

  void Send(HttpResponse out, unsigned version, bool keep_alive, RequestLogEntry entry) {
    if (release_)
      std::exchange(release_, nullptr)();  // the request's admission ends with its answer
    entry.status = out.status;
    entry.bytes = out.body.size();
    logged_ = std::move(entry);
    res_ = {};
    res_.version(version);
    res_.result(static_cast<http::status>(out.status));
    res_.set(http::field::content_type, out.content_type);
    for (const auto& [name, value] : out.headers) res_.set(name, value);
    res_.keep_alive(keep_alive);
    res_.body() = std::move(out.body);
    res_.prepare_payload();
    Lowest().expires_after(std::chrono::seconds(60));
    http::async_write(
        stream_, res_, [self = shared_from_this(), keep_alive](beast::error_code ec, size_t) {
          self->res_ = {};  // the answer's body and fields are not kept while the connection idles
          self->LogRequest();
          if (!ec && self->linger_) return self->Drain(0);
          if (ec || !keep_alive) return self->Close();
          self->Read();
        });
  }

  // Reads and drops what the client still sends (at most 64 MiB, for 10 s), then closes.
  void Drain(size_t dropped) {
    if (dropped == 0) {
      beast::error_code ignored;
      Lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
      Lowest().expires_after(std::chrono::seconds(10));
    }
    drain_.resize(64 * 1024);
    stream_.async_read_some(asio::buffer(drain_),
                            [self = shared_from_this(), dropped](beast::error_code ec, size_t n) {
                              if (ec || dropped + n > 64 * 1024 * 1024) return self->Close();
                              self->Drain(dropped + n);
                            });
  }

  void Close() {
    beast::error_code ignored;
    Lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
    Lowest().socket().close(ignored);
  }

  static constexpr size_t kMaxHeaderBytes = 64 * 1024;

  Stream stream_;
  beast::flat_buffer buffer_;
  std::optional<BeastRequestParser> parser_;
  http::response<http::string_body> res_;
  HttpServer::Impl* server_;
  std::atomic<int64_t>* loop_open_;  // its loop's count of open connections
  bool linger_ = false;
  std::vector<char> drain_;
  RequestLogEntry logged_;         // the request being answered, for the request log
  std::function<void()> release_;  // its admission's release, called as its answer is sent
  std::string peer_;               // "address:port", once a request was logged
  PeerKey peer_key_;
  bool counted_ = false;       // under peer_key_ in the per-peer cap
  bool first_request_ = true;  // the header deadline counts from the connection's start
  char first_byte_ = 0;        // of the next request, read while idle
};

}  // namespace

// Connections are taken off the listening socket with accept4 and checked against the caps
// before anything of Asio's is made for them: a refused one is closed as a bare descriptor. (An
// Asio socket registers with its loop's reactor, whose per-descriptor records are pooled for
// the life of the loop: a flood of refused connections would leave one record, about 220 bytes,
// for each that was ever open at once.)
void HttpServer::Impl::Accept() {
  acceptor.async_wait(tcp::acceptor::wait_read, [this](beast::error_code ec) {
    if (stopped.load() || ec == asio::error::operation_aborted) return;
    AcceptPending();
  });
}

void HttpServer::Impl::AcceptPending() {
  // At most a batch at a time, so that the acceptor's timers (TrimTick) run during a flood.
  for (int batch = 0; batch < 256; ++batch) {
    sockaddr_storage from{};
    socklen_t from_len = sizeof from;
    const int fd = ::accept4(acceptor.native_handle(), reinterpret_cast<sockaddr*>(&from),
                             &from_len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        return OutOfDescriptors();
      }
      return Accept();  // EAGAIN: none pending; anything else: wait for the next
    }
    tcp::endpoint at;
    if (from_len <= at.capacity()) {
      std::memcpy(at.data(), &from, from_len);
      at.resize(from_len);
    }
    const auto [peer, loopback] = KeyOf(at.address());
    bool counted = false;
    if (!Admit(peer, loopback, &counted)) {
      Refuse(fd, at.address());
      continue;
    }
    const size_t loop = NextLoop();
    // Registered with its loop's reactor here, on the acceptor's thread: the reactor's record
    // is allocated in this thread's heap arena, not between the connections' buffers (TrimTick).
    beast::error_code ec;
    tcp::socket socket(*iocs[loop]);
    socket.assign(at.protocol(), fd, ec);
    if (ec) {
      ::close(fd);
      if (counted) Release(peer);
      --open;
      continue;
    }
    ++*loop_open[loop];
    socket.set_option(tcp::no_delay(true), ec);  // small JSON replies: no Nagle delay
    // The session (its buffers, the TLS state) is made on its loop, in that thread's heap arena
    // (see TrimTick).
    asio::post(*iocs[loop],
               [this, loop, peer = peer, counted, socket = std::move(socket)]() mutable {
                 if (ssl) {
                   std::make_shared<Session<beast::ssl_stream<beast::tcp_stream>>>(
                       this, loop_open[loop].get(), peer, counted, std::move(socket), *ssl)
                       ->Start();
                 } else {
                   std::make_shared<Session<beast::tcp_stream>>(this, loop_open[loop].get(), peer,
                                                                counted, std::move(socket))
                       ->Start();
                 }
               });
  }
  asio::post(accept_ioc, [this] {  // more may be pending
    if (!stopped.load()) AcceptPending();
  });
}

// Out of descriptors (RLIMIT_NOFILE): the pending connections stay in the backlog. Said once in
// the log; accepting resumes in 100 ms rather than spin on accept while no descriptor is free.
void HttpServer::Impl::OutOfDescriptors() {
  if (!out_of_descriptors.exchange(true)) {
    RequestLog().Warn("out of file descriptors: new connections wait; raise the open-file limit",
                      {{"open", open.load()}});
  }
  auto timer = std::make_shared<asio::steady_timer>(accept_ioc, std::chrono::milliseconds(100));
  timer->async_wait([this, timer](beast::error_code) {
    if (!stopped.load()) Accept();
  });
}

HttpServer::HttpServer(HttpServerOptions options) : impl_(std::make_unique<Impl>(options)) {}

HttpServer::~HttpServer() {
  Stop();
  impl_->workers.join();
}

void HttpServer::Route(const std::string& method, const std::string& pattern, HttpHandler handler,
                       log::Level request_log) {
  impl_->routes.push_back({method, Split(pattern), std::move(handler), nullptr, request_log});
}

void HttpServer::RouteAsync(const std::string& method, const std::string& pattern,
                            HttpAsyncHandler handler, log::Level request_log) {
  RouteEntry r{method, Split(pattern), nullptr, std::move(handler), request_log};
  impl_->routes.push_back(std::move(r));
}

void HttpServer::After(int64_t ms, std::function<void()> fn) {
  if (impl_->stopped.load()) return;
  auto timer = std::make_shared<asio::steady_timer>(
      *impl_->iocs.front(), std::chrono::milliseconds(std::max<int64_t>(0, ms)));
  timer->async_wait([timer, fn = std::move(fn)](beast::error_code ec) {
    if (!ec) fn();
  });
}

Result<int> HttpServer::Bind(const std::string& host, int port) {
  RaiseOpenFileLimit();
  if (!impl_->options.tls_cert_file.empty() || !impl_->options.tls_key_file.empty()) {
    Status st = impl_->LoadTls();
    if (!st.ok()) return st;
  }
  beast::error_code ec;
  const auto address = asio::ip::make_address(host == "localhost" ? "127.0.0.1" : host, ec);
  if (ec) return Status::InvalidArgument("cannot listen on '" + host + "': not an IP address");
  const tcp::endpoint at(address, static_cast<unsigned short>(port));
  tcp::acceptor& a = impl_->acceptor;
  a.open(at.protocol(), ec);
  if (!ec) a.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(at, ec);
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  if (!ec) a.non_blocking(true, ec);  // accept4 until EAGAIN (Impl::AcceptPending)
  if (ec)
    return Status::FailedPrecondition("cannot listen on " + host + ":" + std::to_string(port) +
                                      ": " + ec.message());
  impl_->max_connections =
      impl_->options.max_connections > 0 ? impl_->options.max_connections : DefaultMaxConnections();
  impl_->Accept();
  impl_->TrimTick();
  return static_cast<int>(a.local_endpoint().port());
}

void HttpServer::Run() {
  std::optional<asio::signal_set> signals;
  if (!impl_->options.stop_signals.empty()) {
    signals.emplace(*impl_->iocs.front());
    for (int sig : impl_->options.stop_signals) signals->add(sig);
    signals->async_wait([this](beast::error_code ec, int) {
      if (!ec) Stop();
    });
  }
  std::vector<std::thread> extra;
  for (size_t i = 1; i < impl_->iocs.size(); ++i)
    extra.emplace_back([this, i] { impl_->iocs[i]->run(); });
  extra.emplace_back([this] { impl_->accept_ioc.run(); });
  impl_->iocs.front()->run();
  for (auto& t : extra) t.join();
}

void HttpServer::Stop() {
  // Run() returns; the acceptor and connections close when the server is destroyed. Not for a
  // signal handler (the event loop's lock may be held by the thread it interrupted): see
  // HttpServerOptions::stop_signals.
  impl_->stopped.store(true);
  for (auto& c : impl_->iocs) c->stop();
  impl_->accept_ioc.stop();
}

int64_t HttpServer::connections() const { return impl_->open.load(); }
int64_t HttpServer::refused_connections() const { return impl_->refused.load(); }
int64_t HttpServer::max_connections() const { return impl_->max_connections; }

std::string HttpServer::Decode(const std::string& s, bool plus_is_space) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
      i += 2;
    } else if (s[i] == '+' && plus_is_space) {
      out += ' ';
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace tessera::net
