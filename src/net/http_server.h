// HttpServer: HTTP/1.1 with kept-alive connections, event-driven (Boost.Beast over Asio).
//
// Connections are served by a few I/O threads that only read and write: ten thousand kept-alive
// agent connections cost sockets and buffers, not threads, and a slow handler never stops other
// connections from being read. Each I/O thread runs its own event loop, and each connection
// belongs to one loop for its life. Each complete request is handed to a worker pool (or run on
// the I/O thread that read it); its response goes back on its connection's loop. Requests on one
// connection are answered in order.
//
// Routes are "/v1/jobs/{id}/output"-style patterns: literal segments, and {name} for exactly one
// non-empty segment, captured in order into HttpRequest::params.
//
// The request log (component "http"): one line per answered request, after its response is
// written, with method, path (never the query string), status, duration_us, bytes (response
// body), in_bytes (request body) and peer; never a header or a body. Each route says the level
// of its lines (Route()); requests no route takes, and those the server refuses itself, log at
// info. Nothing is formatted, and no clock read, when that level is off (log::Enabled).
//
// Errors the server answers itself, with a JSON body {"error": "..."}: 400 for a malformed
// request, 404 for a path no route has, 413 for a body over max_body_bytes (the connection is
// then closed), 500 when a handler throws. Framing is strict (net/http_framing.h): a
// Transfer-Encoding other than exactly "chunked", Transfer-Encoding with Content-Length, or
// differing Content-Length values get 400 and the connection is closed.
//
// Limits against clients that hold connections (HttpServerOptions): a cap on open connections,
// in all and per peer address (a connection over either is accepted and closed at once, so the
// process never runs out of descriptors and the acceptor keeps serving others); a deadline for
// a request's header (slow-header clients are dropped) and one for its body; the idle deadline
// between requests. Memory freed by closed connections goes back to the system (the loops'
// malloc caches emptied, then malloc_trim; once a burst of closes is over, at most every 5 s).
//
// Thread-safety: Route() before Bind(); Run() blocks until Stop(), which any thread may call.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/status.h"

namespace tessera::net {

struct HttpRequest {
  std::string method;                          // "GET"
  std::string path;                            // decoded, without the query: "/v1/jobs/j-1"
  std::map<std::string, std::string> query;    // decoded query parameters
  std::map<std::string, std::string> headers;  // names in lower case
  std::vector<std::string> params;             // the route's {name} segments, in order
  std::string body;

  bool has_param(const std::string& name) const { return query.count(name) != 0; }
  std::string param(const std::string& name) const {
    auto it = query.find(name);
    return it == query.end() ? "" : it->second;
  }
  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? "" : it->second;
  }
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // more header fields
};

using HttpHandler = std::function<void(const HttpRequest&, HttpResponse&)>;
// The answer to a request whose handler replies later (a long poll): call it once, from any
// thread; later calls are ignored. The connection reads nothing more until then.
using HttpReply = std::function<void(HttpResponse)>;
using HttpAsyncHandler = std::function<void(const HttpRequest&, HttpReply)>;

// Called on the I/O thread for each complete request a route takes, before it is queued for a
// handler: false refuses it with the response in `*refusal` (no handler runs). On true it may set
// `*release`, which the server calls once the request's answer is handed to its connection
// (per-client limits on requests in progress, counted before they queue, not once they run).
using HttpAdmission = std::function<bool(const struct HttpRequest&, struct HttpResponse* refusal,
                                         std::function<void()>* release)>;

struct HttpServerOptions {
  int io_threads = 1;       // threads reading and writing connections
  HttpAdmission admission;  // none: every request is admitted
  // Threads running handlers; 0 runs them on the I/O threads, which saves two thread hand-offs
  // per request when handlers are short (a handler that waits then holds one I/O thread: have
  // enough of them).
  int workers = 8;
  size_t max_body_bytes = 1024 * 1024;   // larger bodies get 413
  int idle_timeout_ms = 10 * 60 * 1000;  // a connection silent this long between requests is closed
  // A request's header (request line and fields) must arrive within this, counted from its first
  // byte, or for a connection's first request from the connection's start (after the TLS
  // handshake, which has its own 10 s): a slow-header client is closed.
  int header_timeout_ms = 10 * 1000;
  int body_timeout_ms = 60 * 1000;  // the body must arrive within this after the header
  // Open connections at most; more are accepted and closed at once. 0: the open-file limit (as
  // Bind raised it) less 1,024 descriptors kept for the rest of the process (store, logs, job
  // output), and at most 50,000 (an idle TLS connection holds about 80 KB).
  int64_t max_connections = 0;
  // Open connections at most from one peer address (IPv6: one /64 network); 0: no limit.
  // Loopback peers are not counted unless `limit_loopback_peers` (local agents, a local proxy).
  int64_t max_connections_per_peer = 512;
  bool limit_loopback_peers = false;
  // TLS (HTTPS) when a certificate is given: PEM files, the certificate's chain and its key.
  // With a client CA, every client must present a certificate it signed (mutual TLS).
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
  // Signals that stop Run(), caught on the event loop (a signal handler may not touch it).
  std::vector<int> stop_signals;
};

class HttpServer {
 public:
  explicit HttpServer(HttpServerOptions options = {});
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // `request_log`: the level of this route's request-log lines (debug for a route hit many
  // times a second by machines, so that it does not flood the log at info).
  void Route(const std::string& method, const std::string& pattern, HttpHandler handler,
             log::Level request_log = log::Level::kInfo);
  // A route whose handler returns at once and answers through its HttpReply when it can: no
  // thread waits meanwhile (ten thousand agents long-polling hold sockets, not threads).
  void RouteAsync(const std::string& method, const std::string& pattern, HttpAsyncHandler handler,
                  log::Level request_log = log::Level::kInfo);
  // Runs `fn` on the event loop after `ms` milliseconds (a long poll's deadline); never once
  // the server has stopped.
  void After(int64_t ms, std::function<void()> fn);
  // Listens on host:port (0: any free port) and returns the port; loads the TLS files, refusing
  // with the file's name and the reason when one cannot be used. Raises the process's open-file
  // limit to its hard limit, since every kept-alive connection holds a descriptor.
  Result<int> Bind(const std::string& host, int port);
  // Like Bind, on a socket that already listens (one that ReleaseListener gave): the server owns
  // it from here, and connections waiting in its backlog are served. Returns its port.
  Result<int> Adopt(int listening_fd);
  // Serves until Stop().
  void Run();
  void Stop();
  // Stops taking connections (new ones wait in the listening socket's backlog), gives the open
  // ones up to `grace_ms` to finish their requests and close, then stops as Stop() does. For a
  // server that hands its socket on (a standby that starts to lead): no client is refused or
  // cut off in between. Blocks; not from a handler.
  void StopForHandover(int64_t grace_ms);
  // Once Run() has returned: the listening socket, now the caller's (-1 when there is none).
  int ReleaseListener();

  // Connections open now (for logs and benchmarks).
  int64_t connections() const;
  // Connections accepted and closed at once for being over a limit, since the start.
  int64_t refused_connections() const;
  // The connection cap in force (max_connections, or what Bind derived from the open-file limit).
  int64_t max_connections() const;

  // Percent-decodes `s` ('+' as a space when `plus_is_space`); malformed escapes stay as they are.
  static std::string Decode(const std::string& s, bool plus_is_space);

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::net
