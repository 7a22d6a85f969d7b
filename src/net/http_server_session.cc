// The HTTP server's connections: accepting them (accept4, checked against the caps) and the
// session that reads each request, hands it to its handler and writes the answer.
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>

#include "common/text.h"
#include "net/http_framing.h"
#include "net/http_server_internal.h"

namespace tessera::net {
namespace {

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

std::string TooLarge(size_t max) {
  constexpr size_t kMiB = 1024 * 1024;
  return "body over " +
         (max % kMiB == 0 ? std::to_string(max / kMiB) + " MiB" : std::to_string(max) + " bytes");
}

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
    header_fields_ = HeaderFields(parser_->get());
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
    if (ec == http::error::buffer_overflow) {
      // Nothing more is read: the connection closes after the answer.
      return Send(HttpResponse{400,
                               "application/json",
                               ErrorBody("malformed HTTP request: a header or chunk header line "
                                         "longer than " +
                                         std::to_string(kMaxBufferedBytes) + " bytes"),
                               {}},
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
    auto req =
        std::make_shared<HttpRequest>(ToHttpRequest(std::move(msg), std::move(header_fields_)));
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
    const std::string path = CutForRecord(e.path);  // anyone may send 64 KiB of it
    RequestLog().Log(e.level, "request",
                     {{"method", e.method},
                      {"path", path},
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
  // What the parser may hold unparsed: a whole header, or a chunk header and some body. Without a
  // limit a chunk header that never ended (an endless chunk extension) was buffered whole: one
  // request without a token took gigabytes.
  static constexpr size_t kMaxBufferedBytes = kMaxHeaderBytes + 64 * 1024;

  Stream stream_;
  beast::flat_buffer buffer_{kMaxBufferedBytes};
  std::optional<BeastRequestParser> parser_;
  http::response<http::string_body> res_;
  HttpServer::Impl* server_;
  std::atomic<int64_t>* loop_open_;  // its loop's count of open connections
  bool linger_ = false;
  std::map<std::string, std::string> header_fields_;  // of the request being read (HeaderFields)
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

}  // namespace tessera::net
