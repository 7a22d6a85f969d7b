// A flood of idle connections and slow-header clients against a real `tessera serve` over TLS
// (red-team report, issue 30), with agents heartbeating through it. The server is the built
// build/src/cli/tessera, in a process of its own (SQLite store, a self-signed certificate), with
// its default connection caps unless told otherwise; each loopback address is a peer of its own
// (`--limit-loopback-peers`: every client here is on loopback). Prints:
//
//   - the server's RSS (VmRSS and RssAnon from /proc/PID/status) before the flood;
//   - the flood, all from 127.0.0.1: --connections kept-alive connections that each make one
//     request and then idle (20,000 by default; fewer, said so, when the open-file hard limit
//     cannot hold them on both ends or they would pass the server's connection cap), and --slow
//     slow-header clients sending one header byte a second and reconnecting when dropped; how
//     many the server held and how many it refused at once (its per-peer cap, --per-peer);
//   - while they are open (--hold seconds), GET /v1/health every 50 ms from 127.0.0.2, over one
//     kept-alive connection and over a new connection each time, and --agents agents (their own
//     identities, each bound to its node) heartbeating every second from 127.0.0.2 as
//     `tessera agent` does (POST /v1/agent/heartbeat over a kept-alive connection): p50, p99 and
//     max of each (goal: health under 100 ms), with failures, and nodes the server marked lost;
//     when the probes over 100 ms were sent;
//     the slow clients' drops and how long each lasted (header deadline 10 s);
//   - the RSS at its peak, then --settle seconds after the flood closed, and the ratio to before
//     (goal: within 10%).
// The flood is run --rounds times against the same server (memory a first flood leaves behind
// should not grow with the next).
//
//   conn_flood_bench [--connections 20000] [--slow 200] [--hold 20] [--settle 5] [--rounds 2]
//   [--agents 8] [--per-peer 512 (serve's default; 0: no per-peer cap)]
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_args.h"
#include "conn_flood_clients.h"
#include "net/tls.h"
#include "percentile.h"
#include "proc.h"

namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using conn_flood::Agents;
using conn_flood::Clock;
using conn_flood::Conn;
using conn_flood::Flood;
using conn_flood::Ms;
using conn_flood::Slowloris;
using conn_flood::tcp;
using tessera::bench::Percentile;

struct Options {
  int connections = 20000;
  int slow = 200;
  int hold_s = 20;
  int settle_s = 5;
  int rounds = 2;
  int agents = 8;
  int per_peer = 512;  // tessera serve --max-connections-per-peer (its default)
};

const char* kConfig = R"(
heartbeat_interval: 1s
heartbeat_timeout: 10s
groups: [{name: research}]
profiles: [{name: card, gpus: 1, forms: [whole]}]
queues: [{name: training, profile: card, groups: [research]}]
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: alice, role: user, groups: [research], token: alice-token-1}
)";  // the agents' identities follow

// VmRSS and RssAnon of a process, in KiB.
struct Rss {
  int64_t vm = 0, anon = 0;
};
Rss RssOf(pid_t pid) {
  Rss r;
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) r.vm = std::stoll(line.substr(6));
    if (line.rfind("RssAnon:", 0) == 0) r.anon = std::stoll(line.substr(8));
  }
  return r;
}

double LoadAverage() {
  std::ifstream in("/proc/loadavg");
  double l = 0;
  in >> l;
  return l;
}

struct Figures {
  std::vector<double> kept_ms, fresh_ms;
  int kept_failed = 0, fresh_failed = 0;
  // When the probes over 100 ms were sent, in seconds from the flood's start.
  std::vector<double> slow_at_s;
};

// The value of a sample line "name N" in Prometheus text, -1 when absent.
long long Metric(const std::string& text, const std::string& name) {
  const size_t at = text.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::atoll(text.c_str() + at + name.size() + 2);
}

int Port(const std::string& log_path) {
  const std::string key = "listening on https://127.0.0.1:";
  for (int i = 0; i < 300; ++i) {
    std::ifstream in(log_path);
    std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t at = all.find(key);
    if (at != std::string::npos) return std::atoi(all.c_str() + at + key.size());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return -1;
}

void Line(const char* what, const std::vector<double>& v, int failed) {
  std::printf("  %-34s %5zu, %d failed: p50 %.2f ms, p99 %.2f ms, max %.2f ms\n", what, v.size(),
              failed, Percentile(v, 50), Percentile(v, 99),
              v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()));
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  tessera::bench::CheckArgs(
      argc, argv,
      {"--connections", "--slow", "--hold", "--settle", "--rounds", "--agents", "--per-peer"});
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--connections")) o.connections = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--slow")) o.slow = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--hold")) o.hold_s = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--settle")) o.settle_s = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--rounds")) o.rounds = std::max(1, std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--agents")) o.agents = std::max(0, std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--per-peer")) o.per_peer = std::max(0, std::atoi(argv[i + 1]));
  }
  const std::string dir = "/tmp/tessera_conn_flood_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto st = tessera::net::WriteSelfSigned(dir + "/cert.pem", dir + "/key.pem", {"127.0.0.1"});
  if (!st.ok()) {
    std::fprintf(stderr, "cannot make a certificate: %s\n", st.ToString().c_str());
    return 1;
  }
  {
    std::ofstream config(dir + "/config.yaml");
    config << tessera::testing::WithJobAccounts(kConfig);
    for (int i = 0; i < o.agents; ++i) {  // an identity per agent, bound to its node
      config << "  - {name: agent" << i << ", role: agent, nodes: [" << Agents::Node(i)
             << "], token: " << Agents::Token(i) << "}\n";
    }
  }
  // Both ends raise their soft open-file limit to the hard one (the server does so in Bind).
  rlimit r{};
  getrlimit(RLIMIT_NOFILE, &r);
  r.rlim_cur = r.rlim_max;
  setrlimit(RLIMIT_NOFILE, &r);
  const int64_t hard = r.rlim_max == RLIM_INFINITY ? (1 << 20) : static_cast<int64_t>(r.rlim_max);

  tessera::testing::Proc server(
      {TESSERA_BINARY_DIR "/src/cli/tessera", "serve", "--config", dir + "/config.yaml", "--data",
       dir + "/data", "--listen", "127.0.0.1:0", "--tls-cert", dir + "/cert.pem", "--tls-key",
       dir + "/key.pem", "--max-connections-per-peer", std::to_string(o.per_peer),
       "--limit-loopback-peers"},
      dir + "/serve.log");
  const int port = Port(dir + "/serve.log");
  if (port <= 0) {
    std::fprintf(stderr, "tessera serve did not start:\n%s\n", server.Log().c_str());
    return 1;
  }
  const pid_t child = server.pid();
  const tcp::endpoint at(asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port));
  asio::ssl::context ctx(asio::ssl::context::tls_client);
  ctx.set_verify_mode(asio::ssl::verify_none);
  SSL_CTX_set_mode(ctx.native_handle(), SSL_MODE_RELEASE_BUFFERS);

  Conn prober(ctx, at, "127.0.0.2"), admin(ctx, at, "127.0.0.2");
  long long open = 0, refused = 0, cap = 0;
  auto stats = [&] {
    std::string text;
    double ms = 0;
    admin.Request(http::verb::get, "/metrics", "admin-token-1", "", &text, &ms);
    open = Metric(text, "tessera_http_connections");
    refused = Metric(text, "tessera_http_connections_refused_total");
    cap = Metric(text, "tessera_http_connections_max");
  };
  auto lost_nodes = [&] {
    std::string text;
    double ms = 0;
    admin.Request(http::verb::get, "/v1/nodes", "admin-token-1", "", &text, &ms);
    int n = 0;
    for (size_t p = 0; (p = text.find("\"state\":\"lost\"", p)) != std::string::npos; ++p) ++n;
    return n;
  };
  auto health = [&](bool fresh) {
    double ms = 0;
    return prober.Request(http::verb::get, "/v1/health", "", "", nullptr, &ms, fresh) == 200 ? ms
                                                                                             : -1;
  };
  Agents agents(ctx, at, o.agents);
  if (!agents.Register()) {
    std::fprintf(stderr, "an agent's registration was refused:\n%s\n", server.Log().c_str());
    return 1;
  }
  agents.Start();
  Figures quiet;
  agents.Record();
  for (int i = 0; i < 60; ++i) {  // warm up, and the figures at rest
    const double ms = health(i % 2 == 1);
    if (ms >= 0) quiet.kept_ms.push_back(ms);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  int quiet_hb_failed = 0;
  const std::vector<double> quiet_hb = agents.Take(&quiet_hb_failed);
  stats();

  // What fits: the client holds the flood, the slow clients and a few more; without a per-peer
  // cap, the server's cap (its open-file limit less 1,024) must leave room for the slow clients,
  // the probes and the agents.
  int64_t fits = hard - o.slow - 200;
  if (o.per_peer == 0) fits = std::min<int64_t>(fits, cap - o.slow - 50 - o.agents);
  const int n = static_cast<int>(std::min<int64_t>(o.connections, fits));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const Rss before = RssOf(child);
  std::printf(
      "conn_flood_bench: tessera serve over TLS, %u cores, load average %.2f; open-file hard limit "
      "%lld (both processes); server connection cap %lld, per peer %s (loopback addresses "
      "counted); %d agents heartbeating every second from 127.0.0.2\n",
      std::thread::hardware_concurrency(), LoadAverage(), static_cast<long long>(hard), cap,
      o.per_peer > 0 ? std::to_string(o.per_peer).c_str() : "none", o.agents);
  if (n < o.connections) {
    std::printf(
        "  REDUCED: %d idle connections instead of %d (the hard limit of %lld descriptors per "
        "process cannot hold more beside %d slow clients, or the server's cap is %lld)\n",
        n, o.connections, static_cast<long long>(hard), o.slow, cap);
  }
  std::printf(
      "  at rest: health p50 %.2f ms, max %.2f ms; heartbeats p50 %.2f ms, max %.2f ms\n",
      Percentile(quiet.kept_ms, 50),
      quiet.kept_ms.empty() ? 0.0 : *std::max_element(quiet.kept_ms.begin(), quiet.kept_ms.end()),
      Percentile(quiet_hb, 50),
      quiet_hb.empty() ? 0.0 : *std::max_element(quiet_hb.begin(), quiet_hb.end()));
  std::printf("  server RSS before: VmRSS %lld KiB, RssAnon %lld KiB\n",
              static_cast<long long>(before.vm), static_cast<long long>(before.anon));
  bool all_met = true;

  for (int round = 1; round <= o.rounds; ++round) {
    std::printf(" round %d of %d:\n", round, o.rounds);
    const long long refused_before = refused;
    asio::io_context ioc(1);
    Flood flood(ioc, ctx, true, at, n);
    Slowloris slow(ioc, ctx, true, at, o.slow);
    Figures f;
    agents.Record();
    const auto t0 = Clock::now();
    flood.Start();
    slow.Start();
    std::thread io([&ioc] {
      auto guard = asio::make_work_guard(ioc);
      ioc.run();
    });
    auto on_io = [&ioc](auto fn) {  // runs fn on the client's loop and waits for it
      std::promise<void> p;
      asio::post(ioc, [&] {
        fn();
        p.set_value();
      });
      p.get_future().wait();
    };
    // Probes every 50 ms, alternating kept-alive and new connections, from the flood's start to
    // its end; RSS every second.
    Rss peak = RssOf(child);
    auto next_rss = Clock::now();
    auto probe = [&](int i) {
      const bool fresh = i % 2 == 1;
      const double sent_s = Ms(Clock::now() - t0) / 1000;
      const double ms = health(fresh);
      if (ms < 0) {
        ++(fresh ? f.fresh_failed : f.kept_failed);
      } else {
        (fresh ? f.fresh_ms : f.kept_ms).push_back(ms);
        if (ms >= 100) f.slow_at_s.push_back(sent_s);
      }
      if (Clock::now() >= next_rss) {
        const Rss now = RssOf(child);
        if (now.vm > peak.vm) peak = now;
        next_rss += std::chrono::seconds(1);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    };
    int i = 0;
    for (bool opened = false; !opened && Ms(Clock::now() - t0) < 600000; ++i) {
      probe(i);
      if (i % 4 == 0) on_io([&] { opened = flood.done(); });
    }
    const double open_s = Ms(Clock::now() - t0) / 1000;
    int flood_open = 0, flood_failed = 0;
    on_io([&] {
      flood_open = flood.opened();
      flood_failed = flood.failed();
    });
    stats();
    std::printf(
        "  flood: %d connections tried in %.1f s: %d held (one request each, then idle), %d "
        "refused or failed; server: %lld open, %lld refused at once so far\n",
        n, open_s, flood_open, flood_failed, open, refused - refused_before);
    const auto hold_until = Clock::now() + std::chrono::seconds(o.hold_s);
    while (Clock::now() < hold_until) probe(i++);
    stats();
    const long long open_at_peak = open;
    std::vector<double> lasted;
    int slow_connections = 0, slow_failed = 0;
    on_io([&] {
      lasted = slow.lasted_s();
      slow_connections = slow.connected();
      slow_failed = slow.connect_failed();
      flood.CloseAll();
      slow.Stop();
    });
    const auto closed_at = Clock::now();
    int hb_failed = 0;
    const std::vector<double> hb = agents.Take(&hb_failed);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the slow clients' handlers end
    ioc.stop();
    io.join();

    std::vector<double> all = f.kept_ms;
    all.insert(all.end(), f.fresh_ms.begin(), f.fresh_ms.end());
    std::printf(
        "  during the flood (%.0f s; server: %lld open at the end, %lld refused at once in the "
        "round):\n",
        open_s + o.hold_s, open_at_peak, refused - refused_before);
    Line("health (kept-alive) probes", f.kept_ms, f.kept_failed);
    Line("health (new connection each)", f.fresh_ms, f.fresh_failed);
    Line("agent heartbeats", hb, hb_failed);
    if (!f.slow_at_s.empty()) {
      std::string when;
      for (double s : f.slow_at_s) {
        char one[32];
        std::snprintf(one, sizeof one, "%s%.1f", when.empty() ? "" : ", ", s);
        when += one;
      }
      std::printf(
          "  health probes over 100 ms sent at (s after the flood's start; the slow clients "
          "reconnect about every 10 s): %s\n",
          when.c_str());
    }
    const int lost = lost_nodes();
    std::printf("  nodes marked lost: %d of %d\n", lost, o.agents);
    const double worst = all.empty() ? 0 : *std::max_element(all.begin(), all.end());
    const bool health_met = worst < 100 && f.kept_failed + f.fresh_failed == 0;
    const bool agents_met = hb_failed == 0 && lost == 0 && !hb.empty();
    std::printf("  goal health max < 100 ms: %s; goal agents keep heartbeating: %s\n",
                health_met ? "met" : "NOT MET", agents_met ? "met" : "NOT MET");
    std::printf(
        "  slow-header clients: %d at a time, %d connections in all (%d refused or failed to "
        "connect), %zu dropped by the server, each after %.1f-%.1f s (p50 %.1f s)\n",
        o.slow, slow_connections, slow_failed, lasted.size(),
        lasted.empty() ? 0.0 : *std::min_element(lasted.begin(), lasted.end()),
        lasted.empty() ? 0.0 : *std::max_element(lasted.begin(), lasted.end()),
        Percentile(lasted, 50));
    std::printf(
        "  server RSS at the peak: VmRSS %lld KiB, RssAnon %lld KiB (%.1f KiB per open "
        "connection)\n",
        static_cast<long long>(peak.vm), static_cast<long long>(peak.anon),
        open_at_peak > 0
            ? static_cast<double>(peak.anon - before.anon) / static_cast<double>(open_at_peak)
            : 0.0);

    // Settle, then RSS again.
    Rss after = RssOf(child);
    for (int s = 0; s < o.settle_s; ++s) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      after = RssOf(child);
    }
    stats();
    const double returned = peak.vm > before.vm ? static_cast<double>(peak.vm - after.vm) /
                                                      static_cast<double>(peak.vm - before.vm)
                                                : 1.0;
    std::printf(
        "  %.1f s after the flood closed (server: %lld open): VmRSS %lld KiB (%.3f of before), "
        "RssAnon %lld KiB (%.3f of before); %.1f%% of what the flood took returned\n",
        Ms(Clock::now() - closed_at) / 1000, open, static_cast<long long>(after.vm),
        static_cast<double>(after.vm) / static_cast<double>(before.vm),
        static_cast<long long>(after.anon),
        static_cast<double>(after.anon) / static_cast<double>(before.anon), 100 * returned);
    const bool rss_met = after.vm <= before.vm + before.vm / 10;
    std::printf("  goal VmRSS within 10%% of before: %s\n", rss_met ? "met" : "NOT MET");
    all_met = all_met && health_met && agents_met && rss_met;
  }
  agents.Stop();
  std::printf("all goals %s\n", all_met ? "met" : "NOT met");
  server.Kill(SIGTERM);
  std::filesystem::remove_all(dir);
  return 0;
}
