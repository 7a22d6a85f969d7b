// The API's routes and their handlers (routes.h), registered by ApiServer (server.cc).
#include "api/routes.h"

#include <algorithm>
#include <chrono>

#include "api/routes_http.h"
#include "api/server.h"  // DashboardHtml
#include "common/text.h"
#include "model/quantity.h"

namespace tessera::api {
namespace {

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

void AddApiRoutes(net::HttpServer& http, Engine* e) {
  TimedRoutes s{http, e};
  AddHealthRoutes(s);
  AddJobRoutes(s);
  AddViewRoutes(s);
  AddHistoryRoutes(s);
  AddMetricsAndDashboardRoutes(s);
  AddAgentRoutes(s);
}

}  // namespace tessera::api
