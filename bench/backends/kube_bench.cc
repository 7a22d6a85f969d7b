// The Kubernetes backend against the stand-in API server (tests/backends/kube; Python, one
// process, TLS with a bearer token, as Tessera talks to a real API server): how fast Tessera
// creates suspended Jobs, how long a relist of all of them takes (chunks of 500, as the
// followers list after a 410), and admissions per second (each one a GET for the
// resourceVersion and a merge patch unsuspending the Job) while 10,000 Jobs are pending.
//
//   build/bench/backends/backends_kube_bench [--jobs 10000] [--admit 1000]
//
// The pods of admitted Jobs ask for a node pool that does not exist, so they stay Pending
// (unschedulable): the figures are the API traffic, not running containers.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include "../../tests/backends/kubernetes/kube_standin.h"
#include "backends/backend.h"
#include "backends/kubernetes/client.h"
#include "backends/kubernetes/manifest.h"

using namespace tessera;
using Clock = std::chrono::steady_clock;

static double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

int main(int argc, char** argv) {
  int jobs = 10000, admit = 1000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--jobs")) jobs = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--admit")) admit = std::atoi(argv[i + 1]);
  }
  admit = std::min(admit, jobs);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("kube-bench-" + std::to_string(::getpid())))
          .string();
  std::filesystem::remove_all(dir);
  tessera::testing::KubeStandIn k(dir, false, tessera::testing::KubeStandIn::kNodes);
  if (!k.error().empty()) return std::fprintf(stderr, "%s\n", k.error().c_str()), 1;
  auto conn = backends::kube::LoadKubeconfig({k.kubeconfig()});
  if (!conn.ok()) return std::fprintf(stderr, "%s\n", conn.status().message().c_str()), 1;
  auto client = backends::kube::Client::Make(*conn);
  if (!client.ok()) return std::fprintf(stderr, "%s\n", client.status().message().c_str()), 1;

  std::printf(
      "stand-in API server: Python %s, TLS, bearer token; %d Jobs, %d admissions; %u CPUs\n",
      "3 (tests/backends/kube)", jobs, admit, std::thread::hardware_concurrency());
  // 1. Create the pending (suspended) Jobs, one POST each, as Submit does before admission.
  auto t = Clock::now();
  for (int i = 0; i < jobs; ++i) {
    backends::JobRequest r;
    r.id = "j-" + std::to_string(i);
    r.name = "tessera-lab-" + r.id;
    r.command = {"sleep", "60"};
    r.form = "whole";
    r.gpus = 1;
    auto m = backends::kube::RenderJob(r, "lab", "ml");
    auto res = (*client)->Call("POST", "/apis/batch/v1/namespaces/ml/jobs", m->dump());
    if (!res.ok() || res->status != 201) {
      std::fprintf(stderr, "create %d: %s\n", i,
                   res.ok() ? res->body.c_str() : res.status().message().c_str());
      return 1;
    }
  }
  const double create_s = Since(t);
  std::printf("create %d suspended Jobs: %.2f s (%.0f Jobs/s)\n", jobs, create_s, jobs / create_s);

  // 2. A relist: a fresh backend's first Poll lists every labelled Job and pod, in chunks.
  backends::BackendOptions o;
  o.cluster = "lab";
  o.kube.kubeconfig = k.kubeconfig();
  t = Clock::now();
  auto b = backends::MakeKubernetesBackend(o);
  auto polled = b->Poll({"ml/tessera-lab-j-0"});
  const double relist_s = Since(t);
  if (!polled.ok() || polled->size() != 1) return std::fprintf(stderr, "poll failed\n"), 1;
  auto listed = b->List("tessera-lab-");
  std::printf("relist of %zu Jobs (limit 500 per page): %.2f s\n", listed.ok() ? listed->size() : 0,
              relist_s);

  // 3. Admissions while the rest wait: Resume = GET + merge patch carrying resourceVersion.
  backends::JobRequest r;
  r.form = "whole";
  r.gpus = 1;
  r.mapping.kube.node_selector = {{"pool", "does-not-exist"}};
  t = Clock::now();
  for (int i = 0; i < admit; ++i) {
    Status st = b->Resume("ml/tessera-lab-j-" + std::to_string(i), r);
    if (!st.ok()) return std::fprintf(stderr, "resume %d: %s\n", i, st.message().c_str()), 1;
  }
  const double admit_s = Since(t);
  std::printf("admit %d of %d pending Jobs: %.2f s (%.0f admissions/s, %.2f ms each)\n", admit,
              jobs, admit_s, admit / admit_s, 1000.0 * admit_s / admit);
  b.reset();
  k.Stop();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return 0;
}
