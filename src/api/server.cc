#include "api/server.h"

#include <cstdio>

#include <algorithm>

#include <httplib.h>

#include <chrono>

#include "model/quantity.h"

namespace tessera::api {
namespace {

constexpr size_t kMaxBody = 1024 * 1024;

int HttpCode(const Status& st) {
  switch (st.code()) {
    case StatusCode::kOk: return 200;
    case StatusCode::kInvalidArgument: return 400;
    case StatusCode::kUnauthenticated: return 401;
    case StatusCode::kPermissionDenied: return 403;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kFailedPrecondition: return 409;
    case StatusCode::kResourceExhausted: return 429;
    case StatusCode::kInternal: return 500;
  }
  return 500;
}

void Reply(httplib::Response& res, int code, const Json& body) {
  res.status = code;
  res.set_content(body.dump(), "application/json");
}

void ReplyError(httplib::Response& res, const Status& st) {
  Reply(res, HttpCode(st), Json{{"error", st.message()}});
}

template <typename T>
void ReplyResult(httplib::Response& res, const Result<T>& r) {
  if (r.ok()) {
    Reply(res, 200, *r);
  } else {
    ReplyError(res, r.status());
  }
}

Result<Identity> Authenticate(const Engine& e, const httplib::Request& req) {
  const std::string h = req.get_header_value("Authorization");
  const std::string prefix = "Bearer ";
  if (h.rfind(prefix, 0) != 0 || h.size() == prefix.size()) {
    return Status::Unauthenticated("missing bearer token (Authorization: Bearer <token>)");
  }
  const Identity* id = e.config().FindIdentityByTokenHash(Sha256Hex(h.substr(prefix.size())));
  if (!id) return Status::Unauthenticated("unknown token");
  return *id;
}

Result<Json> Body(const httplib::Request& req) {
  if (req.body.size() > kMaxBody) return Status::InvalidArgument("body over 1 MiB");
  Json j = Json::parse(req.body, nullptr, false);
  if (j.is_discarded()) return Status::InvalidArgument("malformed JSON body");
  return j;
}

int IntParam(const httplib::Request& req, const char* name, int def, int max) {
  if (!req.has_param(name)) return def;
  auto v = ParseNonNegativeInt(req.get_param_value(name));
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
      {"GET", "/"},
      {"GET", "/v1/whoami"},
      {"POST", "/v1/agent/register"},
      {"POST", "/v1/agent/heartbeat"},
      {"PUT", "/v1/agent/jobs/{id}/output"},
  };
  return kRoutes;
}

ApiServer::ApiServer(Engine* engine) : engine_(engine), http_(std::make_unique<httplib::Server>()) {
  httplib::Server& s = *http_;
  s.set_payload_max_length(kMaxBody);
  s.set_tcp_nodelay(true);  // no Nagle delay on small JSON replies
  // cpp-httplib closes a kept-alive connection after 5 requests by default; agents, the CLI's
  // --follow and busy submitters would reconnect (a TCP handshake and a new task) every 5th call.
  s.set_keep_alive_max_count(100000);
  s.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.body.empty()) {
      std::string what = res.status == 413 ? "body over 1 MiB" : res.status == 404 ? "no such endpoint"
                                                                                 : "request failed";
      res.set_content(Json{{"error", what}}.dump(), "application/json");
    }
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    Reply(res, 500, Json{{"error", "internal error"}});
  });
  Engine* e = engine_;
  auto authed = [e](auto fn) {
    return [e, fn](const httplib::Request& req, httplib::Response& res) {
      auto who = Authenticate(*e, req);
      if (!who.ok()) return ReplyError(res, who.status());
      fn(*who, req, res);
    };
  };
  s.Get("/v1/health", [](const httplib::Request&, httplib::Response& res) { Reply(res, 200, Json{{"ok", true}}); });
  s.Get("/v1/whoami", authed([](const Identity& who, const httplib::Request&, httplib::Response& res) {
          Reply(res, 200, Json{{"name", who.name}, {"role", RoleName(who.role)}, {"groups", who.groups}});
        }));
  s.Post("/v1/jobs", authed([e](const Identity& who, const httplib::Request& req, httplib::Response& res) {
           auto body = Body(req);
           if (!body.ok()) return ReplyError(res, body.status());
           auto r = e->Submit(who, *body);
           if (r.ok()) return Reply(res, 201, *r);
           ReplyError(res, r.status());
         }));
  s.Get("/v1/jobs", authed([e](const Identity& who, const httplib::Request& req, httplib::Response& res) {
          int limit = IntParam(req, "limit", 100, 10000);
          if (limit < 0) return ReplyError(res, Status::InvalidArgument("'limit' must be a non-negative integer"));
          ReplyResult(res, e->ListJobs(who, req.has_param("state") ? req.get_param_value("state") : "", limit));
        }));
  s.Get(R"(/v1/jobs/([^/]+))", authed([e](const Identity& who, const httplib::Request& req, httplib::Response& res) {
          ReplyResult(res, e->GetJob(who, req.matches[1]));
        }));
  s.Post(R"(/v1/jobs/([^/]+)/cancel)",
         authed([e](const Identity& who, const httplib::Request& req, httplib::Response& res) {
           ReplyResult(res, e->Cancel(who, req.matches[1]));
         }));
  s.Get(R"(/v1/jobs/([^/]+)/output)",
        authed([e](const Identity& who, const httplib::Request& req, httplib::Response& res) {
          auto out = e->JobOutput(who, req.matches[1]);
          if (!out.ok()) return ReplyError(res, out.status());
          res.set_content(*out, "text/plain");
        }));
  s.Get("/v1/queues", authed([e](const Identity& who, const httplib::Request&, httplib::Response& res) {
          ReplyResult(res, e->Queues(who));
        }));
  s.Get("/v1/groups", authed([e](const Identity& who, const httplib::Request&, httplib::Response& res) {
          ReplyResult(res, e->Groups(who));
        }));
  s.Get("/v1/nodes", authed([e](const Identity& who, const httplib::Request&, httplib::Response& res) {
          ReplyResult(res, e->Nodes(who));
        }));
  s.Get("/v1/summary", authed([e](const Identity& who, const httplib::Request&, httplib::Response& res) {
          ReplyResult(res, e->Summary(who));
        }));
  s.Get("/v1/events", authed([e](const Identity& who, const httplib::Request& req, httplib::Response& res) {
          int limit = IntParam(req, "limit", 100, 1000);
          int after = IntParam(req, "after", 0, 2000000000);
          const int tail = IntParam(req, "tail", 0, 1000);
          if (limit < 0 || after < 0 || tail < 0) {
            return ReplyError(res, Status::InvalidArgument("'after', 'limit' and 'tail' must be non-negative integers"));
          }
          if (tail > 0) {
            // The newest events: start `tail` before the last one recorded.
            auto last = e->LastEventSeq();
            if (!last.ok()) return ReplyError(res, last.status());
            after = static_cast<int>(std::max<int64_t>(0, *last - tail));
          }
          store::EventFilter f;
          if (req.has_param("kind")) f.kind_prefix = req.get_param_value("kind");
          if (req.has_param("subject")) f.subject = req.get_param_value("subject");
          if (req.has_param("actor")) f.actor = req.get_param_value("actor");
          ReplyResult(res, e->Events(who, after, limit, f));
        }));
  s.Get("/v1/utilization", authed([e](const Identity& who, const httplib::Request& req, httplib::Response& res) {
          int64_t since = 0;
          if (req.has_param("since")) {
            const std::string v = req.get_param_value("since");
            if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || v.size() > 18) {
              return ReplyError(res, Status::InvalidArgument("'since' must be a time in milliseconds"));
            }
            since = std::stoll(v);
          }
          ReplyResult(res, e->Utilization(who, since));
        }));
  // The dashboard: a static page; it reads the API above with the user's token.
  s.Get("/", [](const httplib::Request&, httplib::Response& res) { res.set_content(DashboardHtml(), "text/html"); });
  s.Post("/v1/agent/register", authed([e](const Identity& who, const httplib::Request& req, httplib::Response& res) {
           auto body = Body(req);
           if (!body.ok()) return ReplyError(res, body.status());
           ReplyResult(res, e->RegisterNode(who, *body));
         }));
  s.Post("/v1/agent/heartbeat", authed([e](const Identity& who, const httplib::Request& req, httplib::Response& res) {
           auto body = Body(req);
           if (!body.ok()) return ReplyError(res, body.status());
           ReplyResult(res, e->Heartbeat(who, *body));
         }));
  s.Put(R"(/v1/agent/jobs/([^/]+)/output)",
        authed([e](const Identity& who, const httplib::Request& req, httplib::Response& res) {
          auto offset = ParseNonNegativeInt(req.has_param("offset") ? req.get_param_value("offset") : "0");
          if (!offset.ok()) return ReplyError(res, Status::InvalidArgument("'offset' must be a non-negative integer"));
          Status st = e->WriteOutput(who, req.matches[1], *offset, req.body);
          if (!st.ok()) return ReplyError(res, st);
          Reply(res, 200, Json{{"ok", true}});
        }));
}

ApiServer::~ApiServer() { Stop(); }

Result<int> ApiServer::Bind(const std::string& host, int port) {
  int bound = port == 0 ? http_->bind_to_any_port(host) : (http_->bind_to_port(host, port) ? port : -1);
  if (bound <= 0) return Status::FailedPrecondition("cannot listen on " + host + ":" + std::to_string(port));
  return bound;
}

void ApiServer::Run(int tick_ms) {
  ticker_ = std::thread([this, tick_ms] {
    std::string last_error;
    while (!stop_.load()) {
      Status st = engine_->Tick();
      // Say once what went wrong (and once that it stopped), not every tick.
      std::string now = st.ok() ? "" : st.message();
      if (now != last_error) {
        std::fprintf(stderr, "tessera serve: %s\n", now.empty() ? "the periodic pass works again" : ("periodic pass failed: " + now).c_str());
        last_error = now;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(tick_ms));
    }
  });
  http_->listen_after_bind();
}

void ApiServer::Stop() {
  stop_.store(true);
  if (http_) http_->stop();
  if (ticker_.joinable() && ticker_.get_id() != std::this_thread::get_id()) ticker_.join();
}

}  // namespace tessera::api
