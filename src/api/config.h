// EngineConfig: what `tessera serve --config FILE` declares: identities and their tokens, the
// queue and quota policy (groups, pools, profiles, queues, class-to-form table, grace) and how
// each queue's jobs run (node agents or an external scheduler).
//
// Loaded from YAML; invalid config is refused with a message naming the field (e.g.
// "config: queues[gpu].profile 'gpu-big' is not a profile"). Tokens are kept only as SHA-256
// hashes; a plain `token:` in the file (convenient for examples) is hashed on load.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "auth/oidc.h"
#include "backends/backend.h"
#include "common/status.h"
#include "model/cluster.h"
#include "model/resources.h"
#include "sched/quota/policy_model.h"

namespace tessera::api {

// admin: everything. user: submits and sees its groups' work. agent: speaks for nodes.
// viewer: sees what a user in its groups sees and may change nothing (every POST, PUT and DELETE
// refused). metrics: reads GET /metrics and nothing else (a Prometheus scraper).
enum class Role { kAdmin, kUser, kAgent, kViewer, kMetrics };
const char* RoleName(Role r);
// "admin", "user", "agent", "viewer", "metrics"; InvalidArgument naming them otherwise.
Result<Role> ParseRole(const std::string& name);

bool IsUnixAccountName(const std::string& s);

// GET /v1/whatif's replay: `observed` (Engine::WhatIfScenario's answer) run by the simulator with
// `forms` ("CLASS=FORM[,FORM]" each) applied, returning its report. The simulator sits beside
// the control plane, not under it (tools/checks/layering.sh: no arrow api -> sim), so the
// process that serves wires it in: `tessera serve` passes sim::WhatIfReport.
using WhatIfReplay = std::function<Result<nlohmann::json>(const nlohmann::json& observed,
                                                          const std::vector<std::string>& forms)>;
// POST /v1/whatif/usage's replay: an uploaded GPU usage history (the body: DCGM series as
// Prometheus range-query JSON, or CSV) and the request's parameters to the report of
// `tessera whatif --usage`. Wired in by `tessera serve` (sim::usage::WhatIfUsageReport).
using WhatIfUsageReplay = std::function<Result<nlohmann::json>(
    std::string_view history, const std::map<std::string, std::string>& params)>;

struct Identity {
  std::string name;
  Role role = Role::kUser;
  std::vector<std::string> groups;
  std::string token_sha256;  // lowercase hex
  // An agent: the nodes it may speak for (register, heartbeat, report exits, upload output):
  // names, or prefixes ending in '*'. Empty: any node (the config check warns).
  std::vector<std::string> nodes;
  // The Unix account this identity's jobs run under on the nodes ("" : its group's run_as, else
  // the account named as the identity itself). Never root: a queue with run_as_root runs its
  // jobs as root (QueueRoute::run_as_root), nothing else does.
  std::string run_as;
  // An identity from the OpenID Connect provider: its "sub" ("" for a static token).
  std::string subject;
  // `expires: 2027-06-30` (or 2027-06-30T18:00:00Z): a static token refused from then on, in
  // milliseconds since the epoch; 0: never. An OpenID Connect identity: its token's exp.
  int64_t expires_ms = 0;
  bool MaySpeakFor(const std::string& node) const;
};

// How a queue's admitted jobs run: on Tessera's node agents ("local"), or handed to an external
// scheduler (Slurm, PBS; see backends/backend.h QueueMapping). Admission is the same cycle for
// all of them; only where and how the job starts differs.
struct QueueRoute {
  std::string queue;
  bool requeue_on_loss = true;    // a job on a lost node: pending again, or ended as lost
  std::string backend = "local";  // "local" (node agents), or a registered backend: slurm, pbs
  // ... or a named backend (EngineConfig::backends). `backends: [a, b, c]`: several, in
  // preference order (issue 39); each job goes to the one where it is predicted to start first
  // (sched/quota/forecast.h). `backend` is then the first; `backend_types` their types.
  std::vector<std::string> backends;
  std::vector<std::string> backend_types;
  bool multi() const { return backends.size() > 1; }
  // For an external backend:
  std::string partition;      // Slurm partition / PBS queue
  std::string template_path;  // batch-script template; empty: the built-in default
  std::string gpu_type;       // whole cards as gpu:TYPE:N
  std::string gres_whole, gres_share, gres_partition;  // admin overrides of the GRES mapping
  // MIG instances: the cards' model (a MIG model of the partition catalog). A partition job then
  // gets the smallest MIG profile that gives its gpu_memory and gpu_fraction, as gpu:PROFILE:1
  // (or gres_partition with {profile} filled in).
  std::string mig_model;
  MiB shard_mib = 1024;     // GPU memory one Slurm shard stands for
  std::string cap_library;  // preloaded for shares
  // Swapping (local queues): `swap: true` lets idle shares' memory leave the card
  // (src/capgpu/swap.h); `overcommit` (a factor, "2" or "1.5"; default 2) is how far their caps
  // may sum past a device's memory. 0: no swapping.
  int swap_overcommit_percent = 0;
  // The queue's jobs run as root on the nodes (`run_as_root: true`): the only way any job does.
  bool run_as_root = false;
  // `isolation: hardware|driver|mps|preload`: the least isolation the queue's shares accept
  // (model/isolation.h rank; 0: any). Shares are placed only on devices whose agent gives it.
  int min_isolation = 0;
  // `compute: time-slicing|sm-sharing` with `compute_percent: N` (1-100) for sm-sharing: each
  // share's MPS active-thread percentage (quota::QueueSpec::compute_percent); 0: time-slicing.
  int compute_percent = 0;
  backends::KubeMapping kube;  // backend: kubernetes (namespace, node_selector, tolerations ...)
  bool external() const { return backend != "local"; }
};

// The server's config: the queue and quota policy (the same schema and loader as a scenario's,
// policy/policy_yaml.h) plus identities, queue routes and the server's own timings.
// `kubernetes:` the cluster the kubernetes queues use: kubeconfig files and context, or the
// pod's service account (in_cluster: true).
using KubeSettings = backends::KubeCluster;

// `backends:` a named backend (issue 39): one Slurm cluster, PBS server or Kubernetes cluster
// that queues name in `backend:` or list in `backends:`. A built-in name (slurm, pbs, kubernetes)
// names the one backend of that type set up by the top-level settings.
struct NamedBackend {
  std::string name;
  std::string type;   // slurm | pbs | kubernetes
  KubeSettings kube;  // type kubernetes: its cluster (unset fields: the top-level kubernetes:)
};

struct EngineConfig {
  std::string cluster = "tessera";
  KubeSettings kubernetes;
  std::vector<NamedBackend> backends;
  const NamedBackend* FindBackend(const std::string& name) const;
  // A backend name's type: a named backend's, else the built-in name itself ("local" too).
  std::string TypeOf(const std::string& name) const;
  int64_t heartbeat_timeout_ms = 10000;
  // How often agents heartbeat (the register reply tells them). Orders do not wait for it: an
  // agent's order watch (GET /v1/agent/orders) hears of them at once.
  int64_t heartbeat_interval_ms = 1000;
  int64_t cancel_grace_ms = 5000;
  // `partition_stop: 60s`: an agent that has heard from no leader for this long stops its jobs
  // itself (the register reply tells it), and the jobs of a lost node are requeued only once
  // that time and a margin have passed since it was last heard (PartitionReleaseMs), so a cut-off
  // node and the job's next placement never run it at once. 0 (the default): off, a lost node's
  // jobs are requeued as soon as it is lost.
  int64_t partition_stop_ms = 0;
  // How long after a node was last heard its jobs are released when it is lost: the agent's
  // partition_stop, its kill grace (the larger of cancel_grace and 10 s) and a heartbeat timeout
  // for the clocks' and the network's slack.
  int64_t PartitionReleaseMs() const {
    return partition_stop_ms + std::max<int64_t>(cancel_grace_ms, 10'000) + heartbeat_timeout_ms;
  }
  int64_t cycle_ms = 1000;         // how often the scheduling cycle runs
  bool schedule_on_submit = true;  // also run it right after each batch of submissions lands
  int64_t backend_poll_ms = 1000;  // how often external backends are asked about their jobs
  // What the store keeps, and for how long (checked hourly).
  struct History {
    // `retention: 90d`: jobs that ended longer ago, and older events, are deleted. 0 keeps
    // everything.
    int64_t retention_ms = 0;
    // `auth_failed_retention: 30d` (the default): auth.failed events older than this are deleted,
    // whatever `retention` says (at up to 20 a second they would otherwise grow without bound).
    int64_t auth_failed_retention_ms = int64_t{30} * 24 * 3600 * 1000;
    // Utilization history kept in the store: samples at `utilization_sample` for
    // `utilization_fine_keep` (1d), 5-minute averages for `utilization_keep` (90d).
    int64_t utilization_fine_keep_ms = int64_t{24} * 3600 * 1000;
    int64_t utilization_keep_ms = int64_t{90} * 24 * 3600 * 1000;
    int64_t utilization_sample_ms = 10000;  // how often the utilization history is sampled
  } history;
  // What one identity, one job and memory may hold.
  struct Limits {
    // `max_output: 64MiB` (the default): the most output kept per job; uploads past it are
    // refused (413), the part of one below it kept.
    int64_t max_output_bytes = int64_t{64} << 20;
    // `max_jobs_per_identity: 10000` (the default): the most jobs one identity may have not yet
    // ended; a submission past it is refused with 429 and Retry-After, so one user cannot flood the
    // queue (100,000 pending jobs in 35 s) or the server's memory.
    int64_t max_jobs_per_identity = 10000;
    // `max_command_bytes_per_identity: 64MiB` (the default; 1MiB at least):
    // the most bytes of command and environment one identity's jobs not yet ended may hold, so
    // that its jobs' specs cannot fill the server's memory (10,000 jobs of 254 KiB took 5 GB).
    int64_t max_command_bytes_per_identity = int64_t{64} << 20;
    // `ended_jobs_in_memory: 1000` (the default): how many ended jobs memory keeps (the newest; the
    // views read older ones from the store). Memory holds up to twice this before it lets go.
    int64_t ended_jobs_in_memory = 1000;
    // `max_requests_per_identity: 16` (the default): requests one identity (a person or a script;
    // not an agent) may have in the server at once; past it, 429 with Retry-After.
    int64_t max_requests_per_identity = 16;
  } limits;
  int backend_nice = 10;  // niceness added to the external schedulers' commands (0-19)
  // `idle_after: 15m` (the default): an allocation whose devices showed no activity for this
  // long is "held but idle" (job.idle event, marked in every view and in /metrics).
  int64_t idle_after_ms = int64_t{15} * 60 * 1000;
  // `unhealthy_jobs: requeue` (the default) or `finish`: what becomes of the jobs on a device its
  // agent reports unhealthy (a critical XID, a double-bit ECC error). requeue: preempted (the
  // policy's grace) and pending again, to run elsewhere; finish: left to run until they end.
  // Either way the device takes no new work.
  bool unhealthy_requeue = true;
  // `metrics_public: true`: GET /metrics needs no token (for a Prometheus inside a trusted
  // network); otherwise (the default) only admins read it.
  bool metrics_public = false;
  std::vector<Identity> identities;
  // `oidc:`: the provider whose tokens are accepted beside the static ones (not enabled when
  // absent), and its verifier (keeps the provider's keys; shared by the config's copies).
  auth::OidcSettings oidc;
  std::shared_ptr<auth::OidcVerifier> oidc_verifier;
  quota::PolicySpec policy;
  // What the config allows but an operator should know: shared accounts, identities without an
  // account, agents that speak for every node. `serve --check-config` prints them; serve logs them.
  std::vector<std::string> warnings;
  std::string source_yaml;  // the text it was parsed from (its policy part seeds `tessera whatif`)
  std::vector<QueueRoute> routes;  // one per policy queue, in the same order
  // Not from the YAML: the what-if replays the serving process wires in (empty: GET /v1/whatif
  // answers that this server cannot replay; /v1/whatif/scenario still answers; likewise
  // POST /v1/whatif/usage).
  struct WhatIf {
    WhatIfReplay replay;
    WhatIfUsageReplay usage;
  } whatif;

  const Identity* FindIdentityByTokenHash(const std::string& hash) const;
  const quota::GroupSpec* FindGroup(const std::string& name) const;
  // The Unix account `id`'s jobs in `group` run under (outside run_as_root queues): the
  // identity's run_as, else the group's, else the identity's own name; "" when it has none.
  std::string AccountOf(const Identity& id, const std::string& group) const;
  const quota::QueueSpec* FindQueue(const std::string& name) const;
  const quota::ProfileSpec* FindProfile(const std::string& name) const;
  const QueueRoute* FindRoute(const std::string& queue) const;
};

Result<EngineConfig> ParseConfig(const std::string& yaml_text);
// The warnings of a parsed config (EngineConfig::warnings).
std::vector<std::string> ConfigWarnings(const EngineConfig& c);
// The identities whose token has expired by `now_ms` (their requests are refused), one warning
// each, for `serve` and `--check-config` to say at start.
std::vector<std::string> ExpiredTokenWarnings(const EngineConfig& c, int64_t now_ms);
// The keys of a queue entry that only the server reads (backend routing), not a scenario.
const std::set<std::string>& ServerQueueKeys();
Result<EngineConfig> LoadConfig(const std::string& path);

// Lowercase hex SHA-256 of `text`.
std::string Sha256Hex(const std::string& text);
// A new random token ("tsk_" + 40 hex digits) from the OS's random source.
std::string NewToken();

}  // namespace tessera::api
