// The HTTP server: routes, the connection caps, memory trims, TLS and the public methods.
#include "net/http_server.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <thread>

#include "net/heap.h"
#include "net/http_server_internal.h"
#include "net/tls.h"

namespace tessera::net {
namespace {

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

}  // namespace

const log::Logger& RequestLog() {
  static const log::Logger logger("http");
  return logger;
}

std::string ErrorBody(const std::string& what) {
  std::string out = "{\"error\":\"";
  for (char c : what) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"}";
}

size_t HttpServer::Impl::NextLoop() {
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

const RouteEntry* HttpServer::Impl::Find(HttpRequest& req) const {
  const std::vector<std::string> segs = Split(req.path);
  for (const RouteEntry& r : routes) {
    if (r.method == req.method && Matches(r, segs, &req.params)) return &r;
  }
  return nullptr;
}

log::Level HttpServer::Impl::Dispatch(HttpRequest& req, HttpResponse& res) const {
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
  // A path served under other methods: 405 naming them (RFC 9110, 15.5.6), not "no such
  // endpoint".
  std::vector<std::string> methods;
  for (const RouteEntry& r : routes) {
    HttpRequest probe;
    if (Matches(r, segs, &probe.params) &&
        std::find(methods.begin(), methods.end(), r.method) == methods.end())
      methods.push_back(r.method);
  }
  std::string allowed;
  for (const std::string& m : methods) allowed += (allowed.empty() ? "" : ", ") + m;
  if (!allowed.empty()) {
    res = HttpResponse{405,
                       "application/json",
                       ErrorBody("method " + req.method.substr(0, 16) +
                                 " is not allowed here (allowed: " + allowed + ")"),
                       {{"Allow", allowed}}};
    return log::Level::kInfo;
  }
  res = HttpResponse{404, "application/json", ErrorBody("no such endpoint"), {}};
  return log::Level::kInfo;
}

bool HttpServer::Impl::Admit(const PeerKey& peer, bool loopback, bool* counted) {
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

void HttpServer::Impl::Release(const PeerKey& peer) {
  std::lock_guard<std::mutex> l(peers_mu);
  auto it = peers.find(peer);
  if (it != peers.end() && --it->second <= 0) peers.erase(it);
}

void HttpServer::Impl::Refuse(int fd, const asio::ip::address& peer) {
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

void HttpServer::Impl::TrimTick() {
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

void HttpServer::Impl::Trim() {
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

Status HttpServer::Impl::LoadTls() {
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

// Takes connections from the listening acceptor under the server's limits; its port.
Result<int> HttpServer::Impl::Listen() {
  // Close-on-exec, bound or handed over: a process started from here (`tessera up`'s agent, a
  // backend's command) must not keep the port after this one is gone. Accepted connections are
  // made close-on-exec by accept4.
  const int fd = acceptor.native_handle();
  if (const int flags = fcntl(fd, F_GETFD); flags < 0 || fcntl(fd, F_SETFD, flags | FD_CLOEXEC) < 0)
    return Status::Internal("cannot make the listening socket close-on-exec");
  max_connections = options.max_connections > 0 ? options.max_connections : DefaultMaxConnections();
  Accept();
  TrimTick();
  return static_cast<int>(acceptor.local_endpoint().port());
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
  return impl_->Listen();
}

Result<int> HttpServer::Adopt(int listening_fd) {
  RaiseOpenFileLimit();
  if (!impl_->options.tls_cert_file.empty() || !impl_->options.tls_key_file.empty()) {
    Status st = impl_->LoadTls();
    if (!st.ok()) {
      close(listening_fd);
      return st;
    }
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (listening_fd < 0 ||
      getsockname(listening_fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      (addr.ss_family != AF_INET && addr.ss_family != AF_INET6)) {
    if (listening_fd >= 0) close(listening_fd);
    return Status::InvalidArgument("cannot serve on descriptor " + std::to_string(listening_fd) +
                                   ": not a listening TCP socket");
  }
  beast::error_code ec;
  tcp::acceptor& a = impl_->acceptor;
  a.assign(addr.ss_family == AF_INET ? tcp::v4() : tcp::v6(), listening_fd, ec);
  if (!ec) a.non_blocking(true, ec);
  if (ec) {
    if (!a.is_open()) close(listening_fd);
    return Status::FailedPrecondition("cannot serve on the socket handed over: " + ec.message());
  }
  return impl_->Listen();
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

void HttpServer::StopForHandover(int64_t grace_ms) {
  // The acceptor's loop stops first: what connects from here waits in the backlog.
  impl_->accept_ioc.stop();
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(grace_ms);
  while (impl_->open.load() > 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  Stop();
}

int HttpServer::ReleaseListener() {
  beast::error_code ec;
  if (!impl_->acceptor.is_open()) return -1;
  const int fd = impl_->acceptor.release(ec);
  return ec ? -1 : fd;
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
