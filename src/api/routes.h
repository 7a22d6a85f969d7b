// The API's routes, registered once. RouteTable() lists every route: its method and path pattern,
// who may call it (Access), its request-log level, whether it is answered later, and its handler.
// ApiServer registers exactly this table and enforces each route's access before its handler runs
// (Admit: the handlers do not check the caller's role; the Engine's methods still refuse a role
// they never serve, a second line for callers other than the API). ApiServer::Routes() (the
// standby server's routes, docs/openapi.json's check and the authorization matrix test) is
// derived from it.
// Internal to tessera_api but for Access, which RouteInfo (server.h) carries.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "api/config.h"
#include "common/log.h"
#include "net/http_server.h"

namespace tessera::api {

class Engine;

// Who may call a route. docs/openapi.json says each operation's as "x-tessera-access"
// (AccessName), and a test checks the two agree.
enum class Access {
  kPublic,    // anyone, without a token (GET /v1/health reads one, if sent, for its detail)
  kIdentity,  // any known token (401 without one)
  kUser,      // users and admins: an agent gets 403
  kAgent,     // agents and admins: a user gets 403 (and the node an agent names must be its own)
  kAdmin,     // admins: anyone else 403
  kMetrics,   // admins; anyone, without a token, when the config says metrics_public
};

// "public", "identity", "user", "agent", "admin", "admin-or-metrics-public".
const char* AccessName(Access a);

// Whether a known identity of role `role` may call a route of `access`.
bool Admits(Access access, Role role, bool metrics_public);

// A route's handler, given the caller admitted by the route's access (for a public route, or
// /metrics read without a token, an anonymous user).
using RouteHandler =
    std::function<void(const Identity& who, const net::HttpRequest& req, net::HttpResponse& res)>;
// A route answered later (once what it changed is durable, or when a watch fires): `reply` once.
using AsyncRouteHandler =
    std::function<void(const Identity& who, const net::HttpRequest& req, net::HttpReply reply)>;

struct Route {
  std::string method;   // GET, POST, PUT
  std::string pattern;  // "/v1/jobs/{id}", as docs/openapi.json writes it
  Access access = Access::kIdentity;
  // Agents' routes (10,000 agents heartbeat every second) and Prometheus's scrapes at debug, so
  // that they do not flood the request log; people's at info.
  log::Level request_log = log::Level::kInfo;
  // Exactly one of these: `handler` answers on a worker thread (it may wait for the store),
  // `async` on the connection's event loop, later.
  RouteHandler handler;
  AsyncRouteHandler async;
  // Handling time recorded in tessera_http_request_duration_seconds (not an order watch's wait).
  bool timed = true;
};

// Every route of the API. The handlers hold `e` and `http` and use them only when called, so
// RouteTable(nullptr, nullptr) lists the routes without a server (ApiServer::Routes()).
std::vector<Route> RouteTable(Engine* e, net::HttpServer* http);

// The caller of a request to `route`: its identity, or the refusal: 401 for missing or unknown
// credentials (with an audit event), 403 for a role the route's access does not admit.
Result<Identity> Admit(const Route& route, Engine& e, const net::HttpRequest& req);

}  // namespace tessera::api
