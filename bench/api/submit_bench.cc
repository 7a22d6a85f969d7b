// Durable submissions per second through the HTTP API: a real `tessera serve` (SQLite, or
// PostgreSQL started from Debian's package in a temporary directory), N concurrent clients
// each submitting over one keep-alive connection, every request acknowledged only once
// committed. Prints throughput and latency percentiles with the conditions.
//
//   submit_bench [--jobs 10000] [--clients 1,4] [--store sqlite,postgresql]
//                [--stored 100000] [--keyed no,yes]
//
// --stored N puts N ended jobs with Idempotency-Keys (submitted within the key window) in the
// SQLite store before the server starts, as a busy server has; --keyed yes sends a fresh
// Idempotency-Key with every submission, as `tessera submit` does, so each one is looked up.
#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "bench_args.h"
#include "pg_harness.h"
#include "proc.h"
#include "store/store.h"

namespace {

using Json = nlohmann::json;

const char* kConfig = R"(
heartbeat_timeout: 1h
max_jobs_per_identity: 1000000
identities:
  - {name: admin, role: admin, token: admin-token-1}
  - {name: alice, role: user, groups: [research], token: alice-token-1}
groups: [{name: research}]
profiles: [{name: nb, gpus: 1, gpu_memory: 8GiB, cpu: 100m, memory: 64MiB, forms: [share]}]
queues: [{name: notebooks, profile: nb, groups: [research]}]
)";

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int jobs = 10000;
  std::string clients_arg = "1,4", stores_arg = "sqlite,postgresql", keyed_arg = "no";
  int stored = 0;
  tessera::bench::CheckArgs(argc, argv, {"--jobs", "--stored", "--keyed", "--clients", "--store"});
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--jobs")) jobs = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--stored")) stored = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--keyed")) keyed_arg = argv[i + 1];
    if (!std::strcmp(argv[i], "--clients")) clients_arg = argv[i + 1];
    if (!std::strcmp(argv[i], "--store")) stores_arg = argv[i + 1];
  }
  std::printf(
      "durable submissions through the API: %d jobs per run, %u cores, share jobs on a "
      "1-node cluster (no agent), %d ended keyed jobs stored before (SQLite runs)\n",
      jobs, std::thread::hardware_concurrency(), stored);
  std::unique_ptr<tessera::testing::PgServer> pg;
  for (const std::string& store : Split(stores_arg)) {
    for (const std::string& keyed_text : Split(keyed_arg)) {
      const bool keyed = keyed_text == "yes";
      for (const std::string& c : Split(clients_arg)) {
        const int clients = std::atoi(c.c_str());
        std::string dir = "/tmp/tessera-submit-bench-" + std::to_string(getpid());
        std::filesystem::remove_all(dir);
        std::filesystem::create_directories(dir + "/data");
        std::ofstream(dir + "/config.yaml") << kConfig;
        if (stored > 0 && store == "sqlite") {
          // Ended jobs of earlier submissions, each with its key, all within the key window.
          auto st = tessera::store::Store::Open(dir + "/data/tessera.db");
          if (!st.ok()) {
            std::fprintf(stderr, "store: %s\n", st.status().ToString().c_str());
            return 1;
          }
          const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count();
          std::vector<tessera::store::JobRecord> batch;
          for (int k = 1; k <= stored; ++k) {
            tessera::store::JobRecord r;
            r.id = "j-" + std::to_string(k);
            r.queue = "notebooks";
            r.identity = "alice";
            r.group = "research";
            r.state = "succeeded";
            r.spec =
                R"({"command":["true"],"env":{},"gpus":1,"gpu_memory_mib":8192,"run_as":"alice"})";
            r.submit_ms = r.update_ms = now_ms - 60'000 + k / 1000;
            r.exit_code = 0;
            r.idempotency_key = "alice\nstored-" + std::to_string(k);
            batch.push_back(std::move(r));
            if (batch.size() == 5000 || k == stored) {
              if (auto w = (*st)->Commit({}, batch, nullptr); !w.ok()) {
                std::fprintf(stderr, "store: %s\n", w.ToString().c_str());
                return 1;
              }
              batch.clear();
            }
          }
        }
        std::vector<std::string> args = {tessera::testing::kTessera,
                                         "serve",
                                         "--config",
                                         dir + "/config.yaml",
                                         "--data",
                                         dir + "/data",
                                         "--listen",
                                         "127.0.0.1:0"};
        std::string what = "SQLite (WAL, synchronous=FULL)";
        if (store == "postgresql") {
          if (!pg) {
            tessera::testing::PgServer::Options o;
            o.fsync = true;  // durable, as in production
            auto s = tessera::testing::PgServer::Start(o);
            if (!s.ok()) {
              std::fprintf(stderr, "postgresql: %s\n", s.status().ToString().c_str());
              return 1;
            }
            pg = std::move(*s);
          }
          auto url = pg->CreateUniqueDatabase("bench");
          args.push_back("--store");
          args.push_back(*url);
          what = "PostgreSQL " + pg->version() + " (local, fsync on)";
        }
        tessera::testing::Proc server(args, dir + "/serve.log");
        const int port = server.WaitForPort();
        if (port <= 0) {
          std::fprintf(stderr, "server did not start:\n%s\n", server.Log().c_str());
          return 1;
        }
        {
          httplib::Client admin("127.0.0.1", port);
          Json reg = {{"node", "n1"},
                      {"cpu_milli", 64000},
                      {"memory_mib", 262144},
                      {"devices", {{{"index", 0}, {"model", "H100-80GB"}, {"memory_mib", 81920}}}}};
          for (int i = 0; i < 100 && !admin.Post("/v1/agent/register",
                                                 {{"Authorization", "Bearer admin-token-1"}},
                                                 reg.dump(), "application/json");
               ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
          }
        }
        std::vector<std::vector<double>> lat(clients);
        std::atomic<int> next{0}, failed{0};
        const std::string body = R"({"queue":"notebooks","command":["true"],"gpu_memory":"8GiB"})";
        auto start = std::chrono::steady_clock::now();
        std::vector<std::thread> threads;
        for (int t = 0; t < clients; ++t) {
          threads.emplace_back([&, t] {
            httplib::Client cl("127.0.0.1", port);
            cl.set_keep_alive(true);
            cl.set_tcp_nodelay(true);
            httplib::Headers h = {{"Authorization", "Bearer alice-token-1"}};
            for (int n; (n = next.fetch_add(1)) < jobs;) {
              if (keyed)
                h.erase("Idempotency-Key"),
                    h.emplace("Idempotency-Key",
                              "bench-" + std::to_string(t) + "-" + std::to_string(n));
              auto t0 = std::chrono::steady_clock::now();
              auto r = cl.Post("/v1/jobs", h, body, "application/json");
              auto t1 = std::chrono::steady_clock::now();
              if (!r || r->status != 201) ++failed;
              lat[t].push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
            }
          });
        }
        for (auto& th : threads) th.join();
        const double secs =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::vector<double> all;
        for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
        std::sort(all.begin(), all.end());
        auto pct = [&](double p) {
          return all[static_cast<size_t>(p * static_cast<double>(all.size() - 1))];
        };
        std::printf(
            "  %-38s %s %d client(s): %7.0f submissions/s  p50 %6.2f ms  p99 %6.2f ms  max %7.2f "
            "ms  (%d failed)\n",
            what.c_str(), keyed ? "keyed  " : "unkeyed", clients, jobs / secs, pct(0.5), pct(0.99),
            all.back(), failed.load());
        std::fflush(stdout);
        server.Kill(SIGTERM);
        std::filesystem::remove_all(dir);
      }
    }
  }
  return 0;
}
