// The API's routes and their handlers (routes.h), registered by ApiServer (server.cc).
#include "api/routes.h"

#include <algorithm>
#include <chrono>

#include "api/routes_http.h"
#include "api/server.h"  // DashboardHtml
#include "auth/oidc.h"
#include "common/text.h"
#include "model/quantity.h"

namespace tessera::api {
namespace {

// The range asked of a job's output: a "Range: bytes=FIRST-[LAST]" header, or ?offset=&length=;
// a suffix range, "bytes=-N" (the last N bytes), sets *suffix to N (else it stays -1).
Status OutputRangeOf(const HttpRequest& req, int64_t* offset, int64_t* length, int64_t* suffix) {
  const std::string range = req.header("range");
  if (!range.empty()) {
    const size_t dash = range.find('-');
    if (range.rfind("bytes=", 0) != 0 || dash == std::string::npos ||
        range.find(',') != std::string::npos) {
      return Status::InvalidArgument("Range: expected bytes=FIRST-[LAST] or bytes=-N");
    }
    if (dash == 6) {
      auto n = ParseNonNegativeInt(range.substr(7));
      if (!n.ok()) return Status::InvalidArgument("Range: expected bytes=FIRST-[LAST] or bytes=-N");
      *suffix = *n;
      return Status::Ok();
    }
    auto first = ParseNonNegativeInt(range.substr(6, dash - 6));
    if (!first.ok())
      return Status::InvalidArgument("Range: expected bytes=FIRST-[LAST] or bytes=-N");
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

// A refused role: who the caller is, and who the route is for.
std::string Refusal(const Route& route, const Identity& who) {
  if (who.role == Role::kMetrics) {
    return "'" + who.name + "' is a metrics identity: it may read GET /metrics only, not " +
           route.method + " " + route.pattern;
  }
  if (who.role == Role::kViewer && route.method != "GET") {
    return "'" + who.name + "' is a viewer: a viewer may read but not change anything (" +
           route.method + " " + route.pattern + ")";
  }
  const char* for_whom = route.access == Access::kUser    ? "users and admins"
                         : route.access == Access::kAgent ? "agents and admins"
                         : route.access == Access::kMetrics
                             ? "admins (or set metrics_public: true in the config)"
                             : "admins";
  const char* is = who.role == Role::kAgent    ? "an agent"
                   : who.role == Role::kViewer ? "a viewer"
                                               : "a user";
  return "'" + who.name + "' is " + is + ": " + route.method + " " + route.pattern + " is for " +
         for_whom;
}

// GET /v1/health: up or not and the role for anyone; the counts and the store's error text only
// with an admin's token.
RouteHandler Health(Engine* e) {
  return [e](const Identity&, const HttpRequest& req, HttpResponse& res) {
    Json h = e->views().Health();
    const int code = h["ok"].get<bool>() ? 200 : 503;
    auto who = Authenticate(*e, req);
    if (!who.ok() || who->role != Role::kAdmin) {
      h = Json{
          {"ok", h["ok"]}, {"role", h["role"]}, {"store", h["ok"].get<bool>() ? "ok" : "failed"}};
    }
    Reply(res, code, h);
  };
}

// GET /v1/auth/config: how people sign in (no token needed: it is what gets one): the OpenID
// Connect provider's issuer, the client id and the scopes to ask for, or "oidc": null.
RouteHandler AuthConfig(Engine* e) {
  return [e](const Identity&, const HttpRequest&, HttpResponse& res) {
    const auth::OidcSettings& o = e->config().oidc;
    Reply(res, 200,
          Json{{"oidc",
                o.enabled()
                    ? Json{{"issuer", o.issuer}, {"client_id", o.client_id}, {"scopes", o.scopes}}
                    : Json(nullptr)}});
  };
}

RouteHandler WhoAmI() {
  return [](const Identity& who, const HttpRequest&, HttpResponse& res) {
    Reply(res, 200, Json{{"name", who.name}, {"role", RoleName(who.role)}, {"groups", who.groups}});
  };
}

// POST /v1/jobs: answered once the job is durable, from the commit writer (201, or 200 when an
// Idempotency-Key replays an earlier submission): no API thread waits for the store.
AsyncRouteHandler Submit(Engine* e) {
  return [e](const Identity& who, const HttpRequest& req, net::HttpReply reply) {
    auto body = Body(req);
    if (!body.ok()) return ReplyLater(reply, body.status());
    e->SubmitAsync(who, *body, req.header("idempotency-key"),
                   [reply = std::move(reply)](Result<Json> r, bool replayed) {
                     ReplyLater(reply, r, replayed ? 200 : 201);
                   });
  };
}

RouteHandler ListJobs(Engine* e) {
  return [e](const Identity& who, const HttpRequest& req, HttpResponse& res) {
    int limit = IntParam(req, "limit", 100, 10000);
    if (limit < 0)
      return ReplyError(res, Status::InvalidArgument("'limit' must be a non-negative integer"));
    ReplyResult(res,
                e->views().ListJobs(who, req.has_param("state") ? req.param("state") : "", limit));
  };
}

// A view for people that takes no parameters (queues, groups, nodes, summary): `view(who)`.
RouteHandler ViewOf(Engine* e, Result<Json> (Views::*view)(const Identity&)) {
  return [e, view](const Identity& who, const HttpRequest&, HttpResponse& res) {
    ReplyResult(res, (e->views().*view)(who));
  };
}

// POST /v1/nodes/{node}/cordon|drain|uncordon: the whole node, or one device given a body
// {"device": N} (an empty body or {} is the whole node).
RouteHandler AdminNode(Engine* e, const char* action) {
  return [e, action](const Identity& who, const HttpRequest& req, HttpResponse& res) {
    int device = -1;
    if (req.body.find_first_not_of(" \t\r\n") != std::string::npos) {
      auto body = Body(req);
      if (!body.ok()) return ReplyError(res, body.status());
      if (!body->is_object())
        return ReplyError(res, Status::InvalidArgument("the body must be a JSON object"));
      for (const auto& [key, v] : body->items()) {
        if (key != "device")
          return ReplyError(res, Status::InvalidArgument("unknown field '" + key +
                                                         "' (the body takes only 'device')"));
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 1023)
          return ReplyError(
              res, Status::InvalidArgument("'device' must be a device index (an integer from 0)"));
        device = v.get<int>();
      }
    }
    ReplyResult(res, e->AdminNode(who, req.params[0], action, device));
  };
}

// GET /v1/jobs/{id}/output: a range, "Range: bytes=FIRST-[LAST]" or ?offset=&length=, at most
// 4 MiB per request (206 with Content-Range when it is not the whole output); X-Output-Size says
// how much there is, so a client reads on from where it stopped.
RouteHandler JobOutput(Engine* e) {
  return [e](const Identity& who, const HttpRequest& req, HttpResponse& res) {
    int64_t offset = 0, length = Views::kOutputRangeMax, suffix = -1;
    if (Status st = OutputRangeOf(req, &offset, &length, &suffix); !st.ok())
      return ReplyError(res, st);
    if (suffix >= 0) {  // the last `suffix` bytes: where they start, from the size
      auto size = e->views().JobOutput(who, req.params[0], 0, 0);
      if (!size.ok()) return ReplyError(res, size.status());
      // Suffix 0 asks for nothing: unsatisfiable, as a range past the end (below).
      offset = suffix == 0 ? size->total : std::max<int64_t>(0, size->total - suffix);
      length = std::min(length, suffix);
    }
    auto out = e->views().JobOutput(who, req.params[0], offset, length);
    if (!out.ok()) return ReplyError(res, out.status());
    const int64_t last = out->offset + static_cast<int64_t>(out->bytes.size());
    res.content_type = "text/plain";
    res.headers.emplace_back("X-Output-Size", std::to_string(out->total));
    res.headers.emplace_back("Accept-Ranges", "bytes");
    // A Range header starting past the end is unsatisfiable (RFC 9110, 15.5.17); ?offset= at the
    // end is a follower asking for more, answered 206 and empty.
    if (out->bytes.empty() && out->offset >= out->total && !req.header("range").empty()) {
      res = HttpResponse{416,
                         "application/json",
                         Json{{"error", "the range starts past the output's " +
                                            std::to_string(out->total) + " bytes"}}
                             .dump(),
                         {{"Content-Range", "bytes */" + std::to_string(out->total)},
                          {"X-Output-Size", std::to_string(out->total)}}};
      return;
    }
    if (out->offset > 0 || last < out->total) {
      res.status = 206;
      res.headers.emplace_back("Content-Range", out->bytes.empty()
                                                    ? "bytes */" + std::to_string(out->total)
                                                    : "bytes " + std::to_string(out->offset) + "-" +
                                                          std::to_string(last - 1) + "/" +
                                                          std::to_string(out->total));
    }
    res.body = std::move(out->bytes);
  };
}

// GET /v1/events?after=&limit=&tail=&kind=&subject=&actor=
RouteHandler Events(Engine* e) {
  return [e](const Identity& who, const HttpRequest& req, HttpResponse& res) {
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
      auto last = e->views().LastEventSeq();
      if (!last.ok()) return ReplyError(res, last.status());
      after = std::max<int64_t>(0, *last - tail);
    }
    store::EventFilter f;
    if (req.has_param("kind")) f.kind_prefix = req.param("kind");
    if (req.has_param("subject")) f.subject = req.param("subject");
    if (req.has_param("actor")) f.actor = req.param("actor");
    ReplyResult(res, e->views().Events(who, after, limit, f));
  };
}

RouteHandler Utilization(Engine* e) {
  return [e](const Identity& who, const HttpRequest& req, HttpResponse& res) {
    Views::HistoryQuery q;
    if (Status st =
            MsParams(req, {{"since", &q.since_ms}, {"until", &q.until_ms}, {"step", &q.step_ms}});
        !st.ok())
      return ReplyError(res, st);
    if (req.has_param("by")) q.by = req.param("by");
    ReplyResult(res, e->views().Utilization(who, q));
  };
}

RouteHandler Usage(Engine* e) {
  return [e](const Identity& who, const HttpRequest& req, HttpResponse& res) {
    Views::UsageQuery q;
    if (Status st = MsParams(req, {{"since", &q.since_ms}, {"until", &q.until_ms}}); !st.ok())
      return ReplyError(res, st);
    if (req.has_param("by")) q.by = req.param("by");
    ReplyResult(res, e->views().Usage(who, q));
  };
}

RouteHandler WhatIfScenario(Engine* e) {
  return [e](const Identity& who, const HttpRequest& req, HttpResponse& res) {
    int64_t since = 0, until = 0;
    if (Status st = MsParams(req, {{"since", &since}, {"until", &until}}); !st.ok())
      return ReplyError(res, st);
    ReplyResult(res, e->views().WhatIfScenario(who, since, until));
  };
}

// GET /v1/whatif?forms=interactive=share;training=whole,share (classes separated by ';').
RouteHandler WhatIf(Engine* e) {
  return [e](const Identity& who, const HttpRequest& req, HttpResponse& res) {
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
    ReplyResult(res, e->views().WhatIf(who, since, until, forms));
  };
}

// POST /v1/whatif/usage?card=&host_gbps=&headroom=&name=: a fleet's GPU usage history in the
// body (at most the server's 1 MiB; larger ones with `tessera whatif --usage FILE`), replayed by
// the simulator the serving process wires in (EngineConfig::whatif.usage).
RouteHandler WhatIfUsage(Engine* e) {
  return [e](const Identity&, const HttpRequest& req, HttpResponse& res) {
    const WhatIfUsageReplay& replay = e->config().whatif.usage;
    if (!replay) {
      return ReplyError(res, Status::FailedPrecondition(
                                 "this server has no simulator wired in to replay a usage history "
                                 "(`tessera whatif --usage FILE` replays it)"));
    }
    ReplyResult(res, replay(req.body, req.query));
  };
}

// GET /metrics (Prometheus): the engine's figures and the HTTP server's connections (open now,
// and refused at once over a cap since start).
RouteHandler Metrics(Engine* e, net::HttpServer* http) {
  return [e, http](const Identity& who, const HttpRequest&, HttpResponse& res) {
    auto text = e->views().Metrics(who);
    if (!text.ok()) return ReplyError(res, text.status());
    res.content_type = "text/plain; version=0.0.4; charset=utf-8";
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
  };
}

// GET /: the dashboard, a static page; it reads the API with the user's token.
RouteHandler Dashboard() {
  return [](const Identity&, const HttpRequest&, HttpResponse& res) {
    res.content_type = "text/html";
    res.body = DashboardHtml();
    // It acts with the token it keeps: no other site may frame it (clickjacking).
    res.headers = {{"X-Frame-Options", "DENY"},
                   {"Content-Security-Policy", "frame-ancestors 'none'"}};
  };
}

RouteHandler RegisterNode(Engine* e) {
  return [e](const Identity& who, const HttpRequest& req, HttpResponse& res) {
    auto body = Body(req);
    if (!body.ok()) return ReplyError(res, body.status());
    ReplyResult(res, e->agents().RegisterNode(who, *body));
  };
}

// POST /v1/agent/heartbeat: answered from the commit writer when it reports exits.
AsyncRouteHandler Heartbeat(Engine* e) {
  return [e](const Identity& who, const HttpRequest& req, net::HttpReply reply) {
    auto body = Body(req);
    if (!body.ok()) return ReplyLater(reply, body.status());
    e->agents().HeartbeatAsync(
        who, *body, [reply = std::move(reply)](Result<Json> r) { ReplyLater(reply, r); });
  };
}

// PUT /v1/agent/jobs/{id}/output?offset=N: the job's output from byte N on.
RouteHandler WriteOutput(Engine* e) {
  return [e](const Identity& who, const HttpRequest& req, HttpResponse& res) {
    auto offset = ParseNonNegativeInt(req.has_param("offset") ? req.param("offset") : "0");
    if (!offset.ok())
      return ReplyError(res, Status::InvalidArgument("'offset' must be a non-negative integer"));
    Status st = e->agents().WriteOutput(who, req.params[0], *offset, req.body);
    // Past max_output: refused for good (413), not "try again later" (429, as a limit answers).
    if (st.code() == StatusCode::kResourceExhausted)
      return Reply(res, 413, Json{{"error", st.message()}});
    if (!st.ok()) return ReplyError(res, st);
    Reply(res, 200, Json{{"ok", true}});
  };
}

// GET /v1/agent/orders?node=N&after=S&wait_ms=W: an agent's long poll for its node's orders,
// answered {"wake": true, "seq": S'} as soon as a durable decision gives the node new orders
// (S' > S; the agent then heartbeats for them), or {"wake": false} after W ms (default 25 s, at
// most 60 s) or when a newer watch for the node replaces it. No thread waits meanwhile.
AsyncRouteHandler WatchOrders(Engine* e, net::HttpServer* http) {
  auto answer = [](const net::HttpReply& reply, Json body) {
    HttpResponse res;
    Reply(res, 200, body);
    reply(std::move(res));
  };
  return [e, http, answer](const Identity& who, const HttpRequest& req, net::HttpReply reply) {
    const std::string node = req.param("node");
    if (node.empty()) return ReplyLater(reply, Status::InvalidArgument("'node' is required"));
    if (Status st = ValidateNodeName(node); !st.ok()) return ReplyLater(reply, st);
    auto after = ParseNonNegativeInt(req.has_param("after") ? req.param("after") : "0");
    if (!after.ok())
      return ReplyLater(reply, Status::InvalidArgument("'after' must be a non-negative integer"));
    auto wait = ParseNonNegativeInt(req.has_param("wait_ms") ? req.param("wait_ms") : "25000");
    if (!wait.ok() || *wait > 60000) {
      return ReplyLater(reply,
                        Status::InvalidArgument("'wait_ms' must be an integer from 0 to 60000"));
    }
    auto ticket = e->agents().WatchOrders(who, node, *after, [reply, answer](int64_t seq) {
      answer(reply, Json{{"wake", seq > 0}, {"seq", seq}});
    });
    if (!ticket.ok()) return ReplyLater(reply, ticket.status());
    if (*ticket == 0) return;  // answered at once
    http->After(*wait, [e, node, t = *ticket, reply, answer] {
      e->agents().UnwatchOrders(node, t);
      answer(reply, Json{{"wake", false}});
    });
  };
}

// What every route has: its method, pattern, who may call it and how its requests are logged.
Route Base(std::string method, std::string pattern, Access access, log::Level request_log) {
  Route r;
  r.method = std::move(method);
  r.pattern = std::move(pattern);
  r.access = access;
  r.request_log = request_log;
  return r;
}

Route Sync(std::string method, std::string pattern, Access access, RouteHandler handler,
           log::Level request_log = log::Level::kInfo) {
  Route r = Base(std::move(method), std::move(pattern), access, request_log);
  r.handler = std::move(handler);
  return r;
}

Route Async(std::string method, std::string pattern, Access access, AsyncRouteHandler handler,
            log::Level request_log = log::Level::kInfo, bool timed = true) {
  Route r = Base(std::move(method), std::move(pattern), access, request_log);
  r.async = std::move(handler);
  r.timed = timed;
  return r;
}

}  // namespace

const char* AccessName(Access a) {
  switch (a) {
    case Access::kPublic:
      return "public";
    case Access::kIdentity:
      return "identity";
    case Access::kUser:
      return "user";
    case Access::kAgent:
      return "agent";
    case Access::kAdmin:
      return "admin";
    case Access::kMetrics:
      return "admin-or-metrics-public";
  }
  return "?";
}

bool Admits(Access access, Role role, bool metrics_public) {
  switch (access) {
    case Access::kPublic:
      return true;
    case Access::kIdentity:
      return role != Role::kMetrics;
    case Access::kUser:
      return role != Role::kAgent && role != Role::kMetrics;
    case Access::kAgent:
      return role == Role::kAgent || role == Role::kAdmin;
    case Access::kAdmin:
      return role == Role::kAdmin;
    case Access::kMetrics:
      return role == Role::kAdmin || role == Role::kMetrics || metrics_public;
  }
  return false;
}

Result<Identity> Admit(const Route& route, Engine& e, const HttpRequest& req) {
  const bool metrics_public = e.config().metrics_public;
  if (route.access == Access::kPublic ||
      (route.access == Access::kMetrics && metrics_public && req.header("authorization").empty())) {
    Identity anonymous;  // a user
    anonymous.name = "anonymous";
    return anonymous;
  }
  auto who = Authenticate(e, req);
  if (!who.ok()) {
    e.audit().AuthFailure(req.method, req.path, who.status().message());
    return who.status();
  }
  // A provider's identity signing in: its first accepted token since the server started.
  if (!who->subject.empty() && e.config().oidc_verifier->FirstSignIn(who->subject)) {
    e.audit().IdentityEvent("auth.signin", *who, who->subject,
                            "signed in through the identity provider",
                            Json{{"groups", who->groups}, {"issuer", e.config().oidc.issuer}});
  }
  // A viewer reads: every method but GET changes something.
  if (!Admits(route.access, who->role, metrics_public) ||
      (who->role == Role::kViewer && route.method != "GET")) {
    const std::string why = Refusal(route, *who);
    e.audit().IdentityEvent("auth.refused", *who, req.path, why, Json{{"method", req.method}});
    return Status::PermissionDenied(why);
  }
  return who;
}

// The table. Jobs, views and history are people's (users and admins); the what-if replay and
// /metrics admins'; the agent routes agents' (an admin may act as any agent).
std::vector<Route> RouteTable(Engine* e, net::HttpServer* http) {
  constexpr log::Level kDebug = log::Level::kDebug;
  constexpr log::Level kInfo = log::Level::kInfo;
  constexpr bool kUntimed = false;
  using enum Access;
  return {
      Sync("GET", "/v1/health", kPublic, Health(e)),
      Sync("GET", "/v1/whoami", kIdentity, WhoAmI()),
      Sync("GET", "/v1/auth/config", kPublic, AuthConfig(e)),
      // Jobs: submit, list, get, cancel, read output.
      Async("POST", "/v1/jobs", kUser, Submit(e)),
      Sync("GET", "/v1/jobs", kUser, ListJobs(e)),
      Sync("GET", "/v1/jobs/{id}", kUser,
           [e](const Identity& who, const HttpRequest& req, HttpResponse& res) {
             ReplyResult(res, e->views().GetJob(who, req.params[0]));
           }),
      Sync("POST", "/v1/jobs/{id}/cancel", kUser,
           [e](const Identity& who, const HttpRequest& req, HttpResponse& res) {
             ReplyResult(res, e->Cancel(who, req.params[0]));
           }),
      Sync("GET", "/v1/jobs/{id}/output", kUser, JobOutput(e)),
      // Queues, groups, nodes, the summary and the event log.
      Sync("GET", "/v1/queues", kUser, ViewOf(e, &Views::Queues)),
      Sync("GET", "/v1/groups", kUser, ViewOf(e, &Views::Groups)),
      Sync("GET", "/v1/nodes", kUser, ViewOf(e, &Views::Nodes)),
      Sync("POST", "/v1/nodes/{node}/cordon", kAdmin, AdminNode(e, "cordon")),
      Sync("POST", "/v1/nodes/{node}/drain", kAdmin, AdminNode(e, "drain")),
      Sync("POST", "/v1/nodes/{node}/uncordon", kAdmin, AdminNode(e, "uncordon")),
      Sync("GET", "/v1/summary", kUser, ViewOf(e, &Views::Summary)),
      Sync("GET", "/v1/events", kUser, Events(e)),
      // Utilization history, usage and what-if.
      Sync("GET", "/v1/utilization", kUser, Utilization(e)),
      Sync("GET", "/v1/usage", kUser, Usage(e)),
      Sync("GET", "/v1/whatif/scenario", kAdmin, WhatIfScenario(e)),
      Sync("GET", "/v1/whatif", kAdmin, WhatIf(e)),
      Sync("POST", "/v1/whatif/usage", kAdmin, WhatIfUsage(e)),
      // Prometheus and the dashboard.
      Sync("GET", "/metrics", kMetrics, Metrics(e, http), kDebug),
      Sync("GET", "/", kPublic, Dashboard(), kInfo),
      // Node agents: registration, heartbeats, job output uploads, the order watch.
      Sync("POST", "/v1/agent/register", kAgent, RegisterNode(e), kDebug),
      Async("POST", "/v1/agent/heartbeat", kAgent, Heartbeat(e), kDebug),
      Sync("PUT", "/v1/agent/jobs/{id}/output", kAgent, WriteOutput(e), kDebug),
      Async("GET", "/v1/agent/orders", kAgent, WatchOrders(e, http), kDebug, kUntimed),
  };
}

}  // namespace tessera::api
