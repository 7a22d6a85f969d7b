#include "api/server.h"

#include <algorithm>
#include <chrono>
#include <csignal>

#include "api/request_slots.h"
#include "common/log.h"
#include "common/text.h"
#include "model/quantity.h"
#include "net/http_server.h"

namespace tessera::api {
namespace {

constexpr size_t kMaxBody = 1024 * 1024;

const log::Logger& ServeLog() {
  static const log::Logger logger("serve");
  return logger;
}

// The request log's level for a route: agents' requests (10,000 agents heartbeat every second)
// and Prometheus's scrapes at debug, so that they do not flood it; people's at info.
log::Level RequestLogLevel(const std::string& pattern) {
  return pattern.rfind("/v1/agent/", 0) == 0 || pattern == "/metrics" ? log::Level::kDebug
                                                                      : log::Level::kInfo;
}

int HttpCode(const Status& st) {
  switch (st.code()) {
    case StatusCode::kOk:
      return 200;
    case StatusCode::kInvalidArgument:
      return 400;
    case StatusCode::kUnauthenticated:
      return 401;
    case StatusCode::kPermissionDenied:
      return 403;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kFailedPrecondition:
      return 409;
    case StatusCode::kResourceExhausted:
      return 429;
    case StatusCode::kInternal:
      return 500;
  }
  return 500;
}

using net::HttpRequest;
using net::HttpResponse;

void Reply(HttpResponse& res, int code, const Json& body) {
  res.status = code;
  res.content_type = "application/json";
  // Invalid UTF-8 from an old record is replaced (U+FFFD), never a reason to fail the answer.
  res.body = body.dump(-1, ' ', false, Json::error_handler_t::replace);
}

void ReplyError(HttpResponse& res, const Status& st) {
  Reply(res, HttpCode(st), Json{{"error", st.message()}});
  if (res.status == 429) res.headers.emplace_back("Retry-After", "5");  // a limit: try again later
}

template <typename T>
void ReplyResult(HttpResponse& res, const Result<T>& r) {
  if (r.ok()) {
    Reply(res, 200, *r);
  } else {
    ReplyError(res, r.status());
  }
}

Result<Identity> Authenticate(const Engine& e, const HttpRequest& req) {
  const std::string h = req.header("authorization");
  const std::string prefix = "Bearer ";
  if (h.rfind(prefix, 0) != 0 || h.size() == prefix.size()) {
    return Status::Unauthenticated("missing bearer token (Authorization: Bearer <token>)");
  }
  const Identity* id = e.config().FindIdentityByTokenHash(Sha256Hex(h.substr(prefix.size())));
  if (!id) return Status::Unauthenticated("unknown token");
  return *id;
}

// How deep arrays and objects nest in JSON text (strings skipped), stopping past `limit`: a
// small body nested half a million deep would otherwise be parsed, and then copied and freed
// recursively, until the stack runs out.
int Nesting(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

Result<Json> Body(const HttpRequest& req) {
  if (req.body.size() > kMaxBody) return Status::InvalidArgument("body over 1 MiB");
  constexpr int kMaxNesting = 64;
  if (Nesting(req.body, kMaxNesting) > kMaxNesting) {
    return Status::InvalidArgument("JSON body nested deeper than 64 levels");
  }
  Json j = Json::parse(req.body, nullptr, false);
  if (j.is_discarded()) return Status::InvalidArgument("malformed JSON body");
  return j;
}

// The range asked of a job's output: a "Range: bytes=FIRST-[LAST]" header, or ?offset=&length=.
Status OutputRangeOf(const HttpRequest& req, int64_t* offset, int64_t* length) {
  const std::string range = req.header("range");
  if (!range.empty()) {
    const size_t dash = range.find('-');
    if (range.rfind("bytes=", 0) != 0 || dash == std::string::npos ||
        range.find(',') != std::string::npos) {
      return Status::InvalidArgument("Range: expected bytes=FIRST-[LAST]");
    }
    auto first = ParseNonNegativeInt(range.substr(6, dash - 6));
    if (!first.ok()) return Status::InvalidArgument("Range: expected bytes=FIRST-[LAST]");
    *offset = *first;
    if (dash + 1 < range.size()) {
      auto last = ParseNonNegativeInt(range.substr(dash + 1));
      if (!last.ok() || *last < *first)
        return Status::InvalidArgument("Range: LAST must be a number at least FIRST");
      // (last - first) + 1 would overflow at LAST = 2^63 - 1: compare before adding.
      if (*last - *first < *length) *length = *last - *first + 1;
    }
    return Status::Ok();
  }
  for (auto [name, out] :
       {std::pair<const char*, int64_t*>{"offset", offset}, {"length", length}}) {
    if (!req.has_param(name)) continue;
    auto v = ParseNonNegativeInt(req.param(name));
    if (!v.ok())
      return Status::InvalidArgument(std::string("'") + name + "' must be a non-negative integer");
    *out = name == std::string("length") ? std::min(*out, *v) : *v;
  }
  return Status::Ok();
}

// Query parameters in milliseconds (times, steps): each present one must be a non-negative
// integer; absent ones keep their value.
Status MsParams(const HttpRequest& req,
                std::initializer_list<std::pair<const char*, int64_t*>> params) {
  for (auto [name, out] : params) {
    if (!req.has_param(name)) continue;
    auto v = ParseNonNegativeInt(req.param(name));
    if (!v.ok())
      return Status::InvalidArgument(std::string("'") + name +
                                     "' must be milliseconds (an integer)");
    *out = *v;
  }
  return Status::Ok();
}

int IntParam(const HttpRequest& req, const char* name, int def, int max) {
  if (!req.has_param(name)) return def;
  auto v = ParseNonNegativeInt(req.param(name));
  if (!v.ok()) return -1;
  return static_cast<int>(std::min<int64_t>(*v, max));
}

}  // namespace

const std::vector<RouteInfo>& ApiServer::Routes() {
  static const std::vector<RouteInfo> kRoutes = {
      {"GET", "/v1/health"},
      {"POST", "/v1/jobs"},
      {"GET", "/v1/jobs"},
      {"GET", "/v1/jobs/{id}"},
      {"POST", "/v1/jobs/{id}/cancel"},
      {"GET", "/v1/jobs/{id}/output"},
      {"GET", "/v1/queues"},
      {"GET", "/v1/groups"},
      {"GET", "/v1/nodes"},
      {"GET", "/v1/events"},
      {"GET", "/v1/summary"},
      {"GET", "/v1/utilization"},
      {"GET", "/v1/usage"},
      {"GET", "/v1/whatif/scenario"},
      {"GET", "/v1/whatif"},
      {"GET", "/"},
      {"GET", "/v1/whoami"},
      {"POST", "/v1/agent/register"},
      {"POST", "/v1/agent/heartbeat"},
      {"PUT", "/v1/agent/jobs/{id}/output"},
      {"GET", "/v1/agent/orders"},
      {"GET", "/metrics"},
  };
  return kRoutes;
}

namespace {
net::HttpServerOptions HttpOptions(const ApiServerOptions& o, int io_threads, int workers) {
  net::HttpServerOptions h;
  h.admission = o.admission;
  if (io_threads <= 0)
    io_threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  h.io_threads = io_threads;
  h.workers = workers;
  h.max_body_bytes = kMaxBody;
  h.idle_timeout_ms = o.idle_timeout_ms;
  h.max_connections = o.max_connections;
  h.max_connections_per_peer = o.max_connections_per_peer;
  h.limit_loopback_peers = o.limit_loopback_peers;
  if (o.stop_on_signals) h.stop_signals = {SIGINT, SIGTERM};
  h.tls_cert_file = o.tls_cert_file;
  h.tls_key_file = o.tls_key_file;
  h.tls_client_ca_file = o.tls_client_ca_file;
  return h;
}

// The boundary check every route passes before its handler: the decoded path and every query
// parameter must be valid UTF-8 without control characters (they name jobs, nodes and filters,
// and reach events and logs), and an Idempotency-Key is printable ASCII of at most 255 bytes.
// A request failing it is refused (400) before authentication, so that nothing of it is stored.
Status CheckRequestText(const HttpRequest& req) {
  if (!IsCleanText(req.path)) {
    return Status::InvalidArgument(
        "the request path is not valid UTF-8 text (or holds control characters)");
  }
  for (const auto& [name, value] : req.query) {
    if (!IsCleanText(name) || !IsCleanText(value)) {
      return Status::InvalidArgument("query parameter '" + ToValidUtf8(EscapeForTerminal(name)) +
                                     "' is not valid UTF-8 text (or holds control characters)");
    }
  }
  const std::string key = req.header("idempotency-key");
  bool key_ok = key.size() <= 255;
  for (unsigned char c : key) key_ok = key_ok && c > 0x20 && c < 0x7f;
  if (!key_ok)
    return Status::InvalidArgument("Idempotency-Key must be 1 to 255 printable ASCII characters");
  return Status::Ok();
}

// `o` with the HTTP server's admission taking one of each request's identity's slots as it is
// read, before it queues for a handler (people and scripts; agents and requests without a known
// token take none): past its slots, 429 with Retry-After; the slot comes back with the answer.
ApiServerOptions WithSlots(ApiServerOptions o, Engine* e, RequestSlots* slots) {
  o.admission = [e, slots](const HttpRequest& req, HttpResponse* refusal,
                           std::function<void()>* release) {
    if (req.header("authorization").empty()) return true;
    auto who = Authenticate(*e, req);
    if (!who.ok() || who->role == Role::kAgent) return true;
    if (!slots->Acquire(who->name)) {
      ReplyError(*refusal, Status::ResourceExhausted(
                               "'" + who->name + "' has " +
                               std::to_string(e->config().max_requests_per_identity) +
                               " requests in progress (max_requests_per_identity): try again "
                               "shortly"));
      return false;
    }
    *release = [slots, name = who->name] { slots->Release(name); };
    return true;
  };
  return o;
}

// Registers routes on the HTTP server with each request's handling time recorded for
// tessera_http_request_duration_seconds, by the route's pattern (bounded labels), not its path.
struct TimedRoutes {
  net::HttpServer& http;
  Engine* e;
  void Route(const std::string& method, const std::string& pattern, net::HttpHandler handler,
             log::Level request_log = log::Level::kInfo) {
    http.Route(
        method, pattern,
        [e = e, method, pattern, handler = std::move(handler)](const HttpRequest& req,
                                                               HttpResponse& res) {
          const auto start = std::chrono::steady_clock::now();
          auto micros = [&start] {
            return std::chrono::duration_cast<std::chrono::microseconds>(
                       std::chrono::steady_clock::now() - start)
                .count();
          };
          try {
            if (Status st = CheckRequestText(req); !st.ok()) {
              ReplyError(res, st);
            } else {
              handler(req, res);
            }
          } catch (...) {
            e->ObserveRequest(method, pattern, 500, micros());  // the server answers 500
            throw;
          }
          e->ObserveRequest(method, pattern, res.status, micros());
        },
        request_log);
  }
  // A route answered later (once what it changed is durable), timed until its answer.
  void RouteAsync(const std::string& method, const std::string& pattern,
                  net::HttpAsyncHandler handler, log::Level request_log = log::Level::kInfo) {
    http.RouteAsync(
        method, pattern,
        [e = e, method, pattern, handler = std::move(handler)](const HttpRequest& req,
                                                               net::HttpReply reply) {
          const auto start = std::chrono::steady_clock::now();
          net::HttpReply timed = [e, method, pattern, start,
                                  reply = std::move(reply)](HttpResponse res) {
            const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(
                std::chrono::steady_clock::now() - start);
            e->ObserveRequest(method, pattern, res.status, micros.count());
            reply(std::move(res));
          };
          if (Status st = CheckRequestText(req); !st.ok()) {
            HttpResponse res;
            ReplyError(res, st);
            return timed(std::move(res));
          }
          handler(req, std::move(timed));
        },
        request_log);
  }
};

// A handler that runs `fn` with the request's identity, or refuses the request (401) for its
// credentials, with an audit event.
template <typename Fn>
auto Authed(Engine* e, Fn fn) {
  return [e, fn](const HttpRequest& req, HttpResponse& res) {
    auto who = Authenticate(*e, req);
    if (!who.ok()) {
      e->AuditAuthFailure(req.method, req.path, who.status().message());
      return ReplyError(res, who.status());
    }
    fn(*who, req, res);
  };
}

// The same for a route answered later: `fn(who, req, reply)`.
template <typename Fn>
auto AuthedAsync(Engine* e, Fn fn) {
  return [e, fn](const HttpRequest& req, net::HttpReply reply) {
    auto who = Authenticate(*e, req);
    if (!who.ok()) {
      e->AuditAuthFailure(req.method, req.path, who.status().message());
      HttpResponse res;
      ReplyError(res, who.status());
      return reply(std::move(res));
    }
    fn(*who, req, std::move(reply));
  };
}

// Answers `reply` with `r` (200, or `ok_status`), or its error.
void ReplyLater(const net::HttpReply& reply, const Result<Json>& r, int ok_status = 200) {
  HttpResponse res;
  if (r.ok()) {
    Reply(res, ok_status, *r);
  } else {
    ReplyError(res, r.status());
  }
  reply(std::move(res));
}

// GET /v1/health (no token) and /v1/whoami.
void AddHealthRoutes(TimedRoutes& s) {
  Engine* e = s.e;
  s.Route("GET", "/v1/health", [e](const HttpRequest& req, HttpResponse& res) {
    Json h = e->Health();
    const int code = h["ok"].get<bool>() ? 200 : 503;
    // Without an admin's token: up or not, and the role; no counts, no store error text.
    auto who = Authenticate(*e, req);
    if (!who.ok() || who->role != Role::kAdmin) {
      h = Json{
          {"ok", h["ok"]}, {"role", h["role"]}, {"store", h["ok"].get<bool>() ? "ok" : "failed"}};
    }
    Reply(res, code, h);
  });
  s.Route("GET", "/v1/whoami",
          Authed(e, [](const Identity& who, const HttpRequest&, HttpResponse& res) {
            Reply(res, 200,
                  Json{{"name", who.name}, {"role", RoleName(who.role)}, {"groups", who.groups}});
          }));
}

// Jobs: submit, list, get, cancel, read output.
void AddJobRoutes(TimedRoutes& s) {
  Engine* e = s.e;
  // Answered once the job is durable, from the commit writer: no API thread waits for the store.
  s.RouteAsync(
      "POST", "/v1/jobs",
      AuthedAsync(e, [e](const Identity& who, const HttpRequest& req, net::HttpReply reply) {
        auto body = Body(req);
        if (!body.ok()) return ReplyLater(reply, body.status());
        e->SubmitAsync(who, *body, req.header("idempotency-key"),
                       [reply = std::move(reply)](Result<Json> r, bool replayed) {
                         ReplyLater(reply, r, replayed ? 200 : 201);
                       });
      }));
  s.Route(
      "GET", "/v1/jobs",
      Authed(e, [e](const Identity& who, const HttpRequest& req, HttpResponse& res) {
        int limit = IntParam(req, "limit", 100, 10000);
        if (limit < 0)
          return ReplyError(res, Status::InvalidArgument("'limit' must be a non-negative integer"));
        ReplyResult(res, e->ListJobs(who, req.has_param("state") ? req.param("state") : "", limit));
      }));
  s.Route("GET", "/v1/jobs/{id}",
          Authed(e, [e](const Identity& who, const HttpRequest& req, HttpResponse& res) {
            ReplyResult(res, e->GetJob(who, req.params[0]));
          }));
  s.Route("POST", "/v1/jobs/{id}/cancel",
          Authed(e, [e](const Identity& who, const HttpRequest& req, HttpResponse& res) {
            ReplyResult(res, e->Cancel(who, req.params[0]));
          }));
  s.Route("GET", "/v1/jobs/{id}/output",
          Authed(e, [e](const Identity& who, const HttpRequest& req, HttpResponse& res) {
            // A range: "Range: bytes=FIRST-[LAST]" or ?offset=&length=, at most 4 MiB per request
            // (206 with Content-Range when it is not the whole output); X-Output-Size says how much
            // there is, so a client reads on from where it stopped.
            int64_t offset = 0, length = Engine::kOutputRangeMax;
            if (Status st = OutputRangeOf(req, &offset, &length); !st.ok())
              return ReplyError(res, st);
            auto out = e->JobOutput(who, req.params[0], offset, length);
            if (!out.ok()) return ReplyError(res, out.status());
            const int64_t last = out->offset + static_cast<int64_t>(out->bytes.size());
            res.content_type = "text/plain";
            res.headers.emplace_back("X-Output-Size", std::to_string(out->total));
            res.headers.emplace_back("Accept-Ranges", "bytes");
            if (out->offset > 0 || last < out->total) {
              res.status = 206;
              res.headers.emplace_back(
                  "Content-Range", out->bytes.empty() ? "bytes */" + std::to_string(out->total)
                                                      : "bytes " + std::to_string(out->offset) +
                                                            "-" + std::to_string(last - 1) + "/" +
                                                            std::to_string(out->total));
            }
            res.body = std::move(out->bytes);
          }));
}

// Queues, groups, nodes, the summary and the event log.
void AddViewRoutes(TimedRoutes& s) {
  Engine* e = s.e;
  s.Route("GET", "/v1/queues",
          Authed(e, [e](const Identity& who, const HttpRequest&, HttpResponse& res) {
            ReplyResult(res, e->Queues(who));
          }));
  s.Route("GET", "/v1/groups",
          Authed(e, [e](const Identity& who, const HttpRequest&, HttpResponse& res) {
            ReplyResult(res, e->Groups(who));
          }));
  s.Route("GET", "/v1/nodes",
          Authed(e, [e](const Identity& who, const HttpRequest&, HttpResponse& res) {
            ReplyResult(res, e->Nodes(who));
          }));
  s.Route("GET", "/v1/summary",
          Authed(e, [e](const Identity& who, const HttpRequest&, HttpResponse& res) {
            ReplyResult(res, e->Summary(who));
          }));
  s.Route(
      "GET", "/v1/events",
      Authed(e, [e](const Identity& who, const HttpRequest& req, HttpResponse& res) {
        int limit = IntParam(req, "limit", 100, 1000);
        // Event numbers are 64-bit: past 2^31 an int would page the same events forever.
        auto after_param = ParseNonNegativeInt(req.has_param("after") ? req.param("after") : "0");
        int64_t after = after_param.ok() ? *after_param : -1;
        const int tail = IntParam(req, "tail", 0, 1000);
        if (limit < 0 || after < 0 || tail < 0) {
          return ReplyError(res, Status::InvalidArgument(
                                     "'after', 'limit' and 'tail' must be non-negative integers"));
        }
        if (tail > 0) {
          // The newest events: start `tail` before the last one recorded.
          auto last = e->LastEventSeq();
          if (!last.ok()) return ReplyError(res, last.status());
          after = std::max<int64_t>(0, *last - tail);
        }
        store::EventFilter f;
        if (req.has_param("kind")) f.kind_prefix = req.param("kind");
        if (req.has_param("subject")) f.subject = req.param("subject");
        if (req.has_param("actor")) f.actor = req.param("actor");
        ReplyResult(res, e->Events(who, after, limit, f));
      }));
}

// Utilization history, usage and what-if.
void AddHistoryRoutes(TimedRoutes& s) {
  Engine* e = s.e;
  s.Route("GET", "/v1/utilization",
          Authed(e, [e](const Identity& who, const HttpRequest& req, HttpResponse& res) {
            Engine::HistoryQuery q;
            if (Status st = MsParams(
                    req, {{"since", &q.since_ms}, {"until", &q.until_ms}, {"step", &q.step_ms}});
                !st.ok())
              return ReplyError(res, st);
            if (req.has_param("by")) q.by = req.param("by");
            ReplyResult(res, e->Utilization(who, q));
          }));
  s.Route(
      "GET", "/v1/usage",
      Authed(e, [e](const Identity& who, const HttpRequest& req, HttpResponse& res) {
        Engine::UsageQuery q;
        if (Status st = MsParams(req, {{"since", &q.since_ms}, {"until", &q.until_ms}}); !st.ok())
          return ReplyError(res, st);
        if (req.has_param("by")) q.by = req.param("by");
        ReplyResult(res, e->Usage(who, q));
      }));
  s.Route("GET", "/v1/whatif/scenario",
          Authed(e, [e](const Identity& who, const HttpRequest& req, HttpResponse& res) {
            int64_t since = 0, until = 0;
            if (Status st = MsParams(req, {{"since", &since}, {"until", &until}}); !st.ok())
              return ReplyError(res, st);
            ReplyResult(res, e->WhatIfScenario(who, since, until));
          }));
  // forms: "interactive=share;training=whole,share" (classes separated by ';').
  s.Route("GET", "/v1/whatif",
          Authed(e, [e](const Identity& who, const HttpRequest& req, HttpResponse& res) {
            int64_t since = 0, until = 0;
            if (Status st = MsParams(req, {{"since", &since}, {"until", &until}}); !st.ok())
              return ReplyError(res, st);
            std::vector<std::string> forms;
            std::string rest = req.has_param("forms") ? req.param("forms") : "";
            while (!rest.empty()) {
              const size_t semi = rest.find(';');
              if (semi != 0) forms.push_back(rest.substr(0, semi));
              rest = semi == std::string::npos ? "" : rest.substr(semi + 1);
            }
            ReplyResult(res, e->WhatIf(who, since, until, forms));
          }));
}

// Prometheus's /metrics and the dashboard page at /.
void AddMetricsAndDashboardRoutes(TimedRoutes& s) {
  Engine* e = s.e;
  // Prometheus: admins, or anyone (no token needed) when the config says metrics_public.
  s.Route(
      "GET", "/metrics",
      [e, http = &s.http](const HttpRequest& req, HttpResponse& res) {
        Identity anonymous;  // a user: allowed only by metrics_public
        anonymous.name = "anonymous";
        Result<Identity> who = anonymous;
        if (!e->config().metrics_public || !req.header("authorization").empty()) {
          who = Authenticate(*e, req);
          if (!who.ok()) {
            e->AuditAuthFailure(req.method, req.path, who.status().message());
            return ReplyError(res, who.status());
          }
        }
        auto text = e->Metrics(*who);
        if (!text.ok()) return ReplyError(res, text.status());
        res.content_type = "text/plain; version=0.0.4; charset=utf-8";
        // The HTTP server's connections: open now, and refused at once over a cap since start.
        res.body = std::move(*text) +
                   "# HELP tessera_http_connections Connections open now.\n"
                   "# TYPE tessera_http_connections gauge\n"
                   "tessera_http_connections " +
                   std::to_string(http->connections()) +
                   "\n"
                   "# HELP tessera_http_connections_max The cap on open connections.\n"
                   "# TYPE tessera_http_connections_max gauge\n"
                   "tessera_http_connections_max " +
                   std::to_string(http->max_connections()) +
                   "\n"
                   "# HELP tessera_http_connections_refused_total Connections closed at once, "
                   "over --max-connections or --max-connections-per-peer.\n"
                   "# TYPE tessera_http_connections_refused_total counter\n"
                   "tessera_http_connections_refused_total " +
                   std::to_string(http->refused_connections()) + "\n";
      },
      RequestLogLevel("/metrics"));
  // The dashboard: a static page; it reads the API above with the user's token.
  s.Route("GET", "/", [](const HttpRequest&, HttpResponse& res) {
    res.content_type = "text/html";
    res.body = DashboardHtml();
  });
}

// GET /v1/agent/orders?node=N&after=S&wait_ms=W: an agent's long poll for its node's orders,
// answered {"wake": true, "seq": S'} as soon as a durable decision gives the node new orders
// (S' > S; the agent then heartbeats for them), or {"wake": false} after W ms (default 25 s, at
// most 60 s) or when a newer watch for the node replaces it. No thread waits meanwhile.
void AddOrderWatchRoute(TimedRoutes& s) {
  Engine* e = s.e;
  net::HttpServer* http = &s.http;
  auto answer = [](const net::HttpReply& reply, int status, Json body) {
    HttpResponse res;
    Reply(res, status, body);
    reply(std::move(res));
  };
  auto refuse = [](const net::HttpReply& reply, const Status& st) {
    HttpResponse res;
    ReplyError(res, st);
    reply(std::move(res));
  };
  http->RouteAsync(
      "GET", "/v1/agent/orders",
      [e, http, answer, refuse](const HttpRequest& req, net::HttpReply reply) {
        if (Status st = CheckRequestText(req); !st.ok()) return refuse(reply, st);
        auto who = Authenticate(*e, req);
        if (!who.ok()) {
          e->AuditAuthFailure(req.method, req.path, who.status().message());
          return refuse(reply, who.status());
        }
        const std::string node = req.param("node");
        if (node.empty()) return refuse(reply, Status::InvalidArgument("'node' is required"));
        if (Status st = ValidateNodeName(node); !st.ok()) return refuse(reply, st);
        auto after = ParseNonNegativeInt(req.has_param("after") ? req.param("after") : "0");
        if (!after.ok())
          return refuse(reply, Status::InvalidArgument("'after' must be a non-negative integer"));
        auto wait = ParseNonNegativeInt(req.has_param("wait_ms") ? req.param("wait_ms") : "25000");
        if (!wait.ok() || *wait > 60000) {
          return refuse(reply,
                        Status::InvalidArgument("'wait_ms' must be an integer from 0 to 60000"));
        }
        auto ticket = e->WatchOrders(*who, node, *after, [reply, answer](int64_t seq) {
          answer(reply, 200, Json{{"wake", seq > 0}, {"seq", seq}});
        });
        if (!ticket.ok()) return refuse(reply, ticket.status());
        if (*ticket == 0) return;  // answered at once
        http->After(*wait, [e, node, t = *ticket, reply, answer] {
          e->UnwatchOrders(node, t);
          answer(reply, 200, Json{{"wake", false}});
        });
      },
      RequestLogLevel("/v1/agent/orders"));
}

// Node agents: registration, heartbeats, job output uploads.
void AddAgentRoutes(TimedRoutes& s) {
  Engine* e = s.e;
  s.Route("POST", "/v1/agent/register",
          Authed(e,
                 [e](const Identity& who, const HttpRequest& req, HttpResponse& res) {
                   auto body = Body(req);
                   if (!body.ok()) return ReplyError(res, body.status());
                   ReplyResult(res, e->RegisterNode(who, *body));
                 }),
          RequestLogLevel("/v1/agent/register"));
  s.RouteAsync("POST", "/v1/agent/heartbeat",
               AuthedAsync(e,
                           [e](const Identity& who, const HttpRequest& req, net::HttpReply reply) {
                             auto body = Body(req);
                             if (!body.ok()) return ReplyLater(reply, body.status());
                             e->HeartbeatAsync(who, *body,
                                               [reply = std::move(reply)](Result<Json> r) {
                                                 ReplyLater(reply, r);
                                               });
                           }),
               RequestLogLevel("/v1/agent/heartbeat"));
  s.Route("PUT", "/v1/agent/jobs/{id}/output",
          Authed(e,
                 [e](const Identity& who, const HttpRequest& req, HttpResponse& res) {
                   auto offset =
                       ParseNonNegativeInt(req.has_param("offset") ? req.param("offset") : "0");
                   if (!offset.ok())
                     return ReplyError(
                         res, Status::InvalidArgument("'offset' must be a non-negative integer"));
                   Status st = e->WriteOutput(who, req.params[0], *offset, req.body);
                   if (!st.ok()) return ReplyError(res, st);
                   Reply(res, 200, Json{{"ok", true}});
                 }),
          RequestLogLevel("/v1/agent/jobs/{id}/output"));
  AddOrderWatchRoute(s);
}
}  // namespace

ApiServer::ApiServer(Engine* engine, ApiServerOptions options)
    : engine_(engine),
      slots_(std::make_unique<RequestSlots>(engine->config().max_requests_per_identity)),
      lease_check_(options.lease_check),
      http_(std::make_unique<net::HttpServer>(HttpOptions(WithSlots(options, engine, slots_.get()),
                                                          options.io_threads, options.workers))) {
  TimedRoutes s{*http_, engine_};
  AddHealthRoutes(s);
  AddJobRoutes(s);
  AddViewRoutes(s);
  AddHistoryRoutes(s);
  AddMetricsAndDashboardRoutes(s);
  AddAgentRoutes(s);
}

ApiServer::~ApiServer() {
  Stop();
  if (ticker_.joinable()) ticker_.join();
  if (executors_) executors_->Stop();
  // Answers would go to connections about to be destroyed: the ones waiting for a write get
  // theirs now, the order watches theirs at once.
  engine_->Quiesce();
  engine_->UnwatchAll();
}

Result<int> ApiServer::Bind(const std::string& host, int port) { return http_->Bind(host, port); }

void ApiServer::Run(int tick_ms) {
  executors_ = std::make_unique<BackendExecutors>(
      engine_->BackendNames(), [this](const std::string& b) { return engine_->BackendPass(b); },
      tick_ms,
      [](const std::string& b, const Status& st) {
        if (st.ok()) {
          ServeLog().Info("the " + b + " backend's pass works again");
        } else {
          ServeLog().Error("the " + b + " backend's pass failed: " + st.message());
        }
      });
  executors_->Start();
  ticker_ = std::thread([this, tick_ms] {
    std::string last_error;
    while (!stop_.load()) {
      if (lease_check_) {
        Status lease = lease_check_();
        if (!lease.ok()) {
          ServeLog().Error("no longer the leader: " + lease.message() + "; stopping");
          {
            std::lock_guard<std::mutex> l(deposed_mu_);
            deposed_ = lease;
          }
          http_->Stop();
          break;
        }
      }
      Status st = engine_->Tick();
      // Say once what went wrong (and once that it stopped), not every tick.
      std::string now = st.ok() ? "" : st.message();
      if (now != last_error) {
        if (now.empty()) {
          ServeLog().Info("the periodic pass works again");
        } else {
          ServeLog().Error("periodic pass failed: " + now);
        }
        last_error = now;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(tick_ms));
    }
  });
  http_->Run();
  stop_.store(true);
  ticker_.join();
  executors_->Stop();
}

Status ApiServer::deposed() const {
  std::lock_guard<std::mutex> l(deposed_mu_);
  return deposed_;
}

StandbyServer::StandbyServer(store::Store* store, ApiServerOptions options)
    : store_(store),
      http_(std::make_unique<net::HttpServer>(
          HttpOptions(options, options.io_threads, options.workers))) {
  store::Store* st = store_;
  auto leader = [st]() -> std::string {
    auto l = st->Leader();
    return l.ok() ? l->holder : "";
  };
  for (const RouteInfo& r : ApiServer::Routes()) {
    if (r.openapi_path == "/v1/health") continue;
    http_->Route(
        r.method, r.openapi_path,
        [leader](const HttpRequest&, HttpResponse& res) {
          const std::string who = leader();
          Reply(res, 503,
                Json{{"error",
                      "this server is a standby; the leader is " + (who.empty() ? "unknown" : who)},
                     {"role", "standby"},
                     {"leader", who}});
        },
        RequestLogLevel(r.openapi_path));
  }
  http_->Route("GET", "/v1/health", [st](const HttpRequest&, HttpResponse& res) {
    auto l = st->Leader();
    Reply(res, l.ok() ? 200 : 503,
          Json{{"ok", l.ok()},
               {"role", "standby"},
               {"store", l.ok() ? "ok" : l.status().message()},
               {"leader", l.ok() ? l->holder : ""},
               {"epoch", l.ok() ? l->epoch : 0}});
  });
}

StandbyServer::~StandbyServer() { Stop(); }

Result<int> StandbyServer::Bind(const std::string& host, int port) {
  return http_->Bind(host, port);
}

void StandbyServer::Run() { http_->Run(); }

void StandbyServer::Stop() { http_->Stop(); }

void ApiServer::Stop() {
  // No joins: Run() joins the ticker once serving has ended.
  stop_.store(true);
  if (http_) http_->Stop();
}

}  // namespace tessera::api
