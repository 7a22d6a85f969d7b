// conn_flood_bench's clients: the flood of idle connections, slow-header clients, a blocking
// kept-alive TLS connection and agents heartbeating through it all.
#pragma once

#include <unistd.h>

// Boost 1.74's Asio uses std::exchange without including <utility>.
#include <utility>

// clang-format off
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
// clang-format on
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agent/protocol.h"
#include "net/tls.h"

namespace conn_flood {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

inline double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// A client stream, TLS or plain, with what one request needs.
struct Client {
  Client(asio::io_context& ioc, asio::ssl::context& ctx, bool tls) {
    if (tls) {
      ssl = std::make_unique<beast::ssl_stream<beast::tcp_stream>>(ioc, ctx);
    } else {
      plain = std::make_unique<beast::tcp_stream>(ioc);
    }
  }
  beast::tcp_stream& Lowest() { return ssl ? beast::get_lowest_layer(*ssl) : *plain; }
  template <class Fn>
  void Connect(const tcp::endpoint& at, Fn done) {
    Lowest().expires_after(std::chrono::seconds(60));
    Lowest().async_connect(at, [this, done](beast::error_code ec) mutable {
      if (ec || !ssl) return done(ec);
      ssl->async_handshake(asio::ssl::stream_base::client, done);
    });
  }
  template <class Fn>
  void Get(const std::string& target, Fn done) {
    req = {http::verb::get, target, 11};
    req.set(http::field::host, "127.0.0.1");
    req.keep_alive(true);
    res = {};
    Lowest().expires_after(std::chrono::seconds(60));
    auto after_write = [this, done](beast::error_code ec, size_t) mutable {
      if (ec) return done(ec);
      if (ssl)
        return http::async_read(*ssl, buffer, res,
                                [done](beast::error_code e, size_t) mutable { done(e); });
      http::async_read(*plain, buffer, res,
                       [done](beast::error_code e, size_t) mutable { done(e); });
    };
    if (ssl) return http::async_write(*ssl, req, after_write);
    http::async_write(*plain, req, after_write);
  }
  template <class Fn>
  void Write(const std::string& bytes, Fn done) {
    Lowest().expires_after(std::chrono::seconds(60));
    if (ssl) return asio::async_write(*ssl, asio::buffer(bytes), done);
    asio::async_write(*plain, asio::buffer(bytes), done);
  }
  template <class Fn>
  void ReadSome(Fn done) {
    if (ssl) return ssl->async_read_some(asio::buffer(scratch), done);
    plain->async_read_some(asio::buffer(scratch), done);
  }

  std::unique_ptr<beast::ssl_stream<beast::tcp_stream>> ssl;
  std::unique_ptr<beast::tcp_stream> plain;
  beast::flat_buffer buffer;
  http::request<http::empty_body> req;
  http::response<http::string_body> res;
  char scratch[256];
};

// The flood: `n` connections, at most 256 connecting at a time, each making one request and then
// idling. Runs on the caller's io_context.
class Flood {
 public:
  Flood(asio::io_context& ioc, asio::ssl::context& ctx, bool tls, tcp::endpoint at, int n)
      : ioc_(ioc), ctx_(ctx), tls_(tls), at_(at), n_(n) {}
  void Start() {
    for (int i = 0; i < 256; ++i) Next();
  }
  int opened() const { return opened_; }
  int failed() const { return failed_; }
  bool done() const { return opened_ + failed_ == n_; }
  void CloseAll() { conns_.clear(); }

 private:
  void Next() {
    if (started_ == n_) return;
    ++started_;
    conns_.push_back(std::make_unique<Client>(ioc_, ctx_, tls_));
    Client* c = conns_.back().get();
    c->Connect(at_, [this, c](beast::error_code ec) {
      if (ec) return Fail();
      c->Get("/v1/health", [this, c](beast::error_code e) {
        if (e || c->res.result_int() != 200) return Fail();
        c->res = {};
        c->buffer.clear();
        c->buffer.shrink_to_fit();
        ++opened_;
        Next();
      });
    });
  }
  void Fail() {
    ++failed_;
    Next();
  }

  asio::io_context& ioc_;
  asio::ssl::context& ctx_;
  bool tls_;
  tcp::endpoint at_;
  int n_, started_ = 0, opened_ = 0, failed_ = 0;
  std::vector<std::unique_ptr<Client>> conns_;
};

// Slow-header clients: each sends a request line and a header one byte a second, never ending
// it; when the server drops one, it reconnects (until Stop()).
class Slowloris {
 public:
  Slowloris(asio::io_context& ioc, asio::ssl::context& ctx, bool tls, tcp::endpoint at, int n)
      : ioc_(ioc), ctx_(ctx), tls_(tls), at_(at), n_(n) {}
  void Start() {
    for (int i = 0; i < n_; ++i) Launch(i);
  }
  // Closes every slow client; their pending operations end with errors and do nothing more.
  void Stop() {
    stopping_ = true;
    for (auto& s : slots_) {
      if (!s) continue;
      beast::error_code ignored;
      s->c->Lowest().socket().close(ignored);
      s->timer->cancel();
    }
    slots_.clear();
  }
  const std::vector<double>& lasted_s() const { return lasted_s_; }
  int connected() const { return connected_; }
  int connect_failed() const { return connect_failed_; }

 private:
  struct Slot {
    std::unique_ptr<Client> c;
    std::unique_ptr<asio::steady_timer> timer;
    Clock::time_point since;
    size_t sent = 0;
    bool dropped = false;
  };
  void Launch(int i) {
    if (stopping_) return;
    if (slots_.size() <= static_cast<size_t>(i)) slots_.resize(static_cast<size_t>(i) + 1);
    auto s = std::make_shared<Slot>();
    s->c = std::make_unique<Client>(ioc_, ctx_, tls_);
    s->timer = std::make_unique<asio::steady_timer>(ioc_);
    slots_[static_cast<size_t>(i)] = s;
    s->since = Clock::now();
    s->c->Connect(at_, [this, i, s](beast::error_code ec) {
      if (stopping_) return;
      if (ec) {  // not a drop by a deadline: try again shortly
        ++connect_failed_;
        s->timer->expires_after(std::chrono::milliseconds(100));
        return s->timer->async_wait([this, i](beast::error_code e) {
          if (!e) Launch(i);
        });
      }
      ++connected_;
      // Any read completing means the server closed (it never answers an unfinished header).
      s->c->ReadSome([this, i, s](beast::error_code, size_t) { Dropped(i, s); });
      Drip(i, s);
    });
  }
  void Drip(int i, const std::shared_ptr<Slot>& s) {
    if (stopping_ || s->dropped) return;
    static const std::string kHeader =
        "GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Slow: " + std::string(4096, 'a');
    const size_t n = s->sent == 0 ? 26 : 1;  // the request line at once, then a byte a second
    s->c->Write(kHeader.substr(s->sent % kHeader.size(), n),
                [this, i, s, n](beast::error_code ec, size_t) {
                  if (stopping_ || s->dropped) return;
                  if (ec) return Dropped(i, s);
                  s->sent += n;
                  s->timer->expires_after(std::chrono::seconds(1));
                  s->timer->async_wait([this, i, s](beast::error_code e) {
                    if (!e) Drip(i, s);
                  });
                });
  }
  void Dropped(int i, const std::shared_ptr<Slot>& s) {
    if (stopping_ || s->dropped) return;
    s->dropped = true;
    lasted_s_.push_back(std::chrono::duration<double>(Clock::now() - s->since).count());
    s->timer->cancel();
    asio::post(ioc_, [this, i] { Launch(i); });
  }

  asio::io_context& ioc_;
  asio::ssl::context& ctx_;
  bool tls_;
  tcp::endpoint at_;
  int n_;
  bool stopping_ = false;
  int connected_ = 0, connect_failed_ = 0;
  std::vector<std::shared_ptr<Slot>> slots_;
  std::vector<double> lasted_s_;
};

// A blocking kept-alive TLS connection from a given local address (the probes and the agents
// come from 127.0.0.2, the flood from 127.0.0.1): one request at a time, 5 s timeouts.
class Conn {
 public:
  Conn(asio::ssl::context& ctx, tcp::endpoint at, std::string from)
      : ctx_(ctx), at_(at), from_(std::move(from)) {}
  // The status and body of a request over the kept-alive connection (a new one when `fresh`, or
  // when the last failed); status -1 on failure. `*ms`: how long it took.
  int Request(http::verb verb, const std::string& target, const std::string& token,
              const std::string& body, std::string* out, double* ms, bool fresh = false) {
    const auto t = Clock::now();
    try {
      if (fresh || !ssl_) Open();
      http::request<http::string_body> req{verb, target, 11};
      req.set(http::field::host, "127.0.0.1");
      if (!token.empty()) req.set(http::field::authorization, "Bearer " + token);
      if (!body.empty()) req.set(http::field::content_type, "application/json");
      req.body() = body;
      req.keep_alive(true);
      req.prepare_payload();
      http::response<http::string_body> res;
      beast::flat_buffer b;
      http::write(*ssl_, req);
      http::read(*ssl_, b, res);
      if (out != nullptr) *out = res.body();
      *ms = Ms(Clock::now() - t);
      if (fresh) ssl_.reset();
      return res.result_int();
    } catch (const std::exception&) {
      ssl_.reset();
      *ms = Ms(Clock::now() - t);
      return -1;
    }
  }

 private:
  void Open() {
    ssl_.reset();
    ssl_ = std::make_unique<beast::ssl_stream<tcp::socket>>(ioc_, ctx_);
    tcp::socket& s = beast::get_lowest_layer(*ssl_);
    s.open(tcp::v4());
    s.bind(tcp::endpoint(asio::ip::make_address(from_), 0));
    s.connect(at_);
    timeval tv{5, 0};
    setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(s.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    s.set_option(tcp::no_delay(true));
    ssl_->handshake(asio::ssl::stream_base::client);
  }

  asio::io_context ioc_;
  asio::ssl::context& ctx_;
  tcp::endpoint at_;
  std::string from_;
  std::unique_ptr<beast::ssl_stream<tcp::socket>> ssl_;
};

// Agents heartbeating every second, each over its own kept-alive connection from 127.0.0.2,
// with the real agent's bodies (agent/protocol.h), on a thread of their own. Records latency
// and failures while `recording`.
class Agents {
 public:
  Agents(asio::ssl::context& ctx, tcp::endpoint at, int n) {
    for (int i = 0; i < n; ++i) conns_.push_back(std::make_unique<Conn>(ctx, at, "127.0.0.2"));
  }
  ~Agents() { Stop(); }
  static std::string Node(int i) { return "flood-node-" + std::to_string(i); }
  static std::string Token(int i) { return "agent-token-" + std::to_string(i); }
  // Registers each (8 simulated H100s); false if any was refused.
  bool Register() {
    for (size_t i = 0; i < conns_.size(); ++i) {
      tessera::agent::Inventory inv;
      inv.node = Node(static_cast<int>(i));
      inv.simulated = true;
      inv.host.cpu_milli = 64000;
      inv.host.memory_mib = 512 * 1024;
      for (int d = 0; d < 8; ++d)
        inv.devices.push_back(
            {d, "H100-80GB", 81559, inv.node + "-gpu" + std::to_string(d), true, false});
      double ms = 0;
      if (conns_[i]->Request(http::verb::post, "/v1/agent/register", Token(static_cast<int>(i)),
                             tessera::agent::RegisterBody(inv, false), nullptr, &ms) != 200)
        return false;
    }
    return true;
  }
  void Start() {
    thread_ = std::thread([this] {
      for (auto due = Clock::now(); !stop_.load(); due += std::chrono::seconds(1)) {
        for (size_t i = 0; i < conns_.size(); ++i) {
          double ms = 0;
          const int status = conns_[i]->Request(
              http::verb::post, "/v1/agent/heartbeat", Token(static_cast<int>(i)),
              tessera::agent::HeartbeatBody(Node(static_cast<int>(i)), {}, {}), nullptr, &ms);
          std::lock_guard<std::mutex> l(mu_);
          if (!recording_) continue;
          if (status == 200) {
            ms_.push_back(ms);
          } else {
            ++failed_;
          }
        }
        std::this_thread::sleep_until(due + std::chrono::seconds(1));
      }
    });
  }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  // Starts recording afresh; Take() returns what was recorded since, and stops.
  void Record() {
    std::lock_guard<std::mutex> l(mu_);
    ms_.clear();
    failed_ = 0;
    recording_ = true;
  }
  std::vector<double> Take(int* failed) {
    std::lock_guard<std::mutex> l(mu_);
    recording_ = false;
    *failed = failed_;
    return ms_;
  }

 private:
  std::vector<std::unique_ptr<Conn>> conns_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  bool recording_ = false;
  std::vector<double> ms_;
  int failed_ = 0;
};

}  // namespace conn_flood
