#include "backends/kubernetes/client.h"

#include <httplib.h>
#include <netdb.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <thread>

#include "net/client_tls.h"

namespace tessera::backends::kube {
namespace {

// Every PEM certificate of `pem` in a new store (owned by the caller), or nullptr.
X509_STORE* StoreOf(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) return nullptr;
  X509_STORE* store = X509_STORE_new();
  int n = 0;
  while (X509* x = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) {
    X509_STORE_add_cert(store, x);
    X509_free(x);
    ++n;
  }
  BIO_free(bio);
  if (n == 0) {
    X509_STORE_free(store);
    return nullptr;
  }
  return store;
}

// The first address `host` resolves to, as text.
std::string Resolve(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) return host;
  char buf[NI_MAXHOST];
  std::string out = host;
  if (getnameinfo(res->ai_addr, res->ai_addrlen, buf, sizeof buf, nullptr, 0, NI_NUMERICHOST) == 0)
    out = buf;
  freeaddrinfo(res);
  return out;
}

bool Retryable(int status) {
  return status == 429 || status == 500 || status == 502 || status == 503 || status == 504;
}

}  // namespace

std::string QueryEscape(const std::string& s) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

Client::Client(Connection c, ClientOptions o) : conn_(std::move(c)), opt_(o) {}
Client::~Client() { Stop(); }

Result<std::unique_ptr<Client>> Client::Make(const Connection& c, ClientOptions o) {
  // A TLS write to a connection the server closed raises SIGPIPE, which by default ends the
  // process: a client of a remote server ignores it (unless the process chose a handler).
  static const bool kIgnored = [] {
    struct sigaction cur {};
    if (sigaction(SIGPIPE, nullptr, &cur) == 0 && cur.sa_handler == SIG_DFL)
      std::signal(SIGPIPE, SIG_IGN);
    return true;
  }();
  (void)kIgnored;
  std::unique_ptr<Client> cl(new Client(c, o));
  std::string rest;
  if (c.server.rfind("https://", 0) == 0) {
    cl->https_ = true;
    rest = c.server.substr(8);
  } else if (c.server.rfind("http://", 0) == 0) {
    rest = c.server.substr(7);
  } else {
    return Status::InvalidArgument("kubernetes: server '" + c.server + "' is not an http(s) URL");
  }
  rest = rest.substr(0, rest.find('/'));
  const size_t colon = rest.rfind(':');
  const bool bracketed = !rest.empty() && rest.front() == '[';
  if (colon != std::string::npos && (!bracketed || colon > rest.find(']'))) {
    cl->host_ = rest.substr(0, colon);
    try {
      cl->port_ = std::stoi(rest.substr(colon + 1));
    } catch (...) {
      return Status::InvalidArgument("kubernetes: server '" + c.server + "' has a bad port");
    }
  } else {
    cl->host_ = rest;
    cl->port_ = cl->https_ ? 443 : 80;
  }
  if (bracketed) cl->host_ = cl->host_.substr(1, cl->host_.size() - 2);
  if (cl->host_.empty())
    return Status::InvalidArgument("kubernetes: server '" + c.server + "' has no host");
  if (cl->https_ && !c.tls_server_name.empty()) cl->connect_to_ = Resolve(cl->host_);
  // Parse the certificates once, so a bad one is reported at start.
  auto probe = cl->NewConnection(o.timeout_ms);
  if (!probe.ok()) return probe.status();
  return cl;
}

Result<std::shared_ptr<httplib::ClientImpl>> Client::NewConnection(int64_t read_timeout_ms) const {
  std::shared_ptr<httplib::ClientImpl> h;
  const std::string host = https_ && !conn_.tls_server_name.empty() ? conn_.tls_server_name : host_;
  if (https_) {
    std::shared_ptr<httplib::SSLClient> s;
    if (!conn_.client_cert_pem.empty()) {
      BIO* cb = BIO_new_mem_buf(conn_.client_cert_pem.data(),
                                static_cast<int>(conn_.client_cert_pem.size()));
      X509* cert = PEM_read_bio_X509(cb, nullptr, nullptr, nullptr);
      BIO_free(cb);
      BIO* kb = BIO_new_mem_buf(conn_.client_key_pem.data(),
                                static_cast<int>(conn_.client_key_pem.size()));
      EVP_PKEY* key = PEM_read_bio_PrivateKey(kb, nullptr, nullptr, nullptr);
      BIO_free(kb);
      if (cert == nullptr || key == nullptr) {
        if (cert) X509_free(cert);
        if (key) EVP_PKEY_free(key);
        return Status::InvalidArgument("kubernetes (" + conn_.source +
                                       "): the client certificate or key is not valid PEM");
      }
      s = std::make_shared<httplib::SSLClient>(host, port_, cert, key);
      X509_free(cert);
      EVP_PKEY_free(key);
    } else {
      s = std::make_shared<httplib::SSLClient>(host, port_);
    }
    if (!s->is_valid())
      return Status::InvalidArgument("kubernetes (" + conn_.source +
                                     "): cannot set up TLS with the client certificate");
    if (!conn_.ca_pem.empty()) {
      X509_STORE* store = StoreOf(conn_.ca_pem);
      if (store == nullptr)
        return Status::InvalidArgument("kubernetes (" + conn_.source +
                                       "): the certificate authority is not valid PEM");
      s->set_ca_cert_store(store);
    }
    s->enable_server_certificate_verification(!conn_.insecure);
    if (!connect_to_.empty()) s->set_hostname_addr_map({{host, connect_to_}});
    h = s;
  } else {
    h = std::make_shared<httplib::ClientImpl>(host_, port_);
  }
  h->set_keep_alive(true);
  h->set_tcp_nodelay(true);  // headers and body go in separate writes: no 40 ms delayed-ACK stall
  h->set_connection_timeout(std::chrono::milliseconds(opt_.connect_timeout_ms));
  h->set_read_timeout(std::chrono::milliseconds(read_timeout_ms));
  h->set_write_timeout(std::chrono::milliseconds(opt_.timeout_ms));
  return h;
}

Result<std::string> Client::Token() const {
  if (!conn_.token_file.empty()) {
    auto t = net::ReadSecretFile(conn_.token_file);  // re-read each time: tokens rotate
    if (!t.ok()) return t.status();
    return *t;
  }
  return conn_.token;
}

Result<Response> Client::Call(const std::string& method, const std::string& path,
                              const std::string& body, const std::string& content_type) {
  auto now_ms = [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  if (now_ms() < down_until_ms_.load()) {
    std::lock_guard<std::mutex> l(mu_);
    return Status::FailedPrecondition(
        "kubernetes API server " + conn_.server + " is not answering (" + down_reason_ +
        "); tried again within " + std::to_string(opt_.down_for_ms / 1000) + "s");
  }
  int64_t pause = opt_.backoff_ms;
  std::string last = "no attempt made";
  int unanswered = 0;
  for (int attempt = 1; attempt <= std::max(opt_.attempts, 1); ++attempt) {
    if (stopped_) return Status::FailedPrecondition("kubernetes client stopped");
    auto token = Token();
    if (!token.ok()) return token.status();
    httplib::Request req;
    req.method = method;
    req.path = path;
    req.headers.emplace("Accept", "application/json");
    if (!token->empty()) req.headers.emplace("Authorization", "Bearer " + *token);
    if (!body.empty() || method == "POST" || method == "PUT" || method == "PATCH") {
      req.body = body;
      req.headers.emplace("Content-Type", content_type);
    }
    std::shared_ptr<httplib::ClientImpl> conn;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!call_conn_) {
        auto c = NewConnection(opt_.timeout_ms);
        if (!c.ok()) return c.status();
        call_conn_ = *c;
      }
      conn = call_conn_;
      ++requests_;
      auto res = conn->send(req);
      if (res) {
        Response r{res->status, res->body};
        if (!Retryable(r.status) || attempt == opt_.attempts) return r;
        last = "HTTP " + std::to_string(r.status);
        if (r.status == 429 && res->has_header("Retry-After")) {
          try {
            pause = std::clamp<int64_t>(std::stoll(res->get_header_value("Retry-After")) * 1000, 1,
                                        opt_.max_backoff_ms);
          } catch (...) {
          }
        }
      } else {
        last = httplib::to_string(res.error());
        call_conn_.reset();  // a fresh connection next time
        if (++unanswered >= std::max(opt_.unanswered_attempts, 1)) {
          down_reason_ = last;
          down_until_ms_ = now_ms() + opt_.down_for_ms;
          break;
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(pause));
    pause = std::min(pause * 2, opt_.max_backoff_ms);
  }
  return Status::FailedPrecondition("kubernetes " + method + " " + path.substr(0, path.find('?')) +
                                    " at " + conn_.server + ": no usable answer (" + last + ")");
}

Result<int> Client::Stream(const std::string& path, int read_timeout_s,
                           const std::function<bool(const std::string&)>& on_line) {
  if (stopped_) return Status::FailedPrecondition("kubernetes client stopped");
  auto token = Token();
  if (!token.ok()) return token.status();
  auto made = NewConnection(int64_t{read_timeout_s} * 1000);
  if (!made.ok()) return made.status();
  std::shared_ptr<httplib::ClientImpl> conn = *made;
  {
    std::lock_guard<std::mutex> l(stream_mu_);
    if (stopped_) return Status::FailedPrecondition("kubernetes client stopped");
    stream_conn_ = conn;
  }
  httplib::Headers headers{{"Accept", "application/json"}};
  if (!token->empty()) headers.emplace("Authorization", "Bearer " + *token);
  int status = 0;
  std::string pending, error_body;
  ++requests_;
  auto res = conn->Get(
      path, headers,
      [&](const httplib::Response& r) {
        status = r.status;
        return true;
      },
      [&](const char* data, size_t n) {
        if (status != 200) {
          error_body.append(data, n);
          return true;
        }
        pending.append(data, n);
        size_t start = 0;
        for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
          if (nl > start && !on_line(pending.substr(start, nl - start))) return false;
        }
        pending.erase(0, start);
        return !stopped_;
      });
  {
    std::lock_guard<std::mutex> l(stream_mu_);
    stream_conn_.reset();
  }
  if (!pending.empty() && status == 200 && !stopped_) on_line(pending);
  if (status == 0 && !res)
    return Status::FailedPrecondition("kubernetes watch " + path.substr(0, path.find('?')) + ": " +
                                      httplib::to_string(res.error()));
  return status;
}

void Client::Stop() {
  stopped_ = true;
  std::lock_guard<std::mutex> l(stream_mu_);
  if (stream_conn_) stream_conn_->stop();
}

}  // namespace tessera::backends::kube
