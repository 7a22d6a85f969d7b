// A job printing fast, for long, against its node's heartbeats: real `tessera serve` and
// `tessera agent` processes on loopback; the job writes --rate-mb MB/s (1 MiB lines, paced) for
// --seconds. Every 100 ms the node's last heartbeat time is read from /v1/nodes: it prints the
// largest age seen, every gap between consecutive heartbeats (max, p99) against the 1 s period,
// the node.lost events (goal: none, and no heartbeat more than 1 s late), and how much output the
// server kept (max_output, default 64 MiB) and the job wrote.
//
//   output_flood_bench [--rate-mb 100] [--seconds 60]

#include <httplib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench_args.h"
#include "percentile.h"
#include "proc.h"

namespace {

using Json = nlohmann::json;
using tessera::testing::kTessera;
using tessera::testing::Proc;

const char* kConfig = R"(
heartbeat_timeout: 10s
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: alice, role: user, groups: [research], token: alice-token-1}
  - {name: agent, role: agent, token: agent-token-1}
groups: [{name: research}]
profiles: [{name: train, gpus: 1, cpu: 100m, memory: 64MiB, forms: [whole]}]
queues: [{name: training, profile: train, groups: [research]}]
)";

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

int main(int argc, char** argv) {
  int rate_mb = 100, seconds = 60;
  tessera::bench::CheckArgs(argc, argv, {"--rate-mb", "--seconds"});
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rate-mb")) rate_mb = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--seconds")) seconds = std::atoi(argv[i + 1]);
  }
  const std::string dir = "/tmp/tessera_output_flood_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.yaml") << kConfig;
  Proc server({kTessera, "serve", "--config", dir + "/config.yaml", "--data", dir + "/data",
               "--listen", "127.0.0.1:0"},
              dir + "/serve.log");
  const int port = server.WaitForPort();
  if (port <= 0) {
    std::fprintf(stderr, "server did not start:\n%s\n", server.Log().c_str());
    return 1;
  }
  Proc agent({kTessera, "agent", "--server", "http://127.0.0.1:" + std::to_string(port),
              "--token-file", tessera::testing::TokenFile("agent-token-1"), "--node", "n1",
              "--simulate", "1xH100-80GB", "--work", dir + "/work", "--cgroup-root", ""},
             dir + "/agent.log");
  httplib::Client c("127.0.0.1", port);
  const httplib::Headers admin = {{"Authorization", "Bearer admin-token-1"}};
  for (int i = 0; i < 200; ++i) {
    auto r = c.Get("/v1/nodes", admin);
    if (r && r->status == 200 && !Json::parse(r->body)["nodes"].empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // 1 MiB lines, paced to the rate: ahead of schedule it sleeps, behind it writes on.
  const std::string writer =
      "import sys, time\nb = b'x' * 1048575 + b'\\n'\nt = time.time()\nfor i in range(" +
      std::to_string(rate_mb * seconds) +
      "):\n    sys.stdout.buffer.write(b)\n    ahead = t + (i + 1) / " + std::to_string(rate_mb) +
      " - time.time()\n    if ahead > 0: time.sleep(ahead)\n";
  auto sub = c.Post("/v1/jobs", {{"Authorization", "Bearer alice-token-1"}},
                    Json{{"queue", "training"}, {"command", {"python3", "-c", writer}}}.dump(),
                    "application/json");
  if (!sub || sub->status != 201) {
    std::fprintf(stderr, "submission failed\n");
    return 1;
  }
  const std::string id = Json::parse(sub->body)["id"];
  std::vector<double> gaps;
  int64_t last_hb = 0, worst_age = 0;
  int samples = 0;
  std::string state;
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(seconds + 60)) {
    auto n = c.Get("/v1/nodes", admin);
    const int64_t now = NowMs();
    if (n && n->status == 200) {
      const int64_t hb = Json::parse(n->body)["nodes"][0]["last_heartbeat_ms"].get<int64_t>();
      if (last_hb != 0 && hb != last_hb) gaps.push_back(static_cast<double>(hb - last_hb));
      last_hb = hb;
      worst_age = std::max(worst_age, now - hb);
      ++samples;
    }
    auto j = c.Get(("/v1/jobs/" + id).c_str(), admin);
    state = j && j->status == 200 ? Json::parse(j->body).value("state", "") : "";
    if (state == "succeeded" || state == "failed") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  auto out = c.Get(("/v1/jobs/" + id + "/output?length=1").c_str(), admin);
  const std::string kept = out ? out->get_header_value("X-Output-Size") : "?";
  std::error_code ec;
  const auto written = std::filesystem::file_size(dir + "/work/" + id + ".out", ec);
  auto lost = c.Get("/v1/events?kind=node.lost", admin);
  const size_t lost_events =
      lost && lost->status == 200 ? Json::parse(lost->body)["events"].size() : 0;
  double max_gap = 0;
  for (double g : gaps) max_gap = std::max(max_gap, g);
  std::printf(
      "output_flood_bench: one job writing %d MB/s (1 MiB lines, paced) for %d s on a simulated "
      "node; "
      "agent heartbeat period 1000 ms; %d hardware threads; sampled every 100 ms\n",
      rate_mb, seconds, static_cast<int>(std::thread::hardware_concurrency()));
  std::printf(
      "  job %s: %s after %.1f s; it wrote %.1f MB (%.1f MB/s over the whole run); the server kept "
      "%s bytes (max_output)\n",
      id.c_str(), state.c_str(), took, ec ? -1.0 : static_cast<double>(written) / 1e6,
      ec ? -1.0 : static_cast<double>(written) / 1e6 / took, kept.c_str());
  std::printf(
      "  heartbeats seen: %zu gaps; gap p50 %.0f ms, p99 %.0f ms, max %.0f ms (goal: under 2000 "
      "ms, i.e. never "
      "more than 1 s late); largest heartbeat age at a sample %lld ms; %zu node.lost events (goal "
      "0); %d samples\n",
      gaps.size(), tessera::bench::Percentile(gaps, 50), tessera::bench::Percentile(gaps, 99),
      max_gap, static_cast<long long>(worst_age), lost_events, samples);
  agent.Kill(SIGTERM);
  server.Kill(SIGTERM);
  std::filesystem::remove_all(dir);
  return max_gap < 2000 && lost_events == 0 && state == "succeeded" ? 0 : 1;
}
