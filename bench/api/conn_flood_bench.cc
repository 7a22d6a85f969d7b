// A flood of idle connections and slow-header clients against the HTTP server (red-team report,
// issue 30): net::HttpServer with a GET /v1/health route, over TLS by default, in a child
// process (its own descriptors and memory), as `tessera serve` runs it (I/O threads as cores,
// 4 workers). Prints:
//
//   - the server's RSS (VmRSS and RssAnon from /proc/PID/status) before the flood;
//   - the flood: --connections kept-alive connections from 127.0.0.1 that each make one request
//     and then idle (20,000 by default; fewer, said so, when the open-file hard limit cannot hold
//     them on both ends or they would pass the server's connection cap), and --slow slow-header
//     clients from the same address sending one header byte a second and reconnecting when
//     dropped;
//   - while they are open (--hold seconds), GET /v1/health every 50 ms over one kept-alive
//     connection and over a new connection each time: p50, p99 and max (goal: under 100 ms),
//     with failures; the slow clients' drops and how long each lasted (header deadline 10 s);
//   - the RSS at its peak, then --settle seconds after the flood closed, and the ratio to before
//     (goal: within 10%).
// The flood is run --rounds times against the same server (memory a first flood leaves behind
// should not grow with the next).
//
//   conn_flood_bench [--connections 20000] [--slow 200] [--hold 20] [--settle 5] [--rounds 2]
//   [--tls 1]
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

// clang-format off
#include <utility>  // before Boost 1.74's Asio, which uses std::exchange without it
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
// clang-format on
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "net/http_server.h"
#include "net/tls.h"
#include "percentile.h"

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using tessera::bench::Percentile;

struct Options {
  int connections = 20000;
  int slow = 200;
  int hold_s = 20;
  int settle_s = 5;
  int rounds = 2;
  bool tls = true;
};

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// VmRSS and RssAnon of a process, in KiB.
struct Rss {
  int64_t vm = 0, anon = 0;
};
Rss RssOf(pid_t pid) {
  Rss r;
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) r.vm = std::stoll(line.substr(6));
    if (line.rfind("RssAnon:", 0) == 0) r.anon = std::stoll(line.substr(8));
  }
  return r;
}

double LoadAverage() {
  std::ifstream in("/proc/loadavg");
  double l = 0;
  in >> l;
  return l;
}

// The server: runs until SIGTERM; writes its port to `port_fd`. Also GET /v1/stats: open and
// refused connections and the cap.
[[noreturn]] void ServeChild(const Options& o, const std::string& dir, int port_fd) {
  tessera::net::HttpServerOptions h;
  h.io_threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  h.workers = 4;
  if (o.tls) {
    h.tls_cert_file = dir + "/cert.pem";
    h.tls_key_file = dir + "/key.pem";
  }
  h.stop_signals = {SIGTERM};
  tessera::log::Configure(tessera::log::Level::kWarn, tessera::log::Format::kText);
  tessera::net::HttpServer server(h);
  server.Route("GET", "/v1/health",
               [](const tessera::net::HttpRequest&, tessera::net::HttpResponse& res) {
                 res.body = "{\"ok\":true,\"role\":\"leader\"}";
               });
  server.Route("GET", "/v1/stats",
               [&server](const tessera::net::HttpRequest&, tessera::net::HttpResponse& res) {
                 res.body = std::to_string(server.connections()) + " " +
                            std::to_string(server.refused_connections()) + " " +
                            std::to_string(server.max_connections());
               });
  auto port = server.Bind("127.0.0.1", 0);
  const int p = port.ok() ? *port : -1;
  if (write(port_fd, &p, sizeof p) != sizeof p || p < 0) _exit(1);
  close(port_fd);
  server.Run();
  _exit(0);
}

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

// Blocking probes from their own thread: GET /v1/health over a kept-alive connection, or over a
// new one. Returns the milliseconds, or -1 on failure.
class Prober {
 public:
  Prober(asio::ssl::context& ctx, bool tls, tcp::endpoint at) : ctx_(ctx), tls_(tls), at_(at) {}
  double Once(bool fresh) {
    const auto t = Clock::now();
    try {
      if (fresh || !kept_) kept_ = Open();
      Get(*kept_, "/v1/health");
      if (fresh) kept_.reset();
      return Ms(Clock::now() - t);
    } catch (const std::exception&) {
      kept_.reset();
      return -1;
    }
  }
  // The body of GET `target` over a new connection, "" on failure.
  std::string Fetch(const std::string& target) {
    try {
      auto c = Open();
      return Get(*c, target);
    } catch (const std::exception&) {
      return "";
    }
  }

 private:
  struct Conn {
    explicit Conn(asio::io_context& ioc, asio::ssl::context& ctx) : ssl(ioc, ctx) {}
    beast::ssl_stream<tcp::socket> ssl;
  };
  std::unique_ptr<Conn> Open() {
    auto c = std::make_unique<Conn>(ioc_, ctx_);
    tcp::socket& s = beast::get_lowest_layer(c->ssl);
    s.connect(at_);
    timeval tv{5, 0};
    setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(s.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    s.set_option(tcp::no_delay(true));
    if (tls_) c->ssl.handshake(asio::ssl::stream_base::client);
    return c;
  }
  std::string Get(Conn& c, const std::string& target) {
    http::request<http::empty_body> req{http::verb::get, target, 11};
    req.set(http::field::host, "127.0.0.1");
    req.keep_alive(true);
    http::response<http::string_body> res;
    beast::flat_buffer b;
    if (tls_) {
      http::write(c.ssl, req);
      http::read(c.ssl, b, res);
    } else {
      http::write(beast::get_lowest_layer(c.ssl), req);
      http::read(beast::get_lowest_layer(c.ssl), b, res);
    }
    if (res.result_int() != 200) throw std::runtime_error("status");
    return res.body();
  }

  asio::io_context ioc_;
  asio::ssl::context& ctx_;
  bool tls_;
  tcp::endpoint at_;
  std::unique_ptr<Conn> kept_;
};

struct Figures {
  std::vector<double> kept_ms, fresh_ms;
  int kept_failed = 0, fresh_failed = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--connections")) o.connections = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--slow")) o.slow = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--hold")) o.hold_s = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--settle")) o.settle_s = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--tls")) o.tls = std::atoi(argv[i + 1]) != 0;
    if (!std::strcmp(argv[i], "--rounds")) o.rounds = std::max(1, std::atoi(argv[i + 1]));
  }
  const std::string dir = "/tmp/tessera_conn_flood_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  if (o.tls) {
    auto st = tessera::net::WriteSelfSigned(dir + "/cert.pem", dir + "/key.pem", {"127.0.0.1"});
    if (!st.ok()) {
      std::fprintf(stderr, "cannot make a certificate: %s\n", st.ToString().c_str());
      return 1;
    }
  }
  // Both ends raise their soft open-file limit to the hard one (the server does so in Bind).
  rlimit r{};
  getrlimit(RLIMIT_NOFILE, &r);
  r.rlim_cur = r.rlim_max;
  setrlimit(RLIMIT_NOFILE, &r);
  const int64_t hard = r.rlim_max == RLIM_INFINITY ? (1 << 20) : static_cast<int64_t>(r.rlim_max);

  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return 1;
  const pid_t child = fork();
  if (child == 0) {
    close(pipe_fds[0]);
    ServeChild(o, dir, pipe_fds[1]);
  }
  close(pipe_fds[1]);
  int port = -1;
  if (read(pipe_fds[0], &port, sizeof port) != sizeof port || port <= 0) {
    std::fprintf(stderr, "the server did not start\n");
    return 1;
  }
  close(pipe_fds[0]);
  const tcp::endpoint at(asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port));
  asio::ssl::context ctx(asio::ssl::context::tls_client);
  ctx.set_verify_mode(asio::ssl::verify_none);
  SSL_CTX_set_mode(ctx.native_handle(), SSL_MODE_RELEASE_BUFFERS);

  Prober prober(ctx, o.tls, at);
  for (int i = 0; i < 50; ++i) prober.Once(i % 2 == 0);  // warm up
  long long open = 0, refused = 0, cap = 0;
  auto stats = [&] {
    const std::string s = prober.Fetch("/v1/stats");
    std::sscanf(s.c_str(), "%lld %lld %lld", &open, &refused, &cap);
  };
  stats();

  // What fits: the client holds the flood, the slow clients and a few more; the server's cap
  // (its open-file limit less 1,024) must leave room for the slow clients and the probes.
  const int64_t fits =
      std::min<int64_t>(hard - o.slow - 200, static_cast<int64_t>(cap) - o.slow - 50);
  const int n = static_cast<int>(std::min<int64_t>(o.connections, fits));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const Rss before = RssOf(child);
  std::printf(
      "conn_flood_bench: %s, %u cores, load average %.2f; open-file hard limit %lld (both "
      "processes); "
      "server connection cap %lld\n",
      o.tls ? "TLS" : "plain HTTP", std::thread::hardware_concurrency(), LoadAverage(),
      static_cast<long long>(hard), cap);
  if (n < o.connections) {
    std::printf(
        "  REDUCED: %d idle connections instead of %d (the hard limit of %lld descriptors per "
        "process "
        "cannot hold more beside %d slow clients, and the server's cap is %lld)\n",
        n, o.connections, static_cast<long long>(hard), o.slow, cap);
  }
  std::printf("  server RSS before: VmRSS %lld KiB, RssAnon %lld KiB\n",
              static_cast<long long>(before.vm), static_cast<long long>(before.anon));

  for (int round = 1; round <= o.rounds; ++round) {
    std::printf(" round %d of %d:\n", round, o.rounds);
    asio::io_context ioc(1);
    Flood flood(ioc, ctx, o.tls, at, n);
    Slowloris slow(ioc, ctx, o.tls, at, o.slow);
    const auto t0 = Clock::now();
    flood.Start();
    slow.Start();
    std::thread io([&ioc] {
      auto guard = asio::make_work_guard(ioc);
      ioc.run();
    });
    auto on_io = [&ioc](auto fn) {  // runs fn on the client's loop and waits for it
      std::promise<void> p;
      asio::post(ioc, [&] {
        fn();
        p.set_value();
      });
      p.get_future().wait();
    };
    bool opened = false;
    while (!opened && Ms(Clock::now() - t0) < 600000) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      on_io([&] { opened = flood.done(); });
    }
    const double open_s = Ms(Clock::now() - t0) / 1000;
    int flood_open = 0, flood_failed = 0;
    on_io([&] {
      flood_open = flood.opened();
      flood_failed = flood.failed();
    });
    stats();
    std::printf(
        "  flood: %d connections open (%d failed) in %.1f s, each after one request; server: %lld "
        "open, "
        "%lld refused so far\n",
        flood_open, flood_failed, open_s, open, refused);

    // Hold: probes every 50 ms, alternating kept-alive and new connections; RSS every second.
    Figures f;
    Rss peak = RssOf(child);
    const auto hold_until = Clock::now() + std::chrono::seconds(o.hold_s);
    auto next_rss = Clock::now();
    for (int i = 0; Clock::now() < hold_until; ++i) {
      const bool fresh = i % 2 == 1;
      const double ms = prober.Once(fresh);
      if (ms < 0) {
        ++(fresh ? f.fresh_failed : f.kept_failed);
      } else {
        (fresh ? f.fresh_ms : f.kept_ms).push_back(ms);
      }
      if (Clock::now() >= next_rss) {
        const Rss now = RssOf(child);
        if (now.vm > peak.vm) peak = now;
        next_rss += std::chrono::seconds(1);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    stats();
    const long long open_at_peak = open;
    std::vector<double> lasted;
    int slow_connections = 0, slow_failed = 0;
    on_io([&] {
      lasted = slow.lasted_s();
      slow_connections = slow.connected();
      slow_failed = slow.connect_failed();
      flood.CloseAll();
      slow.Stop();
    });
    const auto closed_at = Clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the slow clients' handlers end
    ioc.stop();
    io.join();

    std::vector<double> all = f.kept_ms;
    all.insert(all.end(), f.fresh_ms.begin(), f.fresh_ms.end());
    auto line = [](const char* what, const std::vector<double>& v, int failed) {
      std::printf("  health %-22s %5zu probes, %d failed: p50 %.2f ms, p99 %.2f ms, max %.2f ms\n",
                  what, v.size(), failed, Percentile(v, 50), Percentile(v, 99),
                  v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()));
    };
    std::printf("  while open (%d s; server: %lld open, %lld refused since the start):\n", o.hold_s,
                open_at_peak, refused);
    line("(kept-alive)", f.kept_ms, f.kept_failed);
    line("(new connection each)", f.fresh_ms, f.fresh_failed);
    const double worst = all.empty() ? 0 : *std::max_element(all.begin(), all.end());
    std::printf("  goal max < 100 ms: %s\n",
                worst < 100 && f.kept_failed + f.fresh_failed == 0 ? "met" : "NOT MET");
    std::printf(
        "  slow-header clients: %d at a time, %d connections in all (%d failed to connect), %zu "
        "dropped by "
        "the server, each after %.1f-%.1f s (p50 %.1f s)\n",
        o.slow, slow_connections, slow_failed, lasted.size(),
        lasted.empty() ? 0.0 : *std::min_element(lasted.begin(), lasted.end()),
        lasted.empty() ? 0.0 : *std::max_element(lasted.begin(), lasted.end()),
        Percentile(lasted, 50));
    std::printf(
        "  server RSS at the peak: VmRSS %lld KiB, RssAnon %lld KiB (%.1f KiB per open "
        "connection)\n",
        static_cast<long long>(peak.vm), static_cast<long long>(peak.anon),
        open_at_peak > 0
            ? static_cast<double>(peak.anon - before.anon) / static_cast<double>(open_at_peak)
            : 0.0);

    // Settle, then RSS again.
    Rss after = RssOf(child);
    for (int s = 0; s < o.settle_s; ++s) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      after = RssOf(child);
    }
    stats();
    const double returned = peak.vm > before.vm ? static_cast<double>(peak.vm - after.vm) /
                                                      static_cast<double>(peak.vm - before.vm)
                                                : 1.0;
    std::printf(
        "  %.1f s after the flood closed (server: %lld open): VmRSS %lld KiB (%.3f of before), "
        "RssAnon %lld "
        "KiB (%.3f of before); %.1f%% of what the flood took returned\n",
        Ms(Clock::now() - closed_at) / 1000, open, static_cast<long long>(after.vm),
        static_cast<double>(after.vm) / static_cast<double>(before.vm),
        static_cast<long long>(after.anon),
        static_cast<double>(after.anon) / static_cast<double>(before.anon), 100 * returned);
    std::printf("  goal VmRSS within 10%% of before: %s\n",
                after.vm <= before.vm + before.vm / 10 ? "met" : "NOT MET");
  }

  kill(child, SIGTERM);
  int status = 0;
  waitpid(child, &status, 0);
  std::filesystem::remove_all(dir);
  return 0;
}
