// Unit tests of the Kubernetes backend's pure parts: kubeconfig merging, manifests per form,
// Job/pod status read back, and the config of kubernetes queues.
#include <gtest/gtest.h>
#include <pwd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "api/config.h"
#include "backends/kubernetes/connection.h"
#include "backends/kubernetes/manifest.h"
#include "kube_requests.h"

namespace tessera::backends::kube {
namespace {

namespace fs = std::filesystem;

class Kubeconfig : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kubecfg-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_ / "sub");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& rel, const std::string& text) {
    std::ofstream(dir_ / rel) << text;
    return (dir_ / rel).string();
  }
  fs::path dir_;
};

TEST_F(Kubeconfig, TheFirstFileToSetANameOrTheCurrentContextWins) {
  Write("sub/ca.pem", "CA-FROM-FILE");
  Write("sub/token", "tok-from-file\n");
  const std::string a = Write("a.yaml", R"(
current-context: dev
contexts:
  - {name: dev, context: {cluster: c1, user: u1, namespace: ml}}
clusters:
  - {name: c1, cluster: {server: "https://k8s.example:6443/", certificate-authority: sub/ca.pem, tls-server-name: api.internal}}
users:
  - {name: u1, user: {tokenFile: sub/token}}
)");
  const std::string b = Write("b.yaml", R"(
current-context: prod
contexts:
  - {name: dev, context: {cluster: other, user: other}}
  - {name: prod, context: {cluster: c2, user: u2}}
clusters:
  - {name: c1, cluster: {server: "https://ignored:1"}}
  - {name: c2, cluster: {server: "https://prod:443", insecure-skip-tls-verify: true}}
users:
  - {name: u2, user: {token: abc, client-certificate-data: Q0VSVA==, client-key-data: S0VZ}}
)");
  auto c = LoadKubeconfig({a, b});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->server, "https://k8s.example:6443");  // a's c1, trailing '/' dropped
  EXPECT_EQ(c->ca_pem, "CA-FROM-FILE");              // relative to a.yaml's directory
  EXPECT_EQ(c->tls_server_name, "api.internal");
  EXPECT_EQ(c->token_file, (dir_ / "sub/token").string());
  EXPECT_EQ(c->ns, "ml");
  // b first: its current-context (prod) wins, and its entries.
  auto p = LoadKubeconfig({b, a});
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->server, "https://prod:443");
  EXPECT_TRUE(p->insecure);
  EXPECT_EQ(p->token, "abc");
  EXPECT_EQ(p->client_cert_pem, "CERT");
  EXPECT_EQ(p->client_key_pem, "KEY");
  // An explicit context.
  auto d = LoadKubeconfig({b, a}, "dev");
  EXPECT_FALSE(d.ok());  // b's dev names cluster "other", which no file defines
  EXPECT_NE(d.status().message().find("cluster 'other'"), std::string::npos)
      << d.status().message();
  // A missing file of a list is skipped, as kubectl does; a single named file must exist.
  EXPECT_TRUE(LoadKubeconfig({(dir_ / "missing").string(), a}).ok());
  EXPECT_FALSE(LoadKubeconfig({(dir_ / "missing").string()}).ok());
}

TEST_F(Kubeconfig, BrokenFilesAreRefusedNamingWhatIsWrong) {
  auto msg = [&](const std::string& text, const std::string& ctx = "") {
    auto c = LoadKubeconfig({Write("k.yaml", text)}, ctx);
    return c.ok() ? std::string("ok") : c.status().message();
  };
  EXPECT_NE(msg("{{{").find("not valid YAML"), std::string::npos);
  EXPECT_NE(msg("clusters: []").find("no current-context"), std::string::npos);
  EXPECT_NE(msg("current-context: x").find("no context 'x'"), std::string::npos);
  EXPECT_NE(msg("current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\nclusters: "
                "[{name: c, cluster: {}}]")
                .find("clusters[c].server: not set"),
            std::string::npos);
  EXPECT_NE(msg("current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\nclusters: "
                "[{name: c, cluster: {server: ftp://a}}]")
                .find("not an http(s) URL"),
            std::string::npos);
  EXPECT_NE(msg("current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
                "clusters: [{name: c, cluster: {server: 'https://a', certificate-authority-data: "
                "'***'}}]")
                .find("certificate-authority-data: not valid base64"),
            std::string::npos);
  EXPECT_NE(msg("current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
                "clusters: [{name: c, cluster: {server: 'https://a'}}]\nusers: [{name: u, user: "
                "{client-certificate-data: Q0VSVA==}}]")
                .find("needs its key"),
            std::string::npos);
  EXPECT_NE(msg("current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
                "clusters: [{name: c, cluster: {server: 'https://a'}}]\nusers: [{name: u, user: "
                "{exec: {command: x}}}]")
                .find("exec and auth-provider"),
            std::string::npos);
}

TEST_F(Kubeconfig, InClusterReadsTheServiceAccountFiles) {
  Write("sub/token", "sa-token");
  Write("sub/ca.crt", "SA-CA");
  Write("sub/namespace", "team-a");
  ::unsetenv("KUBERNETES_SERVICE_HOST");
  EXPECT_FALSE(LoadInCluster((dir_ / "sub").string()).ok());
  ::setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1", 1);
  ::setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  auto c = LoadInCluster((dir_ / "sub").string());
  ::unsetenv("KUBERNETES_SERVICE_HOST");
  ::unsetenv("KUBERNETES_SERVICE_PORT");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->server, "https://10.0.0.1:443");
  EXPECT_EQ(c->ca_pem, "SA-CA");
  EXPECT_EQ(c->ns, "team-a");
  EXPECT_EQ(c->token_file, (dir_ / "sub/token").string());
}

TEST(Base64, DecodesWithAndWithoutPaddingAndRefusesOtherText) {
  EXPECT_EQ(*DecodeBase64("aGVsbG8="), "hello");
  EXPECT_EQ(*DecodeBase64("aGVsbG8"), "hello");
  EXPECT_EQ(*DecodeBase64("aGVs\nbG8h"), "hello!");
  EXPECT_FALSE(DecodeBase64("aGV$").ok());
  EXPECT_FALSE(DecodeBase64("a").ok());
}

TEST(Manifest, EachFormAsksForItsDevicePluginResources) {
  JobRequest whole = Req("whole", 2);
  auto r = ResourcesFor(whole);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)["nvidia.com/gpu"], "2");
  EXPECT_EQ((*r)["cpu"], "4000m");
  EXPECT_EQ((*r)["memory"], "16384Mi");
  whole.mapping.kube.vendor = "amd";
  EXPECT_EQ((*ResourcesFor(whole))["amd.com/gpu"], "2");

  JobRequest mig = Req("partition");
  mig.mig_profile = "1g.10gb";
  EXPECT_EQ((*ResourcesFor(mig))["nvidia.com/mig-1g.10gb"], "1");
  mig.mapping.kube.mig_strategy = "single";
  mig.mapping.kube.mig_product = "A100-SXM4-80GB-MIG-{profile}";
  EXPECT_EQ((*ResourcesFor(mig))["nvidia.com/gpu"], "1");
  EXPECT_EQ((*SchedulingFor(mig))["nodeSelector"]["nvidia.com/gpu.product"],
            "A100-SXM4-80GB-MIG-1g.10gb");
  mig.mig_profile.clear();
  mig.mapping.kube.mig_strategy = "mixed";
  EXPECT_FALSE(ResourcesFor(mig).ok());

  JobRequest amd = Req("partition");
  amd.mapping.kube.vendor = "amd";
  EXPECT_FALSE(ResourcesFor(amd).ok());
  amd.mapping.kube.amd_partition = "cpx_nps4";
  EXPECT_EQ((*ResourcesFor(amd))["amd.com/cpx_nps4"], "1");

  JobRequest share = Req("share");
  share.gpu_memory_mib = 10240;
  share.gpu_milli = 250;
  auto s = ResourcesFor(share);
  EXPECT_EQ((*s)["nvidia.com/gpu"], "1");
  EXPECT_EQ((*s)["nvidia.com/gpumem"], "10240");
  EXPECT_EQ((*s)["nvidia.com/gpucores"], "25");
  share.mapping.kube.share_mode = "timeslice";
  s = ResourcesFor(share);
  EXPECT_FALSE(s->contains("nvidia.com/gpumem"));
  share.mapping.kube.resources = {{"whole", "example.com/vgpu"}};
  EXPECT_EQ((*ResourcesFor(share))["example.com/vgpu"], "1");
}

TEST(Manifest, TheJobIsSuspendedLabelledAndCarriesValuesAsData) {
  JobRequest r = Req("share");
  r.gpu_memory_mib = 2048;
  r.mapping.kube.share_mode = "timeslice";
  r.mapping.cap_library = "/usr/lib/tessera/libtessera_capgpu.so";
  r.mapping.kube.priority_class = "batch";
  r.mapping.kube.image = "python:3.12";
  auto m = RenderJob(r, "lab", "ml");
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ((*m)["metadata"]["name"], "tessera-lab-j-7");
  EXPECT_EQ((*m)["metadata"]["namespace"], "ml");
  EXPECT_EQ((*m)["metadata"]["labels"]["tessera.io/job"], "j-7");
  EXPECT_EQ((*m)["metadata"]["labels"]["tessera.io/cluster"], "lab");
  EXPECT_EQ((*m)["spec"]["template"]["metadata"]["labels"]["tessera.io/cluster"], "lab");
  EXPECT_EQ((*m)["spec"]["suspend"], true);
  EXPECT_EQ((*m)["spec"]["backoffLimit"], 0);
  EXPECT_FALSE((*m)["spec"].contains("activeDeadlineSeconds"));  // no walltime declared
  r.walltime_s = 7200;  // the Job's deadline, counted again from each resume
  EXPECT_EQ((*RenderJob(r, "lab", "ml"))["spec"]["activeDeadlineSeconds"], 7200);
  const auto& pod = (*m)["spec"]["template"]["spec"];
  EXPECT_EQ(pod["restartPolicy"], "Never");
  EXPECT_EQ(pod["priorityClassName"], "batch");
  const auto& c = pod["containers"][0];
  EXPECT_EQ(c["image"], "python:3.12");
  EXPECT_EQ(c["command"][3], "0.1; rm -rf /");  // an argument stays one argument
  bool preload = false, limit = false, b = false;
  for (const auto& e : c["env"]) {
    preload |= e["name"] == "LD_PRELOAD" && e["value"] == "/usr/lib/tessera/libtessera_capgpu.so";
    limit |= e["name"] == "TESSERA_GPU_MEMORY_LIMIT" && e["value"] == "2147483648";
    b |= e["name"] == "B" && e["value"] == "$(danger)";
  }
  EXPECT_TRUE(preload && limit && b);
  EXPECT_EQ(c["resources"]["limits"]["nvidia.com/gpu"], "1");
  EXPECT_EQ(c["resources"]["requests"], c["resources"]["limits"]);
}

TEST(Manifest, TemplatesAreCheckedAndKeepTheirOwnFields) {
  const std::string path =
      (fs::temp_directory_path() / ("tmpl-" + std::to_string(::getpid()) + ".yaml")).string();
  std::ofstream(path)
      << "apiVersion: batch/v1\nkind: Job\nmetadata: {name: x, labels: {team: ml}}\n"
         "spec:\n  activeDeadlineSeconds: 3600\n  template:\n    spec:\n      serviceAccountName: "
         "runner\n"
         "      containers: [{name: main, image: 'busybox:1.36', args: [a]}]\n";
  JobRequest r = Req("whole");
  r.mapping.template_path = path;
  auto m = RenderJob(r, "lab", "default");
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ((*m)["spec"]["activeDeadlineSeconds"], 3600);
  for (const auto& [walltime, deadline] : {std::pair{7200, 3600}, std::pair{600, 600}}) {
    r.walltime_s = walltime;  // the shorter of the job's walltime and the template's deadline
    EXPECT_EQ((*RenderJob(r, "lab", "default"))["spec"]["activeDeadlineSeconds"], deadline);
  }
  r.walltime_s = 0;
  EXPECT_EQ((*m)["metadata"]["labels"]["team"], "ml");
  EXPECT_EQ((*m)["spec"]["template"]["spec"]["serviceAccountName"], "runner");
  EXPECT_FALSE((*m)["spec"]["template"]["spec"]["containers"][0].contains("args"));
  std::ofstream(path) << "apiVersion: v1\nkind: Pod\n";
  EXPECT_NE(RenderJob(r, "lab", "default").status().message().find("expected a batch/v1 Job"),
            std::string::npos);
  std::ofstream(path)
      << "apiVersion: batch/v1\nkind: Job\nspec: {template: {spec: {containers: []}}}\n";
  EXPECT_NE(RenderJob(r, "lab", "default").status().message().find("needs a container"),
            std::string::npos);
  fs::remove(path);
  r.mapping.template_path = "/nonexistent/job.yaml";
  EXPECT_NE(RenderJob(r, "lab", "default").status().message().find("cannot read"),
            std::string::npos);
}

// A job's container runs as its account, never as root by default (as on a node agent): the
// account's uid and groups where the server's host knows it, else the image's own non-root user;
// a template's uid does not override it. A run_as_root queue's job (run_as "root") is left as
// the image says.
TEST(Manifest, APodRunsAsTheJobsAccountAndNeverAsRootByDefault) {
  const std::string path =
      (fs::temp_directory_path() / ("root-" + std::to_string(::getpid()) + ".yaml")).string();
  std::ofstream(path) << "apiVersion: batch/v1\nkind: Job\nspec:\n  template:\n    spec:\n"
                         "      containers: [{name: main, image: 'busybox:1.36',"
                         " securityContext: {runAsUser: 0, readOnlyRootFilesystem: true}}]\n";
  const passwd* nobody = getpwnam("nobody");
  ASSERT_NE(nobody, nullptr);
  const int64_t uid = nobody->pw_uid, gid = nobody->pw_gid;
  for (const bool from_template : {false, true}) {
    JobRequest r = Req("whole");
    if (from_template) r.mapping.template_path = path;
    r.run_as = "nobody";
    auto m = RenderJob(r, "lab", "default");
    ASSERT_TRUE(m.ok()) << m.status().message();
    const Json& sc = (*m)["spec"]["template"]["spec"]["containers"][0]["securityContext"];
    EXPECT_EQ(sc["runAsNonRoot"], true) << sc.dump();
    EXPECT_EQ(sc["runAsUser"], uid) << sc.dump();
    EXPECT_EQ(sc["runAsGroup"], gid) << sc.dump();
    if (from_template) {
      EXPECT_EQ(sc["readOnlyRootFilesystem"], true) << "the template's own kept";
    }
    r.run_as = "no-such-account-here";  // unknown here: the image's own user, never root
    const Json unknown =
        (*RenderJob(r, "lab", "default"))["spec"]["template"]["spec"]["containers"][0];
    EXPECT_EQ(unknown["securityContext"]["runAsNonRoot"], true) << unknown.dump();
    EXPECT_FALSE(unknown["securityContext"].contains("runAsUser")) << unknown.dump();
    r.run_as = "root";  // a run_as_root queue
    const Json root =
        (*RenderJob(r, "lab", "default"))["spec"]["template"]["spec"]["containers"][0];
    EXPECT_FALSE(root.value("securityContext", Json::object()).contains("runAsNonRoot"))
        << root.dump();
  }
  fs::remove(path);
}

Json Pod(const std::string& phase, const std::string& created, Json extra = Json::object()) {
  Json p = {{"metadata", {{"name", "p"}, {"creationTimestamp", created}}},
            {"spec", {{"nodeName", "n1"}}},
            {"status", {{"phase", phase}}}};
  p["status"].update(extra);
  return p;
}

TEST(ReadJob, StatesExitCodesAndReasonsComeFromTheJobAndItsNewestPod) {
  Json job = {{"metadata", {{"name", "tessera-lab-j-1"}, {"namespace", "ml"}}},
              {"spec", {{"suspend", false}}},
              {"status", {{"active", 1}}}};
  Json running = Pod("Running", "2026-12-01T10:00:02Z");
  Json old = Pod("Failed", "2026-12-01T10:00:01Z");
  ExternalJob x = ReadJob(job, {&old, &running});
  EXPECT_EQ(x.external_id, "ml/tessera-lab-j-1");
  // A pod being deleted (a suspended run's) loses to its successor made in the same second.
  Json stopping = Pod("Running", "2026-12-01T10:00:02Z");
  stopping["metadata"]["deletionTimestamp"] = "2026-12-01T10:00:02Z";
  stopping["spec"]["nodeName"] = "old-node";
  EXPECT_EQ(ReadJob(job, {&running, &stopping}).node, "n1");
  EXPECT_EQ(ReadJob(job, {&stopping, &running}).node, "n1");
  EXPECT_EQ(x.state, "running");
  EXPECT_EQ(x.node, "n1");

  Json unsched = Pod("Pending", "2026-12-01T10:00:03Z",
                     {{"conditions",
                       {{{"type", "PodScheduled"},
                         {"status", "False"},
                         {"reason", "Unschedulable"},
                         {"message", "0/3 nodes are available"}}}}});
  x = ReadJob(job, {&unsched});
  EXPECT_EQ(x.state, "pending");
  EXPECT_TRUE(x.unschedulable);
  EXPECT_NE(x.reason.find("0/3 nodes"), std::string::npos);
  // A container that cannot start says why. An image pull that backs off waits (the registry may
  // answer later); an image name that cannot be parsed never starts: failed, not pending for ever.
  auto waiting = [](const std::string& reason, const std::string& message) {
    return Pod("Pending", "2026-12-01T10:00:03Z",
               {{"containerStatuses",
                 {{{"state", {{"waiting", {{"reason", reason}, {"message", message}}}}}}}}});
  };
  Json backoff = waiting("ImagePullBackOff", "Back-off pulling image \"pyton:3.12\"");
  x = ReadJob(job, {&backoff});
  EXPECT_EQ(x.state, "pending");
  EXPECT_EQ(x.reason, "ImagePullBackOff: Back-off pulling image \"pyton:3.12\"");
  for (const char* never : {"InvalidImageName", "ErrImageNeverPull"}) {
    Json bad = waiting(never, "couldn't parse image name \"Python:3\"");
    x = ReadJob(job, {&bad});
    EXPECT_EQ(x.state, "failed") << never;
    EXPECT_EQ(x.reason, std::string(never) + ": couldn't parse image name \"Python:3\"");
  }

  job["status"] = {
      {"conditions",
       {{{"type", "Failed"}, {"status", "True"}, {"reason", "BackoffLimitExceeded"}}}}};
  Json oom = Pod("Failed", "2026-12-01T10:00:04Z",
                 {{"containerStatuses",
                   {{{"state", {{"terminated", {{"exitCode", 137}, {"reason", "OOMKilled"}}}}}}}}});
  x = ReadJob(job, {&oom});
  EXPECT_EQ(x.state, "failed");
  EXPECT_EQ(*x.exit_code, 137);
  EXPECT_EQ(x.reason, "OOMKilled");
  Json evicted = Pod("Failed", "2026-12-01T10:00:05Z", {{"reason", "Evicted"}});
  EXPECT_EQ(ReadJob(job, {&evicted}).reason, "Evicted");
  EXPECT_EQ(ReadJob(job, {}).reason, "BackoffLimitExceeded");

  EXPECT_EQ(x.run_s, -1);  // its container says neither when it started nor when it ended

  job["status"] = {{"conditions", {{{"type", "Complete"}, {"status", "True"}}}}};
  x = ReadJob(job, {});
  EXPECT_EQ(x.state, "succeeded");
  EXPECT_EQ(*x.exit_code, 0);
  EXPECT_EQ(x.run_s, -1);  // no pod: how long it ran is not known
  // How long its container ran: from startedAt to finishedAt (whole seconds, RFC 3339).
  Json done = Pod("Succeeded", "2026-12-01T10:00:06Z",
                  {{"containerStatuses",
                    {{{"state",
                       {{"terminated",
                         {{"exitCode", 0},
                          {"startedAt", "2026-12-01T10:00:07Z"},
                          {"finishedAt", "2026-12-01T10:01:12Z"}}}}}}}}});
  EXPECT_EQ(ReadJob(job, {&done}).run_s, 65);
  done["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"] = "soon";
  EXPECT_EQ(ReadJob(job, {&done}).run_s, -1);

  job["spec"]["suspend"] = true;
  job["status"] = {{"active", 1}};
  EXPECT_EQ(ReadJob(job, {&running}).state, "running");  // its pod is still stopping
  job["status"] = Json::object();
  x = ReadJob(job, {});
  EXPECT_EQ(x.state, "suspended");
  EXPECT_TRUE(x.suspended);
}

TEST(KubeConfig, KubernetesQueuesAreParsedAndBadKeysNamed) {
  const std::string head =
      "identities: [{name: a, role: admin, token: tok-12345678}]\ngroups: [{name: g, limit: {gpu: "
      "4}}]\n"
      "profiles: [{name: p, gpus: 1, gpu_memory: 10GiB, forms: [whole, share, partition]}]\n";
  auto c = api::ParseConfig(head + R"(kubernetes: {kubeconfig: /etc/k, context: prod, namespace: ml}
queues:
  - name: k
    profile: p
    groups: [g]
    backend: kubernetes
    namespace: team-a
    node_selector: {pool: a100}
    tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule, tolerationSeconds: 30}]
    mig_model: A100-80GB
    placement_timeout: 2m
    resources: {gpumem: example.com/mem}
)");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->kubernetes.context, "prod");
  const api::QueueRoute* q = c->FindRoute("k");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->kube.ns, "team-a");
  EXPECT_EQ(q->kube.node_selector.at("pool"), "a100");
  EXPECT_EQ(Json::parse(q->kube.tolerations_json)[0]["tolerationSeconds"], 30);
  EXPECT_EQ(q->kube.placement_timeout_ms, 120000);
  EXPECT_EQ(q->kube.resources.at("gpumem"), "example.com/mem");
  auto bad = [&](const std::string& queue_extra, const std::string& root_extra = "") {
    auto r =
        api::ParseConfig(head + root_extra + "queues:\n  - {name: k, profile: p, groups: [g], " +
                         queue_extra + "}\n");
    return r.ok() ? std::string("ok") : r.status().message();
  };
  EXPECT_NE(bad("backend: slurm, namespace: x")
                .find("queues[k].namespace: only for a queue with backend: kubernetes"),
            std::string::npos);
  EXPECT_NE(bad("backend: kubernetes, namespace: Bad_NS").find("not a Kubernetes namespace"),
            std::string::npos);
  EXPECT_NE(bad("backend: kubernetes, share_mode: vgpu")
                .find("share_mode: 'vgpu' is not one of hami, timeslice, mps"),
            std::string::npos);
  EXPECT_NE(
      bad("backend: kubernetes, tolerations: [{operator: Maybe}]").find("tolerations[0].operator"),
      std::string::npos);
  EXPECT_NE(
      bad("backend: kubernetes, mig_model: A100-80GB, mig_strategy: single").find("mig_product"),
      std::string::npos);
  EXPECT_NE(bad("backend: kubernetes, resources: {whole: gpu}").find("not a resource name"),
            std::string::npos);
  EXPECT_NE(bad("backend: kubernetes", "kubernetes: {in_cluster: true, kubeconfig: /x}\n")
                .find("exclude each other"),
            std::string::npos);
  EXPECT_NE(bad("backend: kubernetes", "kubernetes: {server: x}\n")
                .find("kubernetes: 'server' is not one of"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera::backends::kube

namespace tessera::backends::kube {
namespace {

// Every form under every mapping, written as JSON for the schema check (the CTest
// kube_manifests_schema runs this, then validates the files with kubernetes-models).
TEST(Manifest, EveryFormIsWrittenForTheSchemaCheck) {
  const fs::path dir = fs::path(TESSERA_BINARY_DIR) / "kube-manifests";
  fs::remove_all(dir);
  fs::create_directories(dir);
  struct Case {
    std::string name;
    JobRequest req;
  };
  std::vector<Case> cases;
  cases.push_back({"cpu-only", Req("", 0)});
  JobRequest whole = Req("whole", 4);
  whole.walltime_s = 3600;  // activeDeadlineSeconds
  cases.push_back({"whole-nvidia", whole});
  JobRequest amd = Req("whole", 2);
  amd.mapping.kube.vendor = "amd";
  cases.push_back({"whole-amd", amd});
  JobRequest mig = Req("partition");
  mig.mig_profile = "3g.40gb";
  cases.push_back({"mig-mixed", mig});
  mig.mapping.kube.mig_strategy = "single";
  mig.mapping.kube.mig_product = "A100-SXM4-80GB-MIG-{profile}";
  cases.push_back({"mig-single", mig});
  JobRequest part = Req("partition");
  part.mapping.kube.vendor = "amd";
  part.mapping.kube.amd_partition = "cpx_nps4";
  cases.push_back({"amd-partition", part});
  JobRequest share = Req("share");
  share.gpu_memory_mib = 8192;
  share.gpu_milli = 300;
  share.mapping.kube.priority_class = "interactive";
  cases.push_back({"share-hami", share});
  share.mapping.kube.share_mode = "timeslice";
  share.mapping.cap_library = "/usr/lib/tessera/libtessera_capgpu.so";
  cases.push_back({"share-timeslice", share});
  JobRequest tmpl = Req("whole", 1);
  tmpl.mapping.template_path = std::string(TESSERA_SOURCE_DIR) + "/examples/kubernetes/job.yaml";
  cases.push_back({"example-template", tmpl});
  // Dynamic Resource Allocation: the Job and its ResourceClaim, each validated.
  JobRequest dra = Req("whole", 2);
  dra.mapping.kube.devices = "dra";
  cases.push_back({"dra-whole", dra});
  dra = Req("partition");
  dra.mig_profile = "1g.10gb";
  dra.mapping.kube.devices = "dra";
  cases.push_back({"dra-mig", dra});
  dra.mapping.kube.vendor = "amd";
  dra.mapping.kube.amd_partition = "cpx_nps4";
  cases.push_back({"dra-amd-partition", dra});
  dra = Req("share");
  dra.gpu_memory_mib = 8192;
  dra.gpu_milli = 300;
  dra.mapping.kube.devices = "dra";
  dra.mapping.kube.share_mode = "mps";
  cases.push_back({"dra-share-mps", dra});
  dra.mapping.kube.share_mode = "timeslice";
  cases.push_back({"dra-share-timeslice", dra});
  size_t files = 0;
  for (const Case& c : cases) {
    auto m = RenderJob(c.req, "lab", "ml");
    ASSERT_TRUE(m.ok()) << c.name << ": " << m.status().message();
    // As the backend sends it at admission: the merge patch applied.
    auto sched = SchedulingFor(c.req);
    ASSERT_TRUE(sched.ok()) << c.name;
    (*m)["spec"]["suspend"] = false;
    (*m)["spec"]["template"]["spec"].update(*sched);
    std::ofstream(dir / (c.name + ".json")) << m->dump(2);
    ++files;
    auto claim = ClaimFor(c.req, "lab", "ml");
    ASSERT_TRUE(claim.ok()) << c.name << ": " << claim.status().message();
    EXPECT_EQ(claim->is_object(), c.name.rfind("dra-", 0) == 0) << c.name;
    if (claim->is_object()) {
      std::ofstream(dir / (c.name + "-claim.json")) << claim->dump(2);
      ++files;
    }
  }
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator{}),
            static_cast<long>(files));
}

}  // namespace
}  // namespace tessera::backends::kube

namespace tessera::backends::kube {
namespace {

TEST(KubeConfig, TheShippedExampleLoads) {
  const auto cwd = fs::current_path();
  fs::current_path(TESSERA_SOURCE_DIR);  // its template path is relative to the checkout
  auto c = api::LoadConfig("examples/kubernetes/tessera.yaml");
  fs::current_path(cwd);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->FindRoute("k8s-serve")->kube.ns, "serving");
  EXPECT_EQ(c->FindRoute("k8s-notebooks")->kube.share_mode, "timeslice");
  EXPECT_EQ(c->FindQueue("k8s-train")->external_pool, "kubernetes");
  EXPECT_EQ(c->FindQueue("local")->external_pool, "");
}

}  // namespace
}  // namespace tessera::backends::kube

namespace tessera::backends::kube {
namespace {

TEST(Manifest, TheTemplatesDirectivesAreKeptBesideThePools) {
  const std::string path =
      (fs::temp_directory_path() / ("tol-" + std::to_string(::getpid()) + ".yaml")).string();
  std::ofstream(path)
      << "apiVersion: batch/v1\nkind: Job\nspec:\n  template:\n    spec:\n"
         "      nodeSelector: {zone: a}\n"
         "      tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]\n"
         "      containers: [{name: c, image: 'busybox:1.36'}]\n";
  JobRequest r = Req("whole");
  r.mapping.template_path = path;
  r.mapping.kube.node_selector = {{"pool", "a100"}};
  r.mapping.kube.tolerations_json =
      R"([{"key":"dedicated","operator":"Equal","value":"ml","effect":"NoSchedule"}])";
  auto m = RenderJob(r, "lab", "ml");
  ASSERT_TRUE(m.ok()) << m.status().message();
  const Json& spec = (*m)["spec"]["template"]["spec"];
  EXPECT_EQ(spec["nodeSelector"], (Json{{"zone", "a"}, {"pool", "a100"}}));
  ASSERT_EQ(spec["tolerations"].size(), 2u);
  EXPECT_EQ(spec["tolerations"][0]["key"], "nvidia.com/gpu");
  EXPECT_EQ(spec["tolerations"][1]["value"], "ml");
  // A queue with no directives adds no empty ones (a merge patch would wipe the template's).
  r.mapping.kube = {};
  auto plain = SchedulingFor(r);
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->empty()) << plain->dump();
  // Templates of the wrong shape are errors, not exceptions.
  for (const std::string& bad :
       {std::string("apiVersion: batch/v1\nkind: Job\nmetadata: foo\nspec: {template: {spec: "
                    "{containers: [{name: c, image: x}]}}}\n"),
        std::string("apiVersion: batch/v1\nkind: Job\nspec: []\n"),
        std::string("apiVersion: batch/v1\nkind: Job\nspec: {template: []}\n"),
        std::string("apiVersion: batch/v1\nkind: Job\nspec: {template: {spec: {containers: [{name: "
                    "c, image: x, env: 3}]}}}\n")}) {
    std::ofstream(path) << bad;
    r.mapping.template_path = path;
    auto x = RenderJob(r, "lab", "ml");
    if (x.ok()) continue;  // metadata: foo is replaced, env: 3 is reset; no exception either way
    EXPECT_NE(x.status().message().find("manifest template"), std::string::npos)
        << x.status().message();
  }
  fs::remove(path);
}

TEST_F(Kubeconfig, EntriesOfTheWrongShapeAreErrors) {
  for (const std::string& text :
       {std::string("current-context: x\ncontexts: [{name: x, context: foo}]\n"),
        std::string("current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\nclusters: "
                    "[{name: c, cluster: [1, 2]}]\n"),
        std::string("current-context: [a]\n")}) {
    auto c = LoadKubeconfig({Write("k.yaml", text)});
    EXPECT_FALSE(c.ok()) << text;
  }
}

TEST(KubeConfig, TolerationValuesAreStringsAndTheClusterNameALabel) {
  const std::string head =
      "identities: [{name: a, role: admin, token: tok-12345678}]\ngroups: [{name: g}]\n"
      "profiles: [{name: p, gpus: 1}]\n";
  auto c = api::ParseConfig(head +
                            "queues:\n  - {name: k, profile: p, groups: [g], backend: kubernetes,"
                            " tolerations: [{key: gpu, operator: Equal, value: 8, effect: "
                            "NoSchedule, tolerationSeconds: 30}]}\n");
  ASSERT_TRUE(c.ok()) << c.status().message();
  Json t = Json::parse(c->FindRoute("k")->kube.tolerations_json)[0];
  EXPECT_EQ(t["value"], "8");
  EXPECT_EQ(t["tolerationSeconds"], 30);
  // Bytes that are not UTF-8 cannot go into a Kubernetes object: refused, naming the field (found
  // by fuzz/config: it threw while the config was read).
  auto latin1 =
      api::ParseConfig(head +
                       "queues:\n  - {name: k, profile: p, groups: [g], backend: kubernetes,"
                       " tolerations: [{key: gpu, value: caf\xe9}]}\n");
  ASSERT_FALSE(latin1.ok());
  EXPECT_NE(latin1.status().message().find("tolerations[0]"), std::string::npos)
      << latin1.status().message();
  EXPECT_NE(latin1.status().message().find("UTF-8"), std::string::npos)
      << latin1.status().message();
  auto selector =
      api::ParseConfig(head +
                       "queues:\n  - {name: k, profile: p, groups: [g], backend: kubernetes,"
                       " node_selector: {pool: \xff}}\n");
  ASSERT_FALSE(selector.ok());
  EXPECT_NE(selector.status().message().find("node_selector"), std::string::npos)
      << selector.status().message();
  auto bad =
      api::ParseConfig("cluster: 'my lab!'\n" + head +
                       "queues:\n  - {name: k, profile: p, groups: [g], backend: kubernetes}\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("cannot name Kubernetes objects"), std::string::npos)
      << bad.status().message();
}

}  // namespace
}  // namespace tessera::backends::kube
