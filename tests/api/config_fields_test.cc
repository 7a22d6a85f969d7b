// The config loader's shared field reads (src/api/config_fields.h): optional strings, booleans,
// durations and bounded counts, each error naming its field as before; the lookups by name.
#include <gtest/gtest.h>

#include <fstream>

#include "api/config.h"
#include "model/timestamp.h"

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

// What the loader used to read silently otherwise (an audit of the server config): a key given
// twice (YAML keeps the first: an override added at the end did nothing), a placement policy it
// cannot build (the cycle fell back to next-fit), a GPU fraction on a profile of no GPUs (dropped),
// counts with a leading 0 (read as octal) or 0x (hex), a token beside its hash (never checked),
// a group's user who is no identity (a limit that never applies), a field of the wrong type
// (an error that named no field) and a date that does not exist (rolled into the next month).
TEST(ConfigFields, WhatWasReadSilentlyOtherwiseIsRefusedByName) {
  const std::string q = kQueue;
  const std::string local = q + "}]\n";
  const std::pair<std::string, std::string> cases[] = {
      {local + "cycle: 1s\ncycle: 0", "config: cycle: given twice (again at line 6, column 1)"},
      {local + "grace: 30s\ngrace: 500ms", "config: grace: given twice (again at line 6"},
      {q + "max_runtime: 1h, max_runtime: 500ms}]", "config: queues[q].max_runtime: given twice"},
      {local + "groups: [{name: h}]", "config: groups: given twice (again at line 5"},
      {local + "placement: tesera",
       "config: placement: unknown policy 'tesera' (known: nextfit, random, dotprod, clustering, "
       "packing, bestfit, tessera)"},
      {local + "placement: fgd", "config: placement: policy 'fgd' needs the target workload mix"},
      {"identities: [{name: a, token: aaaaaaaaaa}]\ngroups: [{name: g}]\n"
       "profiles: [{name: p, gpus: 0, gpu_fraction: 0.5, forms: [share]}]\n" +
           local,
       "config: profiles[p].gpu_fraction: only for a profile of 1 or more gpus"},
      {local + "backend_nice: 023", "config: backend_nice: must be an integer from 0 to 19"},
      {local + "backend_nice: 0x13", "config: backend_nice: must be an integer from 0 to 19"},
      {local + "max_jobs_per_identity: 1e3",
       "config: max_jobs_per_identity: must be an integer from 1 to 100000000"},
      {"identities: [{name: a, token: aaaaaaaaaa, token_sha256: " + std::string(64, 'a') +
           "}]\ngroups: [{name: g}]\nprofiles: [{name: p, forms: [whole]}]\n" + local,
       "config: identities[0]: token and token_sha256 exclude each other"},
      {"identities: [{name: a, token: aaaaaaaaaa}]\n"
       "groups: [{name: g, users: {bob: {limit: {gpu: 2}}}}]\n"
       "profiles: [{name: p, forms: [whole]}]\n" +
           local,
       "config: groups[g].users[bob]: no identity is named 'bob'"},
      {local + "max_output: [1GiB]", "config: max_output: expected a string"},
      {"identities: [{name: a, token: aaaaaaaaaa, role: [user]}]\ngroups: [{name: g}]\n"
       "profiles: [{name: p, forms: [whole]}]\n" +
           local,
       "config: identities[0].role: expected a string"},
      {"identities: [{name: a, token: aaaaaaaaaa, expires: [a]}]\ngroups: [{name: g}]\n"
       "profiles: [{name: p, forms: [whole]}]\n" +
           local,
       "config: identities[0].expires: expected a string"},
      {"identities: [{name: a, token: aaaaaaaaaa, expires: 2030-02-30}]\ngroups: [{name: g}]\n"
       "profiles: [{name: p, forms: [whole]}]\n" +
           local,
       "config: identities[0].expires: "},
  };
  for (const auto& [yaml, want] : cases) {
    // A case of its own identities, groups and profiles is the whole config.
    auto c = yaml.rfind("identities:", 0) == 0 ? ParseConfig(yaml) : Parse(yaml);
    if (c.ok()) {
      ADD_FAILURE() << "accepted:\n" << yaml;
      continue;
    }
    EXPECT_EQ(c.status().message().substr(0, want.size()), want)
        << yaml << "\n  said: " << c.status().message();
  }
  // Decimal, as people write it: a leading zero is not octal.
  auto c = Parse(local + "max_requests_per_identity: 019\nbackend_nice: 08\nplacement: nextfit");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->limits.max_requests_per_identity, 19);
  EXPECT_EQ(c->backend_nice, 8);
  // A group's users are identities; with an identity provider they may come from it instead.
  EXPECT_TRUE(ParseConfig("identities: [{name: a, token: aaaaaaaaaa}]\n"
                          "groups: [{name: g, users: {bob: {limit: {gpu: 2}}}}]\n"
                          "profiles: [{name: p, forms: [whole]}]\n" +
                          local + "oidc: {issuer: https://idp.example, client_id: c}")
                  .ok());
}

// What one vendor's devices or one setting alone reads, given where nothing reads it: refused by
// name, not ignored (an AMD partition on an NVIDIA queue, a MIG model on an AMD one, a partition
// name the device plugin does not have, an overcommit with swapping off).
TEST(ConfigFields, SettingsThatNothingWouldReadAreRefused) {
  const std::string q = kQueue;
  const std::pair<std::string, std::string> cases[] = {
      {q + "backend: kubernetes, amd_partition: cpx_nps4}]",
       "config: queues[q].amd_partition: only with vendor: amd"},
      {q + "backend: kubernetes, vendor: amd, amd_partition: xyz_bogus}]",
       "config: queues[q].amd_partition: 'xyz_bogus' is not a compute and memory mode of an "
       "AMD model (cpx_nps1, cpx_nps2, cpx_nps4, "},
      {q + "backend: kubernetes, vendor: amd, mig_model: A100-80GB}]",
       "config: queues[q].mig_model: only with vendor: nvidia"},
      {q + "swap: false, overcommit: 3}]", "config: queues[q].overcommit: needs swap: true"},
      // Slurm's and PBS's mapping on a queue only Kubernetes runs: nothing there reads it.
      {q + "backend: kubernetes, gres_whole: \"gpu:{gpus}\"}]",
       "config: queues[q].gres_whole: only for a queue run by Slurm or PBS"},
      {q + "backend: kubernetes, gpu_type: h100}]",
       "config: queues[q].gpu_type: only for a queue run by Slurm or PBS"},
      {q + "backend: kubernetes, shard_memory: 2GiB}]",
       "config: queues[q].shard_memory: only for a queue run by Slurm or PBS"},
      {q + "backend: kubernetes, share_mode: hami, cap_library: /x.so}]",
       "config: queues[q].cap_library: only with share_mode: timeslice"},
  };
  for (const auto& [yaml, want] : cases) {
    auto c = Parse(yaml + "\n");
    if (c.ok()) {
      ADD_FAILURE() << "accepted:\n" << yaml;
      continue;
    }
    EXPECT_EQ(c.status().message().substr(0, want.size()), want)
        << yaml << "\n  said: " << c.status().message();
  }
  for (const std::string& ok :
       {q + "backend: kubernetes, vendor: amd, amd_partition: cpx_nps4}]",
        q + "backend: kubernetes, vendor: amd, amd_partition: dpx_nps1}]",
        q + "backend: kubernetes, vendor: amd, amd_partition: dpx_nps2}]",  // MI355X
        q + "backend: kubernetes, mig_model: A100-80GB}]", q + "swap: true, overcommit: 3}]",
        q + "backend: slurm, gres_whole: \"gpu:{gpus}\", gpu_type: h100, shard_memory: 2GiB}]",
        q + "backend: kubernetes, share_mode: timeslice, cap_library: /x.so}]"}) {
    auto c = Parse(ok + "\n");
    EXPECT_TRUE(c.ok()) << ok << "\n  said: " << c.status().message();
  }
}

// A batch-script template whose #SBATCH lines sbatch would not read is refused at start, naming
// the line; the shipped examples are taken.
TEST(ConfigFields, AScriptTemplateWhoseDirectivesWouldBeIgnoredIsRefused) {
  const std::string bad = ::testing::TempDir() + "/late.sbatch";
  std::ofstream(bad) << "#!/bin/bash\n{{env}}\n#SBATCH --job-name={{job_name}}\n{{command}}\n";
  auto c = Parse(std::string(kQueue) + "backend: slurm, template: " + bad + "}]\n");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "config: queues[q].template: '" + bad +
                "': template line 3 ('#SBATCH --job-name={{job_name}}') comes after the first "
                "command (line 2), and sbatch reads no #SBATCH line after it");
  for (const char* file : {"/examples/slurm/job.sbatch", "/examples/slurm/job.pbs"}) {
    const std::string backend = std::string(file).ends_with(".pbs") ? "pbs" : "slurm";
    auto ok = Parse(std::string(kQueue) + "backend: " + backend +
                    ", template: " + TESSERA_SOURCE_DIR + file + "}]\n");
    EXPECT_TRUE(ok.ok()) << file << ": " << ok.status().message();
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

// A token past its expiry is said at start (serve, --check-config): its requests are refused,
// and the config read as fine said nothing of it.
TEST(ConfigFields, ExpiredTokensAreSaidAtStart) {
  auto c = ParseConfig(
      "identities: [{name: a, token: aaaaaaaaaa, expires: 2027-01-15}, {name: b, token: "
      "bbbbbbbbbb}]\ngroups: [{name: g}]\nprofiles: [{name: p, forms: [whole]}]\n" +
      std::string(kQueue) + "}]\n");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const int64_t expiry = *ParseTimestampMs("2027-01-15");
  EXPECT_TRUE(ExpiredTokenWarnings(*c, expiry - 1).empty());
  const std::vector<std::string> w = ExpiredTokenWarnings(*c, expiry);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0],
            "identity 'a': its token expired at 2027-01-15T00:00:00Z, so its requests are "
            "refused");
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
