// The config loader's shared field reads (src/api/config_fields.h): optional strings, booleans,
// durations and bounded counts, each error naming its field as before; the lookups by name.
#include <gtest/gtest.h>

#include "api/config.h"

namespace tessera::api {
namespace {

const char* kHead = R"(identities: [{name: a, token: aaaaaaaaaa}]
groups: [{name: g}]
profiles: [{name: p, forms: [whole]}]
)";
const char* kQueue = "queues: [{name: q, profile: p, groups: [g], ";

Result<EngineConfig> Parse(const std::string& rest) { return ParseConfig(kHead + rest); }

TEST(ConfigFields, ErrorsNameTheField) {
  const std::string q = kQueue;
  const std::string local = q + "}]\n";
  const std::pair<std::string, std::string> cases[] = {
      {local + "max_requests_per_identity: 0",
       "config: max_requests_per_identity: must be an integer from 1 to 100000"},
      {local + "max_jobs_per_identity: 100000001",
       "config: max_jobs_per_identity: must be an integer from 1 to 100000000"},
      {local + "ended_jobs_in_memory: many",
       "config: ended_jobs_in_memory: must be an integer from 1 to 10000000"},
      {local + "backend_nice: -1", "config: backend_nice: must be an integer from 0 to 19"},
      {local + "schedule_on_submit: maybe", "config: schedule_on_submit: expected true or false"},
      {local + "metrics_public: 1", "config: metrics_public: expected true or false"},
      {q + "requeue_on_loss: 2}]", "config: queues[q].requeue_on_loss: expected true or false"},
      {q + "backend: slurm, run_as_root: x}]",
       "config: queues[q].run_as_root: expected true or false"},
      // Refused on a local queue before its value is read, whatever the value.
      {q + "partition: [a, b]}]",
       "config: queues[q].partition: only for a queue with an external backend (slurm, pbs, "
       "kubernetes)"},
      {q + "backend: slurm, gpu_type: {a: b}}]", "config: queues[q].gpu_type: expected a string"},
      {q + "backend: kubernetes, image: [x]}]", "config: queues[q].image: expected a string"},
      {q + "backend: kubernetes, placement_timeout: soon}]",
       "config: queues[q].placement_timeout: 'soon' is not a duration"},
      {local + "kubernetes: {context: [a]}", "config: kubernetes.context: expected a string"},
      {local + "kubernetes: {in_cluster: perhaps}",
       "config: kubernetes.in_cluster: expected true or false"},
      {local + "kubernetes: {in_cluster: true, kubeconfig: /k}",
       "config: kubernetes: in_cluster and kubeconfig exclude each other"},
      {local + "backends: {hpc: {type: slurm, context: [a]}}",
       "config: backends.hpc.context: only for type: kubernetes"},
      {local + "backends: {hpc: {type: slurm, in_cluster: true}}",
       "config: backends.hpc.in_cluster: only for type: kubernetes"},
      {local + "backends: {k: {type: kubernetes, in_cluster: 3}}",
       "config: backends.k.in_cluster: expected true or false"},
      {local + "backends: {k: {type: kubernetes, kubeconfig: /k, in_cluster: true}}",
       "config: backends.k: in_cluster and kubeconfig exclude each other"},
      {local + "oidc: {issuer: '', client_id: c}", "config: oidc.issuer: must not be empty"},
      {local + "oidc: {issuer: https://idp, client_id: [c]}",
       "config: oidc.client_id: expected a string"},
      {local + "oidc: {issuer: https://idp, client_id: c, clock_skew: soon}",
       "config: oidc.clock_skew: 'soon' is not a duration"},
  };
  for (const auto& [yaml, want] : cases) {
    auto c = Parse(yaml);
    ASSERT_FALSE(c.ok()) << yaml;
    EXPECT_EQ(c.status().message().substr(0, want.size()), want)
        << yaml << "\n  said: " << c.status().message();
  }
}

TEST(ConfigFields, ReadsEachFieldIntoItsSetting) {
  auto c = Parse(std::string(kQueue) +
                 "backend: kubernetes, partition: debug, namespace: ml, placement_timeout: 2m}]\n"
                 "cluster: c1\nbackend_nice: 19\nmax_jobs_per_identity: 5\n"
                 "schedule_on_submit: true\nmetrics_public: yes\n"
                 "kubernetes: {context: prod, in_cluster: true}\n"
                 "backends: {k: {type: kubernetes, context: other, kubeconfig: /k}}\n");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->backend_nice, 19);
  EXPECT_EQ(c->limits.max_jobs_per_identity, 5);
  EXPECT_TRUE(c->schedule_on_submit);
  EXPECT_TRUE(c->metrics_public);
  EXPECT_EQ(c->kubernetes.context, "prod");
  EXPECT_TRUE(c->kubernetes.in_cluster);
  const NamedBackend* k = c->FindBackend("k");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->kube.context, "other");
  EXPECT_EQ(k->kube.kubeconfig, "/k");
  EXPECT_FALSE(k->kube.in_cluster) << "its kubeconfig overrides the top level's in_cluster";
  const QueueRoute* r = c->FindRoute("q");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->partition, "debug");
  EXPECT_EQ(r->kube.ns, "ml");
  EXPECT_EQ(r->kube.placement_timeout_ms, 120'000);
  EXPECT_EQ(c->FindRoute("nope"), nullptr);
  ASSERT_NE(c->FindQueue("q"), nullptr);
  ASSERT_NE(c->FindGroup("g"), nullptr);
  ASSERT_NE(c->FindProfile("p"), nullptr);
  EXPECT_EQ(c->FindGroup("p"), nullptr);
  const Identity* a = c->FindIdentityByTokenHash(Sha256Hex("aaaaaaaaaa"));
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->name, "a");
  EXPECT_EQ(c->FindIdentityByTokenHash(Sha256Hex("bbbbbbbbbb")), nullptr);
}

TEST(ConfigFields, RolesReadBothWays) {
  for (Role r : {Role::kAdmin, Role::kUser, Role::kAgent, Role::kViewer, Role::kMetrics}) {
    auto back = ParseRole(RoleName(r));
    ASSERT_TRUE(back.ok()) << RoleName(r);
    EXPECT_EQ(*back, r);
  }
  EXPECT_EQ(ParseRole("owner").status().message(),
            "unknown role 'owner' (admin, user, agent, viewer, metrics)");
}

}  // namespace
}  // namespace tessera::api
