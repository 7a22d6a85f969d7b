#include "api/server.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <memory>
#include <optional>

#include "api/request_slots.h"
#include "api/routes.h"
#include "api/routes_http.h"
#include "common/log.h"
#include "net/http_server.h"

namespace tessera::api {
namespace {

const log::Logger& ServeLog() {
  static const log::Logger logger("serve");
  return logger;
}

// How long a deposed server answers 503 before it stops serving.
constexpr int kDeposedLingerMs = 1000;

}  // namespace

// Whether this server may still answer as the leader: not once its lease check failed (deposed),
// and not while its lease is not known to be fresh. Shared by the routes' wrappers.
struct LeaderGate {
  std::function<bool()> fresh;  // empty: always
  std::atomic<bool> deposed{false};
  std::mutex mu;
  std::string why;  // guarded by mu: the lease check's message

  static void Unavailable(HttpResponse& res, const std::string& error, const std::string& role) {
    Reply(res, 503, Json{{"error", error}, {"role", role}});
    res.headers.emplace_back("Retry-After", "1");
  }
  // Answers 503 and says true when the request must not reach its handler.
  bool Refuse(HttpResponse& res) {
    if (deposed.load()) {
      std::lock_guard<std::mutex> l(mu);
      Unavailable(res, "this server no longer leads (" + why + "); ask another server", "deposed");
      return true;
    }
    if (fresh && !fresh()) {
      Unavailable(res,
                  "this server no longer leads for sure: its store lease was not renewed in time "
                  "(it stalled, or lost the store); ask another server",
                  "unsure");
      return true;
    }
    return false;
  }
  // A handler's answer made by a write the store refused because another server leads (the
  // store's "deposed", or a lost lease, in the message): 503, so that the client moves on.
  static void Fix(HttpResponse& res) {
    if (res.status < 409 || res.status == 429 || res.status == 503) return;
    // The store's own words (store/internal.h DeposedMessage, postgres_lease.cc), which the
    // engine's errors quote.
    if (res.body.find(": deposed: this server led in epoch") == std::string::npos &&
        res.body.find("the leader lease was lost") == std::string::npos) {
      return;
    }
    Json body = Json::parse(res.body, nullptr, false);
    const std::string was = body.is_object() && body.contains("error") && body["error"].is_string()
                                ? body["error"].get<std::string>()
                                : res.body;
    res.headers.clear();
    Unavailable(res, "this server no longer leads (" + was + "); ask another server", "deposed");
  }
};

const std::vector<RouteInfo>& ApiServer::Routes() {
  static const std::vector<RouteInfo> kRoutes = [] {
    std::vector<RouteInfo> routes;
    for (const Route& r : RouteTable(nullptr, nullptr))
      routes.push_back({r.method, r.pattern, r.access, r.request_log});
    return routes;
  }();
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
                               std::to_string(e->config().limits.max_requests_per_identity) +
                               " requests in progress (max_requests_per_identity): try again "
                               "shortly"));
      return false;
    }
    *release = [slots, name = who->name] { slots->Release(name); };
    return true;
  };
  return o;
}

// Registers `route` on `http` as the table says: the request's text checked (CheckRequestText:
// 400) and its caller admitted by the route's access (Admit: 401, 403) before the handler runs,
// on a worker or (async) on the event loop; a timed route's handling time recorded for
// tessera_http_request_duration_seconds by its pattern (bounded labels), not its path.
void Register(net::HttpServer& http, Engine* e, Route route,
              const std::shared_ptr<LeaderGate>& gate) {
  auto r = std::make_shared<const Route>(std::move(route));
  if (r->handler) {
    http.Route(
        r->method, r->pattern,
        [e, r, gate](const HttpRequest& req, HttpResponse& res) {
          if (gate->Refuse(res)) return;
          const auto start = std::chrono::steady_clock::now();
          auto observe = [&](int status) {
            if (!r->timed) return;
            e->ObserveRequest(r->method, r->pattern, status,
                              std::chrono::duration_cast<std::chrono::microseconds>(
                                  std::chrono::steady_clock::now() - start)
                                  .count());
          };
          try {
            if (Status st = CheckRequestText(req); !st.ok()) {
              ReplyError(res, st);
            } else if (Result<Identity> who = Admit(*r, *e, req); !who.ok()) {
              ReplyError(res, who.status());
            } else {
              r->handler(*who, req, res);
            }
          } catch (...) {
            observe(500);  // the server answers 500
            throw;
          }
          LeaderGate::Fix(res);
          observe(res.status);
        },
        r->request_log);
    return;
  }
  http.RouteAsync(
      r->method, r->pattern,
      [e, r, gate](const HttpRequest& req, net::HttpReply reply) {
        {
          HttpResponse refused;
          if (gate->Refuse(refused)) return reply(std::move(refused));
        }
        // A refused write's answer becomes a 503 (LeaderGate::Fix).
        reply = [inner = std::move(reply)](HttpResponse res) {
          LeaderGate::Fix(res);
          inner(std::move(res));
        };
        if (r->timed) {
          // Timed until its answer.
          reply = [e, r, start = std::chrono::steady_clock::now(),
                   inner = std::move(reply)](HttpResponse res) {
            e->ObserveRequest(r->method, r->pattern, res.status,
                              std::chrono::duration_cast<std::chrono::microseconds>(
                                  std::chrono::steady_clock::now() - start)
                                  .count());
            inner(std::move(res));
          };
        }
        if (Status st = CheckRequestText(req); !st.ok()) return ReplyLater(reply, st);
        Result<Identity> who = Admit(*r, *e, req);
        if (!who.ok()) return ReplyLater(reply, who.status());
        r->async(*who, req, std::move(reply));
      },
      r->request_log);
}

}  // namespace

ApiServer::ApiServer(Engine* engine, ApiServerOptions options)
    : engine_(engine),
      slots_(std::make_unique<RequestSlots>(engine->config().limits.max_requests_per_identity)),
      lease_check_(options.lease_check),
      lease_fresh_(options.lease_fresh),
      gate_(std::make_shared<LeaderGate>()),
      http_(std::make_unique<net::HttpServer>(HttpOptions(WithSlots(options, engine, slots_.get()),
                                                          options.io_threads, options.workers))) {
  gate_->fresh = lease_fresh_;
  for (Route& r : RouteTable(engine_, http_.get())) Register(*http_, engine_, std::move(r), gate_);
}

ApiServer::~ApiServer() {
  Stop();
  if (ticker_.joinable()) ticker_.join();
  if (executors_) executors_->Stop();
  // Answers would go to connections about to be destroyed: the ones waiting for a write get
  // theirs now, the order watches theirs at once.
  engine_->Quiesce();
  engine_->agents().UnwatchAll();
}

Result<int> ApiServer::Bind(const std::string& host, int port) { return http_->Bind(host, port); }

Result<int> ApiServer::Adopt(int listening_fd) { return http_->Adopt(listening_fd); }

void ApiServer::Run(int tick_ms) {
  executors_ = std::make_unique<BackendExecutors>(
      engine_->backends().Names(),
      [this](const std::string& b) {
        // Not while this server may no longer lead (as the ticker): skipped, not failed.
        if (gate_->deposed.load() || (lease_fresh_ && !lease_fresh_())) return Status::Ok();
        return engine_->backends().Pass(b);
      },
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
          {
            std::lock_guard<std::mutex> l(gate_->mu);
            gate_->why = lease.message();
          }
          gate_->deposed.store(true);
          // Requests already sent (queued while the server stalled, say) are answered 503 for a
          // moment, rather than cut off without an answer.
          std::this_thread::sleep_for(std::chrono::milliseconds(kDeposedLingerMs));
          http_->Stop();
          break;
        }
      }
      // Not sure it still leads (just after a stall): decide nothing until the lease check
      // above has found out.
      if (lease_fresh_ && !lease_fresh_()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(tick_ms));
        continue;
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

namespace {
// The write end of the live SignalWatch's pipe (-1: none), for its handler.
std::atomic<int> g_signal_pipe{-1};
struct sigaction g_previous_int, g_previous_term;

extern "C" void OnWatchedSignal(int sig) {
  const int fd = g_signal_pipe.load();
  if (fd < 0) return;
  const int saved = errno;
  const auto b = static_cast<unsigned char>(sig);
  (void)!write(fd, &b, 1);
  errno = saved;
}

// `o` without the HTTP server's own signal handling: the standby catches them itself.
ApiServerOptions WithoutSignals(ApiServerOptions o) {
  o.stop_on_signals = false;
  return o;
}
}  // namespace

SignalWatch::SignalWatch(std::function<void(int)> on_signal) {
  if (pipe2(pipe_, O_CLOEXEC) != 0) {
    pipe_[0] = pipe_[1] = -1;
    ServeLog().Error(std::string("cannot watch for SIGINT and SIGTERM: ") + std::strerror(errno));
    return;
  }
  g_signal_pipe.store(pipe_[1]);
  struct sigaction sa {};
  sa.sa_handler = OnWatchedSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, &g_previous_int);
  sigaction(SIGTERM, &sa, &g_previous_term);
  thread_ = std::thread([fd = pipe_[0], f = std::move(on_signal)] {
    unsigned char b = 0;
    while (true) {
      const ssize_t n = read(fd, &b, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0 || b == 0) return;  // 0: the watch goes
      f(b);
    }
  });
}

SignalWatch::~SignalWatch() {
  if (pipe_[1] < 0) return;
  sigaction(SIGINT, &g_previous_int, nullptr);
  sigaction(SIGTERM, &g_previous_term, nullptr);
  // After any signal byte written before the handlers went: those are handled first.
  const unsigned char quit = 0;
  (void)!write(pipe_[1], &quit, 1);
  thread_.join();
  g_signal_pipe.store(-1);
  close(pipe_[0]);
  close(pipe_[1]);
}

StandbyServer::StandbyServer(store::Store* store, ApiServerOptions options)
    : store_(store),
      catch_signals_(options.stop_on_signals),
      http_(std::make_unique<net::HttpServer>(
          HttpOptions(WithoutSignals(options), options.io_threads, options.workers))) {
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
        r.request_log);
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

void StandbyServer::Run() {
  std::optional<SignalWatch> watch;
  if (catch_signals_) {
    watch.emplace([this](int sig) {
      ServeLog().Info(std::string("standby: ") + (sig == SIGINT ? "SIGINT" : "SIGTERM") +
                      "; stopping without leading");
      signalled_.store(true);
      http_->Stop();
    });
  }
  http_->Run();
}

void StandbyServer::Stop() { http_->Stop(); }

void StandbyServer::Handover() { http_->StopForHandover(1000); }

int StandbyServer::ReleaseListener() { return http_->ReleaseListener(); }

void ApiServer::Stop() {
  // No joins: Run() joins the ticker once serving has ended.
  stop_.store(true);
  if (http_) http_->Stop();
}

}  // namespace tessera::api