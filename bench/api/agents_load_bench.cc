// The control plane under many agents: one process simulates N agents over loopback (each a
// kept-alive connection heartbeating every period, with the real agent's protocol: it "runs"
// the jobs it is told to start for --job-seconds and reports them finished) plus submitting
// clients at a steady rate, against a real `tessera serve` (SQLite on disk). Prints p50/p99
// heartbeat and submission latency, nodes falsely marked lost, and the server's CPU and RSS.
//
//   agents_load_bench [--agents 10000] [--seconds 300] [--rate 200] [--period-ms 1000]
//                     [--job-seconds 20] [--submitters 4] [--watch 1]
//
// With --watch 1 (the default, as `tessera agent` does) each agent also keeps an order watch
// (GET /v1/agent/orders, a long poll on a second connection) and heartbeats at once when it
// wakes: the server then holds 2 connections per agent. Submit-to-start is the time from a
// submission's answer to its agent receiving the start order.
//
// Latency is measured from when a request was due (open loop), so a server that falls behind
// shows it. Everything runs on one I/O thread here (Boost.Asio); the server gets its own process.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

// Boost 1.74's Asio uses std::exchange without including <utility>.
// clang-format off
#include <utility>
// clang-format on

#include <algorithm>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "agent/protocol.h"
#include "bench_args.h"
#include "percentile.h"
#include "proc.h"

namespace {

using tessera::bench::Percentile;

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;
using tessera::agent::FinishedReport;
using tessera::agent::RunningJob;

const char* kConfig = R"(
heartbeat_timeout: 10s
cycle: 1s
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: alice, role: user, groups: [research], token: alice-token-1}
  - {name: agent, role: agent, token: agent-token-1}
groups: [{name: research}]
profiles: [{name: card, gpus: 1, cpu: 1, memory: 1GiB, forms: [whole]}]
queues: [{name: training, profile: card, groups: [research], class: training}]
)";

struct Options {
  int agents = 10000;
  int seconds = 300;
  int rate = 200;
  int period_ms = 1000;
  int job_seconds = 20;
  int submitters = 4;
  bool watch = true;
  std::string server_threads;  // tessera serve --threads ("" : its default)
};

struct Stats {
  std::vector<double> heartbeat_ms, submit_ms, register_ms;
  int64_t heartbeat_errors = 0, submit_errors = 0, started = 0, finished = 0, wakes = 0;
  std::map<std::string, Clock::time_point> submitted;  // job id -> when its submission was answered
  std::vector<double> start_ms;                        // submit-to-start, per job started
  std::map<std::string, int64_t> submit_failures;      // "status: reply" -> how many
  bool measuring = false;
};

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// One kept-alive HTTP connection issuing one request at a time.
class Conn : public std::enable_shared_from_this<Conn> {
 public:
  using Done = std::function<void(bool ok, int status, const std::string& body)>;
  Conn(asio::io_context& ioc, tcp::endpoint at) : stream_(ioc), at_(at) {}

  void Request(http::verb verb, const std::string& target, const std::string& token,
               std::string body, Done done) {
    req_ = {verb, target, 11};
    req_.set(http::field::host, "127.0.0.1");
    req_.set(http::field::authorization, "Bearer " + token);
    req_.set(http::field::content_type, "application/json");
    req_.keep_alive(true);
    req_.body() = std::move(body);
    req_.prepare_payload();
    done_ = std::move(done);
    if (connected_) return Write();
    stream_.expires_after(std::chrono::seconds(30));
    stream_.async_connect(at_, [self = shared_from_this()](beast::error_code ec) {
      if (ec) return self->Fail();
      beast::error_code ignored;
      self->stream_.socket().set_option(tcp::no_delay(true), ignored);
      self->connected_ = true;
      self->Write();
    });
  }

 private:
  void Write() {
    stream_.expires_after(std::chrono::seconds(30));
    http::async_write(stream_, req_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->Fail();
      self->res_ = {};
      http::async_read(self->stream_, self->buffer_, self->res_,
                       [self](beast::error_code ec2, size_t) {
                         if (ec2) return self->Fail();
                         Done d = std::move(self->done_);
                         d(true, self->res_.result_int(), self->res_.body());
                       });
    });
  }
  void Fail() {
    connected_ = false;
    beast::error_code ignored;
    stream_.socket().close(ignored);
    Done d = std::move(done_);
    if (d) d(false, 0, "");
  }

  beast::tcp_stream stream_;
  tcp::endpoint at_;
  bool connected_ = false;
  http::request<http::string_body> req_;
  http::response<http::string_body> res_;
  beast::flat_buffer buffer_;
  Done done_;
};

// A simulated agent: registers, then heartbeats every period; runs what it is told for
// --job-seconds and reports it finished until acknowledged.
class SimAgent : public std::enable_shared_from_this<SimAgent> {
 public:
  SimAgent(asio::io_context& ioc, tcp::endpoint at, std::string node, const Options& o,
           Stats* stats)
      : conn_(std::make_shared<Conn>(ioc, at)),
        watch_(std::make_shared<Conn>(ioc, at)),
        timer_(ioc),
        node_(std::move(node)),
        o_(o),
        stats_(stats) {}

  void Register(std::function<void(bool)> then) {
    tessera::agent::Inventory inv;
    inv.node = node_;
    inv.simulated = true;
    inv.host.cpu_milli = 64000;
    inv.host.memory_mib = 512 * 1024;
    for (int i = 0; i < 8; ++i) {
      inv.devices.push_back(
          {i, "H100-80GB", 81559, "GPU-" + node_ + "-" + std::to_string(i), true, false});
    }
    const auto t = Clock::now();
    conn_->Request(http::verb::post, "/v1/agent/register", "agent-token-1",
                   tessera::agent::RegisterBody(inv, false),
                   [self = shared_from_this(), t, then](bool ok, int status, const std::string&) {
                     self->stats_->register_ms.push_back(Ms(Clock::now() - t));
                     then(ok && status / 100 == 2);
                   });
  }

  void Beat(Clock::time_point due) {
    timer_.expires_at(due);
    timer_.async_wait([self = shared_from_this(), due](beast::error_code ec) {
      if (!ec && !self->in_flight_) self->Send(due);  // (a wake may have sent one already)
    });
  }
  void Stop() {
    stopped_ = true;
    timer_.cancel();
  }

 private:
  // The order watch: woken, heartbeat now (or right after the one in flight).
  void Watch() {
    if (stopped_ || watching_ || seq_ < 0) return;
    watching_ = true;
    watch_->Request(
        http::verb::get,
        "/v1/agent/orders?node=" + node_ + "&after=" + std::to_string(seq_) + "&wait_ms=25000",
        "agent-token-1", "",
        [self = shared_from_this()](bool ok, int status, const std::string& body) {
          self->watching_ = false;
          if (!ok || status != 200) return;
          auto w = tessera::agent::ParseOrdersWake(body);
          if (!w.ok()) return;
          if (w->wake) {
            self->seq_ = std::max(self->seq_, w->seq);
            if (self->stats_->measuring) ++self->stats_->wakes;
            if (self->in_flight_) {
              self->woken_ = true;
            } else {
              self->timer_.cancel();
              self->Send(Clock::now());
            }
          }
          self->Watch();
        });
  }

  void Send(Clock::time_point due) {
    if (stopped_) return;
    in_flight_ = true;
    const auto now = Clock::now();
    std::vector<RunningJob> running;
    for (auto it = running_.begin(); it != running_.end();) {
      if (now >= it->second) {
        finished_.push_back({it->first, 0, 0, 0});
        it = running_.erase(it);
      } else {
        tessera::agent::RunningJob r;
        r.id = it->first;
        r.pid = 4242;
        running.push_back(r);
        ++it;
      }
    }
    conn_->Request(http::verb::post, "/v1/agent/heartbeat", "agent-token-1",
                   tessera::agent::HeartbeatBody(node_, running, finished_),
                   [self = shared_from_this(), due](bool ok, int status, const std::string& body) {
                     self->OnReply(due, ok && status == 200, body);
                   });
  }

  void OnReply(Clock::time_point due, bool ok, const std::string& body) {
    in_flight_ = false;
    if (stats_->measuring) {
      if (ok) {
        stats_->heartbeat_ms.push_back(Ms(Clock::now() - due));
      } else {
        ++stats_->heartbeat_errors;
      }
    }
    if (ok) {
      auto reply = tessera::agent::ParseHeartbeatReply(body);
      if (reply.ok()) {
        for (const std::string& id : reply->ack) {
          finished_.erase(std::remove_if(finished_.begin(), finished_.end(),
                                         [&](const FinishedReport& f) { return f.job == id; }),
                          finished_.end());
        }
        for (const auto& s : reply->start) {
          if (running_.emplace(s.id, Clock::now() + std::chrono::seconds(o_.job_seconds)).second)
            ++stats_->started;
          auto at = stats_->submitted.find(s.id);
          if (at != stats_->submitted.end()) {
            if (stats_->measuring) stats_->start_ms.push_back(Ms(Clock::now() - at->second));
            stats_->submitted.erase(at);
          }
        }
        for (const auto& c : reply->cancel) {
          if (running_.erase(c.job)) finished_.push_back({c.job, 0, 15, 0});
        }
      }
    }
    if (ok && o_.watch) {
      auto reply = tessera::agent::ParseHeartbeatReply(body);
      if (reply.ok() && reply->seq > seq_) seq_ = reply->seq;
      Watch();
    }
    if (woken_) {  // orders arrived while this heartbeat was out
      woken_ = false;
      return Send(Clock::now());
    }
    // The next beat a period after this one was due; if the reply came later than that, at once.
    Beat(std::max(due + std::chrono::milliseconds(o_.period_ms), Clock::now()));
  }

  std::shared_ptr<Conn> conn_;
  std::shared_ptr<Conn> watch_;  // the order watch's own connection
  asio::steady_timer timer_;
  std::string node_;
  const Options& o_;
  Stats* stats_;
  std::map<std::string, Clock::time_point> running_;
  std::vector<FinishedReport> finished_;
  bool stopped_ = false;
  int64_t seq_ = -1;        // the node's order sequence, from heartbeat replies and wakes
  bool watching_ = false;   // a watch is out
  bool in_flight_ = false;  // a heartbeat is out
  bool woken_ = false;      // woken while it was
};

// Submits at rate/submitters per second over one connection, open loop.
class Submitter : public std::enable_shared_from_this<Submitter> {
 public:
  Submitter(asio::io_context& ioc, tcp::endpoint at, double per_second, Stats* stats)
      : conn_(std::make_shared<Conn>(ioc, at)),
        timer_(ioc),
        interval_(std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double>(1.0 / per_second))),
        stats_(stats) {}
  void Start(Clock::time_point first) { Next(first); }
  void Stop() {
    stopped_ = true;
    timer_.cancel();
  }

 private:
  void Next(Clock::time_point due) {
    if (stopped_) return;
    timer_.expires_at(due);
    timer_.async_wait([self = shared_from_this(), due](beast::error_code ec) {
      if (ec) return;
      const std::string body = R"({"queue":"training","command":["true"]})";
      self->conn_->Request(
          http::verb::post, "/v1/jobs", "alice-token-1", body,
          [self, due](bool ok, int status, const std::string& reply) {
            if (ok && status == 201) {
              Json j = Json::parse(reply, nullptr, false);
              if (j.is_object() && j.contains("id"))
                self->stats_->submitted[j["id"]] = Clock::now();
            }
            if (self->stats_->measuring) {
              if (ok && status == 201) {
                self->stats_->submit_ms.push_back(Ms(Clock::now() - due));
              } else {
                ++self->stats_->submit_errors;
                ++self->stats_
                      ->submit_failures[(ok ? std::to_string(status) : std::string("no answer")) +
                                        ": " + reply.substr(0, 160)];
              }
            }
            self->Next(due + self->interval_);
          });
    });
  }
  std::shared_ptr<Conn> conn_;
  asio::steady_timer timer_;
  Clock::duration interval_;
  Stats* stats_;
  bool stopped_ = false;
};

struct ProcUsage {
  double cpu_s = 0;
  int64_t rss_kib = 0, hwm_kib = 0;
};

ProcUsage Usage(int pid) {
  ProcUsage u;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t close = line.rfind(')');
  if (close != std::string::npos) {
    std::istringstream rest(line.substr(close + 2));
    std::string field;
    unsigned long long utime = 0, stime = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
      if (i == 14) utime = std::stoull(field);
      if (i == 15) stime = std::stoull(field);
    }
    u.cpu_s = static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  }
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) u.rss_kib = std::stoll(line.substr(6));
    if (line.rfind("VmHWM:", 0) == 0) u.hwm_kib = std::stoll(line.substr(6));
  }
  return u;
}

int Port(const std::string& log_path) {
  for (int i = 0; i < 300; ++i) {
    std::ifstream in(log_path);
    std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t at = all.find("listening on http://127.0.0.1:");
    if (at != std::string::npos)
      return std::atoi(all.c_str() + at + std::strlen("listening on http://127.0.0.1:"));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  tessera::bench::CheckArgs(argc, argv,
                            {"--agents", "--seconds", "--rate", "--period-ms", "--job-seconds",
                             "--submitters", "--watch", "--server-threads"});
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--agents")) o.agents = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--seconds")) o.seconds = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--rate")) o.rate = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--period-ms")) o.period_ms = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--job-seconds")) o.job_seconds = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--submitters")) o.submitters = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--watch")) o.watch = std::atoi(argv[i + 1]) != 0;
    if (!std::strcmp(argv[i], "--server-threads")) o.server_threads = argv[i + 1];
  }
  // Two connections per agent: past the usual hard limit of 20,000 descriptors at 10,000 agents
  // (raised when this runs as root; the server does the same).
  rlimit r{262144, 262144};
  if (setrlimit(RLIMIT_NOFILE, &r) != 0 && getrlimit(RLIMIT_NOFILE, &r) == 0) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
  const std::string dir = std::filesystem::temp_directory_path().string() +
                          "/tessera-agents-load-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.yaml") << kConfig;
  std::vector<std::string> serve = {TESSERA_BINARY_DIR "/src/cli/tessera",
                                    "serve",
                                    "--config",
                                    dir + "/config.yaml",
                                    "--data",
                                    dir + "/data",
                                    "--listen",
                                    "127.0.0.1:0"};
  if (!o.server_threads.empty()) serve.insert(serve.end(), {"--threads", o.server_threads});
  tessera::testing::Proc server(serve, dir + "/serve.log");
  const int port = Port(dir + "/serve.log");
  if (port <= 0) {
    std::fprintf(stderr, "tessera serve did not start; see %s/serve.log\n", dir.c_str());
    return 1;
  }
  std::printf(
      "agents load: %d simulated agents (8 x H100-80GB each) heartbeating every %d ms, %d "
      "submissions/s "
      "(%d clients), jobs run %d s, for %d s, order watches %s; tessera serve on SQLite (%s), %u "
      "cores shared "
      "with this generator (one I/O thread)\n",
      o.agents, o.period_ms, o.rate, o.submitters, o.job_seconds, o.seconds, o.watch ? "on" : "off",
      dir.c_str(), std::thread::hardware_concurrency());
  std::fflush(stdout);
  asio::io_context ioc(1);
  const tcp::endpoint at(asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port));
  Stats stats;
  std::vector<std::shared_ptr<SimAgent>> agents;
  for (int i = 0; i < o.agents; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "node-%05d", i);
    agents.push_back(std::make_shared<SimAgent>(ioc, at, name, o, &stats));
  }
  // Registration, at most 64 in flight (a fleet coming up), timed.
  const auto reg_start = Clock::now();
  size_t next = 0, done = 0;
  int refused = 0;
  std::function<void()> launch = [&] {
    if (next >= agents.size()) return;
    const size_t i = next++;
    auto a = agents[i];
    a->Register([&, a, i](bool ok) {
      refused += ok ? 0 : 1;
      ++done;
      // Heartbeats start at once, spread evenly over the period across the fleet.
      const auto phase = std::chrono::microseconds(static_cast<int64_t>(
          1000.0 * o.period_ms * static_cast<double>(i) / static_cast<double>(o.agents)));
      if (ok) a->Beat(Clock::now() + phase);
      launch();
    });
  };
  for (int k = 0; k < 64; ++k) launch();
  while (done < agents.size()) ioc.run_one();
  const double reg_s = Ms(Clock::now() - reg_start) / 1000;
  std::printf("  registered %d agents in %.1f s (%d refused), p99 %.1f ms\n", o.agents, reg_s,
              refused, Percentile(stats.register_ms, 99));
  std::fflush(stdout);
  // Submissions start now; 10 s to settle, then the measured window.
  const auto start = Clock::now();
  std::vector<std::shared_ptr<Submitter>> subs;
  for (int k = 0; k < o.submitters; ++k) {
    subs.push_back(
        std::make_shared<Submitter>(ioc, at, static_cast<double>(o.rate) / o.submitters, &stats));
    subs.back()->Start(start + std::chrono::milliseconds(k * 1000 / std::max(1, o.rate)));
  }
  const auto measure_from = start + std::chrono::seconds(10);
  const auto measure_to = measure_from + std::chrono::seconds(o.seconds);
  ioc.run_until(measure_from);
  stats.measuring = true;
  const ProcUsage before = Usage(server.pid()), self_before = Usage(getpid());
  ioc.run_until(measure_to);
  stats.measuring = false;
  const ProcUsage after = Usage(server.pid()), self_after = Usage(getpid());
  for (auto& a : agents) a->Stop();
  for (auto& s : subs) s->Stop();
  // Nodes the server marked lost during the run (none stopped heartbeating).
  int lost = 0;
  {
    auto conn = std::make_shared<Conn>(ioc, at);
    bool got = false;
    conn->Request(http::verb::get, "/v1/events?kind=node.lost&limit=1000", "admin-token-1", "",
                  [&](bool ok, int status, const std::string& body) {
                    got = true;
                    if (ok && status == 200)
                      lost = static_cast<int>(Json::parse(body, nullptr, false)["events"].size());
                  });
    ioc.restart();
    while (!got && ioc.run_one_for(std::chrono::seconds(30))) {
    }
  }
  for (const auto& [what, n] : stats.submit_failures)
    std::printf("  failed submission (%lld): %s\n", static_cast<long long>(n), what.c_str());
  std::printf(
      "  over %d s: %zu heartbeats (%lld failed), %zu submissions (%lld failed), %lld jobs started "
      "by agents\n",
      o.seconds, stats.heartbeat_ms.size(), static_cast<long long>(stats.heartbeat_errors),
      stats.submit_ms.size(), static_cast<long long>(stats.submit_errors),
      static_cast<long long>(stats.started));
  std::printf(
      "  heartbeat latency (from due time): p50 %.1f ms, p99 %.1f ms, max %.1f ms; goal p99 < 50 "
      "ms: %s\n",
      Percentile(stats.heartbeat_ms, 50), Percentile(stats.heartbeat_ms, 99),
      Percentile(stats.heartbeat_ms, 100),
      Percentile(stats.heartbeat_ms, 99) < 50 ? "met" : "NOT met");
  std::printf(
      "  submission latency (from due time): p50 %.1f ms, p99 %.1f ms, max %.1f ms; goal p99 < 100 "
      "ms: %s\n",
      Percentile(stats.submit_ms, 50), Percentile(stats.submit_ms, 99),
      Percentile(stats.submit_ms, 100), Percentile(stats.submit_ms, 99) < 100 ? "met" : "NOT met");
  std::printf(
      "  submit-to-start (answered submission to its agent's start order): p50 %.1f ms, p99 %.1f "
      "ms over %zu "
      "jobs; %lld order-watch wakes\n",
      Percentile(stats.start_ms, 50), Percentile(stats.start_ms, 99), stats.start_ms.size(),
      static_cast<long long>(stats.wakes));
  std::printf("  nodes falsely lost: %d (goal 0)\n", lost);
  std::printf(
      "  tessera serve: %.2f CPU cores busy on average, RSS %.0f MiB (peak %.0f MiB); %.1f us CPU "
      "per "
      "heartbeat+submission\n",
      (after.cpu_s - before.cpu_s) / o.seconds, static_cast<double>(after.rss_kib) / 1024.0,
      static_cast<double>(after.hwm_kib) / 1024.0,
      1e6 * (after.cpu_s - before.cpu_s) /
          static_cast<double>(
              std::max<size_t>(1, stats.heartbeat_ms.size() + stats.submit_ms.size())));
  std::printf(
      "  this generator: %.2f CPU cores busy on average (a saturated generator delays requests "
      "itself)\n",
      (self_after.cpu_s - self_before.cpu_s) / o.seconds);
  server.Kill(SIGTERM);
  std::error_code ec;
  std::filesystem::copy_file(dir + "/serve.log",
                             std::filesystem::temp_directory_path() / "agents_load_bench-serve.log",
                             std::filesystem::copy_options::overwrite_existing, ec);
  std::printf("  the server's log: %s\n",
              (std::filesystem::temp_directory_path() / "agents_load_bench-serve.log").c_str());
  std::fflush(stdout);
  std::filesystem::remove_all(dir, ec);
  return 0;
}
