// Durable submissions per second into a real local Slurm: through Tessera's API (a `tessera serve`
// whose queue has `backend: slurm`; each POST is acknowledged once committed to SQLite, and the
// engine then submits it with sbatch in the background) versus `sbatch` straight into the same
// Slurm, each with 1 and 4 concurrent submitters, all jobs held on both sides. Starts Slurm itself
// (tests/backends/slurm_up.sh, as root) and tears it down after. Prints both rates, and how long
// Tessera took to hand every accepted job to Slurm.
//
//   backends_slurm_bench [--jobs 2000] [--clients 1,4]
#include <httplib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "backends/backend.h"
#include "proc.h"

namespace {

using Json = nlohmann::json;
const std::string kScripts = TESSERA_SOURCE_DIR "/tests/backends";

const char* kConfig = R"(
cluster: bench
backend_poll: 500ms
identities:
  - {name: alice, role: user, groups: [research], token: alice-token-1}
groups: [{name: research}]
profiles: [{name: cpu, gpus: 0, cpu: 1, memory: 16MiB, forms: [whole]}]
queues: [{name: hpc, profile: cpu, groups: [research], backend: slurm, partition: debug, template: TEMPLATE}]
)";

// The shipped template (examples/slurm/job.sbatch) plus `--hold`: both sides submit held jobs, so
// neither measurement competes with jobs running on the same machine.
std::string HeldTemplate() {
  std::ifstream in(TESSERA_SOURCE_DIR "/examples/slurm/job.sbatch");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  const std::string name_line = "#SBATCH --job-name={{job_name}}\n";
  const size_t at = text.find(name_line);
  if (at == std::string::npos) return "";
  return text.insert(at + name_line.size(), "#SBATCH --hold\n");
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Waits until Slurm has no jobs left (after a scancel, slurmctld keeps working for a while).
void WaitForEmptyQueue() {
  for (int k = 0; k < 600; ++k) {
    auto r = tessera::backends::RunCommand({"squeue", "-h", "-o", "%i"}, "", 30000);
    if (r.exit_code == 0 && r.out.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));
}

// Runs `fn(i)` for i in [0, jobs) on `clients` threads; returns the seconds taken.
template <typename F>
double Parallel(int jobs, int clients, F fn) {
  std::atomic<int> next{0};
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < clients; ++t) {
    threads.emplace_back([&, t] {
      int i;
      while ((i = next.fetch_add(1)) < jobs) fn(t, i);
    });
  }
  for (auto& th : threads) th.join();
  return Seconds(start);
}

}  // namespace

int main(int argc, char** argv) {
  int jobs = 2000;
  std::vector<int> clients_list = {1, 4};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--jobs")) jobs = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--clients")) {
      clients_list.clear();
      std::stringstream ss(argv[i + 1]);
      std::string c;
      while (std::getline(ss, c, ',')) clients_list.push_back(std::atoi(c.c_str()));
    }
  }
  if (geteuid() != 0) {
    std::fprintf(stderr, "needs root (starts slurmctld/slurmd)\n");
    return 1;
  }
  const std::string dir = "/tmp/tessera-slurm-bench-" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string slurm = dir + "/slurm";
  if (std::system(("bash " + kScripts + "/slurm_up.sh " + slurm).c_str()) != 0) {
    std::fprintf(stderr, "slurm did not start\n");
    return 1;
  }
  setenv("SLURM_CONF", (slurm + "/slurm.conf").c_str(), 1);
  auto down = [&] { (void)std::system(("bash " + kScripts + "/slurm_down.sh " + slurm).c_str()); };
  std::printf(
      "durable submissions/s into a local Slurm 22.05 (1 node, %u cores): %d held jobs per run\n",
      std::thread::hardware_concurrency(), jobs);
  int rc = 0;
  for (int clients : clients_list) {
    // sbatch straight into Slurm (held jobs, so running them does not compete with submission).
    std::atomic<int> failed{0};
    const std::string script = "#!/bin/sh\ntrue\n";
    double secs = Parallel(jobs, clients, [&](int, int) {
      auto r = tessera::backends::RunCommand(
          {"sbatch", "--parsable", "-H", "-J", "bench-direct", "-o", "/dev/null"}, script, 30000);
      if (r.exit_code != 0) ++failed;
    });
    const double sbatch_rate = jobs / secs;
    std::printf("  sbatch            %d submitter(s): %7.0f submissions/s  (%d failed)\n", clients,
                sbatch_rate, failed.load());
    std::fflush(stdout);
    (void)std::system("scancel --name=bench-direct >/dev/null 2>&1");
    WaitForEmptyQueue();

    // Through Tessera's API.
    const std::string tdir = dir + "/tessera-" + std::to_string(clients);
    std::filesystem::create_directories(tdir);
    const std::string held = HeldTemplate();
    if (held.empty()) {
      std::fprintf(stderr, "examples/slurm/job.sbatch has no job-name line to add --hold after\n");
      rc = 1;
      break;
    }
    std::ofstream(tdir + "/held.sbatch") << held;
    std::string config = kConfig;
    config.replace(config.find("TEMPLATE"), 8, tdir + "/held.sbatch");
    std::ofstream(tdir + "/config.yaml") << config;
    tessera::testing::Proc server(
        {tessera::testing::kTessera, "serve", "--config", tdir + "/config.yaml", "--data",
         tdir + "/data", "--listen", "127.0.0.1:0"},
        tdir + "/serve.log");
    const int port = server.WaitForPort();
    if (port <= 0) {
      std::fprintf(stderr, "server did not start:\n%s\n", server.Log().c_str());
      rc = 1;
      break;
    }
    failed = 0;
    std::vector<std::unique_ptr<httplib::Client>> cls;
    for (int t = 0; t < clients; ++t) {
      cls.push_back(std::make_unique<httplib::Client>("127.0.0.1", port));
      cls.back()->set_keep_alive(true);
      cls.back()->set_tcp_nodelay(true);
    }
    const httplib::Headers h = {{"Authorization", "Bearer alice-token-1"}};
    const std::string body = R"({"queue":"hpc","command":["true"]})";
    auto start = std::chrono::steady_clock::now();
    secs = Parallel(jobs, clients, [&](int t, int) {
      auto r = cls[t]->Post("/v1/jobs", h, body, "application/json");
      if (!r || r->status != 201) ++failed;
    });
    const double ratio = (jobs / secs) / sbatch_rate;
    std::printf(
        "  Tessera API       %d submitter(s): %7.0f submissions/s  (%d failed; %.1fx sbatch's "
        "rate: target 5x %s)\n",
        clients, jobs / secs, failed.load(), ratio,
        ratio >= 5.0 && failed.load() == 0 ? "met" : "NOT met");
    // How long until every accepted job had been handed to Slurm.
    httplib::Client probe("127.0.0.1", port);
    double drained = -1;
    for (int k = 0; k < 1200; ++k) {
      auto r = probe.Get("/v1/jobs?state=placed&limit=1", h);
      auto p = probe.Get("/v1/jobs?state=pending&limit=1", h);
      if (r && p && Json::parse(r->body)["jobs"].empty() && Json::parse(p->body)["jobs"].empty()) {
        drained = Seconds(start);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::printf("                    all %d handed to Slurm by sbatch after %.1f s\n", jobs,
                drained);
    std::fflush(stdout);
    server.Kill(SIGTERM);
    (void)std::system("scancel -u root >/dev/null 2>&1");
    WaitForEmptyQueue();
  }
  down();
  std::filesystem::remove_all(dir);
  return rc;
}
