// The config of named backends and of queues over several (issue 39): what a queue's
// `backends:` becomes, and errors that name the field.
#include <gtest/gtest.h>

#include "api/config.h"

namespace tessera::api {
namespace {

const char* kHead = R"(identities: [{name: a, token: aaaaaaaaaa}]
groups: [{name: g}]
profiles: [{name: p, forms: [whole]}]
)";

Result<EngineConfig> Parse(const std::string& rest) { return ParseConfig(kHead + rest); }

TEST(MultiBackendConfig, AQueueListsNamedBackendsInOrderAndEachIsAPoolOfItsOwn) {
  auto c = Parse(R"(kubernetes: {namespace: ml}
backends:
  kube-a: {type: kubernetes, kubeconfig: /etc/a.kubeconfig, context: prod}
  kube-b: {type: kubernetes, kubeconfig: /etc/b.kubeconfig}
  hpc: {type: slurm}
queues:
  - {name: q, profile: p, groups: [g], backends: [kube-a, kube-b, hpc], partition: debug, node_selector: {pool: a100}}
  - {name: one, profile: p, groups: [g], backend: kube-b}
  - {name: old, profile: p, groups: [g], backend: slurm}
)");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const QueueRoute& q = c->routes[0];
  EXPECT_EQ(q.backends, (std::vector<std::string>{"kube-a", "kube-b", "hpc"}));
  EXPECT_EQ(q.backend_types, (std::vector<std::string>{"kubernetes", "kubernetes", "slurm"}));
  EXPECT_TRUE(q.multi());
  EXPECT_EQ(q.backend, "kube-a");
  EXPECT_EQ(q.partition, "debug");
  EXPECT_EQ(q.kube.node_selector.at("pool"), "a100");
  EXPECT_EQ(c->policy.queues[0].external_pools, q.backends);
  // One named Kubernetes backend: a pool of its own name; Slurm: unbounded, as before.
  EXPECT_EQ(c->policy.queues[1].external_pool, "kube-b");
  EXPECT_FALSE(c->routes[1].multi());
  EXPECT_EQ(c->policy.queues[2].external_pool, "");
  const NamedBackend* a = c->FindBackend("kube-a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->kube.kubeconfig, "/etc/a.kubeconfig");
  EXPECT_EQ(a->kube.context, "prod");
  EXPECT_EQ(a->kube.ns, "ml") << "what it leaves out, the top-level kubernetes: gives";
  EXPECT_EQ(c->TypeOf("hpc"), "slurm");
  EXPECT_EQ(c->TypeOf("pbs"), "pbs");
}

TEST(MultiBackendConfig, ErrorsNameTheField) {
  const std::string b = "backends: {kube-a: {type: kubernetes}, hpc: {type: slurm}}\n";
  const std::string q = "queues: [{name: q, profile: p, groups: [g], ";
  const std::pair<std::string, std::string> cases[] = {
      {b + q + "backends: [kube-a, kube-c]}]",
       "queues[q].backends: unknown backend 'kube-c' (local, kubernetes, pbs, slurm, kube-a, "
       "hpc)"},
      {b + q + "backends: [kube-a, local]}]", "queues[q].backends: 'local' (node agents)"},
      {b + q + "backends: [hpc, hpc]}]", "queues[q].backends: 'hpc' is listed twice"},
      {b + q + "backends: []}]", "queues[q].backends: expected a list of backend names"},
      {b + q + "backends: hpc}]", "queues[q].backends: expected a list of backend names"},
      {b + q + "backend: hpc, backends: [hpc]}]", "queues[q].backends: a queue has backend:"},
      {b + q + "backend: kube-c}]", "queues[q].backend: unknown backend 'kube-c'"},
      {"backends: {kube-a: {kubeconfig: x}}\n" + q + "}]", "backends.kube-a.type: missing"},
      {"backends: {kube-a: {type: k8s}}\n" + q + "}]",
       "backends.kube-a.type: unknown backend type 'k8s'"},
      {"backends: {slurm: {type: kubernetes}}\n" + q + "}]",
       "backends.slurm.type: 'slurm' is the built-in slurm backend's name"},
      {"backends: {hpc: {type: slurm, kubeconfig: x}}\n" + q + "}]",
       "backends.hpc.kubeconfig: only for type: kubernetes"},
      {"backends: {Kube_A: {type: slurm}}\n" + q + "}]", "backends.Kube_A: a backend's name"},
      {"backends: {local: {type: slurm}}\n" + q + "}]", "backends.local: 'local' is Tessera's"},
      {"backends: {kube-a: {type: kubernetes, zone: x}}\n" + q + "}]", "zone"},
      {"backends: [kube-a]\n" + q + "}]", "backends: expected a map"},
      {b + q + "backends: [hpc], namespace: ml}]",
       "queues[q].namespace: only for a queue with backend: kubernetes"},
  };
  for (const auto& [yaml, want] : cases) {
    auto c = Parse(yaml);
    ASSERT_FALSE(c.ok()) << yaml;
    EXPECT_NE(c.status().message().find(want), std::string::npos)
        << yaml << "\n  said: " << c.status().message() << "\n  want: " << want;
  }
}

}  // namespace
}  // namespace tessera::api
