#include "api/config.h"

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "api/config_fields.h"
#include "backends/backend.h"
#include "model/duration.h"
#include "model/isolation.h"
#include "model/quantity.h"
#include "partition/catalog.h"
#include "policy/policy_yaml.h"
#include "policy/yaml_fields.h"

namespace tessera::api {
namespace {

using cfg::Bad;
using cfg::CheckKeys;
using cfg::CheckUnique;
using cfg::Duration;
using cfg::Prefixed;
using cfg::ReadBool;
using cfg::ReadIdentities;
using cfg::ReadOidc;
using cfg::ReadStrs;
using cfg::Str;
using cfg::StrList;

// A queue's route: which backend runs its jobs and how (the keys beyond the policy's).
Result<QueueRoute> ParseRoute(const YAML::Node& n, const std::string& w, const EngineConfig& c) {
  QueueRoute q;
  Status st = ReadBool(n["requeue_on_loss"], w + ".requeue_on_loss", &q.requeue_on_loss);
  if (st.ok()) st = ParseQueueBackends(n, w, c, &q);
  if (!st.ok()) return st;
  const auto has_type = [&](const char* type) {
    return std::find(q.backend_types.begin(), q.backend_types.end(), type) != q.backend_types.end();
  };
  st = ReadStrs(n, w,
                {{"partition", &q.partition},
                 {"template", &q.template_path},
                 {"gpu_type", &q.gpu_type},
                 {"gres_whole", &q.gres_whole},
                 {"gres_share", &q.gres_share},
                 {"gres_partition", &q.gres_partition},
                 {"cap_library", &q.cap_library},
                 {"mig_model", &q.mig_model}},
                [&](const std::string& field, const YAML::Node&) {
                  return q.external() ? Status::Ok()
                                      : Bad(field,
                                            "only for a queue with an external backend (slurm, "
                                            "pbs, kubernetes)");
                });
  if (!st.ok()) return st;
  if (n["shard_memory"]) {
    if (!n["shard_memory"].IsScalar())
      return Bad(w + ".shard_memory", "expected a size such as 1GiB");
    auto v = ParseMemoryMiB(n["shard_memory"].as<std::string>());
    if (!v.ok() || *v <= 0)
      return Bad(w + ".shard_memory", "expected a positive size such as 1GiB");
    q.shard_mib = *v;
  }
  if (st = ReadBool(n["run_as_root"], w + ".run_as_root", &q.run_as_root); !st.ok()) return st;
  if (n["overcommit"]) {  // swap: false (or none) would leave it unread
    const Result<bool> swap = n["swap"] ? policy::GetBool(n["swap"], w + ".swap") : false;
    if (swap.ok() && !*swap) return Bad(w + ".overcommit", "needs swap: true");
  }
  if (n["max_runtime"] && q.external()) {
    return Bad(w + ".max_runtime",
               "only for queues run by node agents (backend local); a batch system's queue stops "
               "its jobs at their walltime");
  }
  if (n["swap"]) {
    auto v = policy::GetBool(n["swap"], w + ".swap");
    if (!v.ok()) return Prefixed(v.status());
    if (*v && q.external()) {
      return Bad(w + ".swap", "only for queues run by node agents (backend local)");
    }
    int percent = 200;
    if (n["overcommit"]) {
      // A factor with up to two decimals, in whole percent: exact, no floating point.
      auto text = Str(n["overcommit"], w + ".overcommit");
      if (!text.ok()) return text.status();
      const std::string& t = *text;
      const size_t dot = t.find('.');
      const std::string whole = t.substr(0, dot);
      const std::string frac = dot == std::string::npos ? "" : t.substr(dot + 1);
      const auto digits = [](const std::string& s) {
        return !s.empty() && s.size() <= 3 &&
               std::all_of(s.begin(), s.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
      };
      if (!digits(whole) || (dot != std::string::npos && (!digits(frac) || frac.size() > 2))) {
        return Bad(w + ".overcommit", "expected a factor such as 2 or 1.5, not '" + t + "'");
      }
      percent = std::stoi(whole) * 100 +
                (frac.empty() ? 0 : std::stoi(frac) * (frac.size() == 1 ? 10 : 1));
      if (percent < 100 || percent > 1000) {
        return Bad(w + ".overcommit",
                   "must be from 1 to 10 (caps may sum to that many times a device)");
      }
    }
    q.swap_overcommit_percent = *v ? percent : 0;
  }
  if (n["isolation"]) {
    auto v = Str(n["isolation"], w + ".isolation");
    if (!v.ok()) return v.status();
    const int rank = IsolationRank(*v);
    if (rank < 1)
      return Bad(w + ".isolation",
                 "must be one of hardware, driver, mps, preload, not '" + *v + "'");
    q.min_isolation = rank;
  }
  if (n["compute_percent"] && !n["compute"])
    return Bad(w + ".compute_percent", "needs compute: sm-sharing");
  if (n["compute"]) {
    auto v = Str(n["compute"], w + ".compute");
    if (!v.ok()) return v.status();
    if (*v != "time-slicing" && *v != "sm-sharing")
      return Bad(w + ".compute", "must be time-slicing or sm-sharing, not '" + *v + "'");
    if (*v == "sm-sharing") {
      if (q.external()) return Bad(w + ".compute", "only for queues run by node agents");
      if (!n["compute_percent"])
        return Bad(w + ".compute_percent", "required with compute: sm-sharing (1 to 100)");
      auto pct = policy::GetInt(n["compute_percent"], w + ".compute_percent");
      if (!pct.ok() || *pct < 1 || *pct > 100)
        return Bad(w + ".compute_percent", "must be an integer from 1 to 100");
      q.compute_percent = static_cast<int>(*pct);
    } else if (n["compute_percent"]) {
      return Bad(w + ".compute_percent", "only with compute: sm-sharing");
    }
  }
  if (has_type("pbs") && (!q.mig_model.empty() || !q.gres_partition.empty())) {
    return Bad(w + (q.mig_model.empty() ? ".gres_partition" : ".mig_model"),
               "the PBS backend maps no MIG instances");
  }
  if (!q.mig_model.empty()) {
    const partition::GpuModel* m = partition::Catalog::BuiltIn().Find(q.mig_model);
    if (m == nullptr || !m->is_mig()) {
      std::string mig;
      for (const auto& g : partition::Catalog::BuiltIn().models()) {
        if (g.is_mig()) mig += (mig.empty() ? "" : ", ") + g.name;
      }
      return Bad(w + ".mig_model", "'" + q.mig_model + "' is not a MIG model (" + mig + ")");
    }
    q.mig_model = m->name;
  }
  if (has_type("kubernetes")) {
    if (st = ParseKubeRoute(n, w, &q); !st.ok()) return st;
    // Slurm's and PBS's mapping where only Kubernetes runs the queue: nothing would read it.
    if (!has_type("slurm") && !has_type("pbs")) {
      for (const char* key :
           {"gpu_type", "gres_whole", "gres_share", "gres_partition", "shard_memory"}) {
        if (n[key]) return Bad(w + "." + key, "only for a queue run by Slurm or PBS");
      }
      if (n["cap_library"] && q.kube.share_mode != "timeslice")
        return Bad(w + ".cap_library", "only with share_mode: timeslice");
    }
  } else {
    for (const std::string& key : KubeQueueKeys()) {
      if (n[key]) return Bad(w + "." + key, "only for a queue with backend: kubernetes");
    }
  }
  if (!q.template_path.empty()) {
    std::ifstream t(q.template_path);
    if (!t) return Bad(w + ".template", "cannot read '" + q.template_path + "'");
    std::stringstream text;
    text << t.rdbuf();
    for (const std::string& type : q.backend_types) {
      if (Status checked = backends::CheckScriptTemplate(text.str(), type); !checked.ok())
        return Bad(w + ".template", "'" + q.template_path + "': " + checked.message());
    }
  }
  return q;
}

}  // namespace

// An optional duration setting, in milliseconds; `positive` refuses 0.
static Status ReadMs(const YAML::Node& root, const char* key, bool positive, int64_t* ms) {
  if (!root[key]) return Status::Ok();
  auto d = Duration(root[key], key);
  if (!d.ok()) return d.status();
  if (positive && *d <= 0) return Bad(key, "must be positive");
  *ms = *d;
  return Status::Ok();
}

// An optional whole-number setting from `lo` to `hi`.
template <typename Int>
static Status ReadCount(const YAML::Node& root, const char* key, int64_t lo, int64_t hi, Int* out) {
  if (!root[key]) return Status::Ok();
  // Decimal digits as people write them: YAML's own reading takes 023 as octal and 0x13 as hex.
  const Result<int64_t> n =
      root[key].IsScalar() ? ParseNonNegativeInt(root[key].Scalar()) : Result<int64_t>(-1);
  if (!n.ok() || *n < lo || *n > hi) {
    return Bad(key, "must be an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
  }
  *out = static_cast<Int>(*n);
  return Status::Ok();
}

// An optional size ("64MiB") of at least `min_bytes`, in bytes.
static Status ReadBytes(const YAML::Node& root, const char* key, int64_t min_bytes, int64_t* out) {
  if (!root[key]) return Status::Ok();
  auto text = Str(root[key], key);
  if (!text.ok()) return text.status();
  auto q = ParseMemoryMiB(*text);
  if (!q.ok()) return Bad(key, q.status().message());
  if (*q <= 0 || *q > std::numeric_limits<int64_t>::max() / (1024 * 1024))
    return Bad(key, "expected a size such as 1GiB");
  if (*q * 1024 * 1024 < min_bytes)
    return Bad(key, "must be at least " + FormatMiB(min_bytes / (1024 * 1024)));
  *out = *q * 1024 * 1024;
  return Status::Ok();
}

// The server's own settings: cluster name, timings, schedule_on_submit, backend_nice.
static Status ReadServerSettings(const YAML::Node& root, EngineConfig* c) {
  if (root["cluster"]) {
    auto s = Str(root["cluster"], "cluster");
    if (!s.ok()) return s.status();
    c->cluster = *s;
  }
  // Positive: at 0 every node is lost at once (and the refusal blamed heartbeat_interval).
  Status st = ReadMs(root, "heartbeat_timeout", true, &c->heartbeat_timeout_ms);
  if (st.ok()) st = ReadMs(root, "heartbeat_interval", true, &c->heartbeat_interval_ms);
  if (st.ok() && c->heartbeat_interval_ms * 2 > c->heartbeat_timeout_ms) {
    return Bad("heartbeat_interval", "must be at most half of heartbeat_timeout (" +
                                         FormatDurationMs(c->heartbeat_timeout_ms) +
                                         "), or nodes are lost between heartbeats");
  }
  if (st.ok()) st = ReadMs(root, "cancel_grace", false, &c->cancel_grace_ms);
  if (st.ok()) st = ReadMs(root, "partition_stop", false, &c->partition_stop_ms);
  if (st.ok() && c->partition_stop_ms > 0 && c->partition_stop_ms < c->heartbeat_timeout_ms) {
    return Bad("partition_stop", "must be at least heartbeat_timeout (" +
                                     FormatDurationMs(c->heartbeat_timeout_ms) +
                                     "), or agents stop their jobs before the node is lost");
  }
  if (st.ok()) st = ReadMs(root, "cycle", true, &c->cycle_ms);
  if (!st.ok()) return st;
  st = ReadBool(root["schedule_on_submit"], "schedule_on_submit", &c->schedule_on_submit);
  if (st.ok()) st = ReadBool(root["metrics_public"], "metrics_public", &c->metrics_public);
  if (st.ok()) st = ReadMs(root, "backend_poll", true, &c->backend_poll_ms);
  if (st.ok()) st = ReadMs(root, "utilization_sample", true, &c->history.utilization_sample_ms);
  if (st.ok()) st = ReadMs(root, "retention", false, &c->history.retention_ms);
  if (st.ok())
    st = ReadMs(root, "auth_failed_retention", false, &c->history.auth_failed_retention_ms);
  if (st.ok()) st = ReadMs(root, "idle_after", true, &c->idle_after_ms);
  if (st.ok() && root["unhealthy_jobs"]) {
    auto v = Str(root["unhealthy_jobs"], "unhealthy_jobs");
    if (!v.ok()) return v.status();
    if (*v != "requeue" && *v != "finish")
      return Bad("unhealthy_jobs", "must be requeue or finish, not '" + *v + "'");
    c->unhealthy_requeue = *v == "requeue";
  }
  if (st.ok())
    st = ReadMs(root, "utilization_fine_keep", true, &c->history.utilization_fine_keep_ms);
  if (st.ok()) st = ReadMs(root, "utilization_keep", true, &c->history.utilization_keep_ms);
  if (st.ok())
    st = ReadCount(root, "max_requests_per_identity", 1, 100'000,
                   &c->limits.max_requests_per_identity);
  if (st.ok())
    st = ReadCount(root, "max_jobs_per_identity", 1, 100'000'000, &c->limits.max_jobs_per_identity);
  if (st.ok())
    st = ReadCount(root, "ended_jobs_in_memory", 1, 10'000'000, &c->limits.ended_jobs_in_memory);
  if (st.ok()) st = ReadBytes(root, "max_output", 1, &c->limits.max_output_bytes);
  if (st.ok()) {
    st = ReadBytes(root, "max_command_bytes_per_identity", int64_t{1} << 20,
                   &c->limits.max_command_bytes_per_identity);
  }
  if (st.ok()) st = ReadCount(root, "backend_nice", 0, 19, &c->backend_nice);
  return st;
}

const std::set<std::string>& ServerQueueKeys() {
  static const std::set<std::string> kKeys = {
      "requeue_on_loss", "backend",    "partition",      "template",     "gpu_type",
      "gres_whole",      "gres_share", "gres_partition", "shard_memory", "cap_library",
      "mig_model",       "swap",       "overcommit",     "run_as_root",  "isolation",
      "backends",        "compute",    "compute_percent"};
  static const std::set<std::string> kAll = [] {
    std::set<std::string> all = kKeys;
    all.insert(KubeQueueKeys().begin(), KubeQueueKeys().end());
    return all;
  }();
  return kAll;
}

// The quota policy, with the server's extra keys allowed; one pool with every form when none is
// given.
static Result<quota::PolicySpec> ReadPolicy(const YAML::Node& root) {
  policy::PolicyKeys keys;
  keys.extra_root = {"cluster",
                     "heartbeat_timeout",
                     "heartbeat_interval",
                     "cancel_grace",
                     "ended_jobs_in_memory",
                     "partition_stop",
                     "cycle",
                     "schedule_on_submit",
                     "backend_poll",
                     "backend_nice",
                     "utilization_sample",
                     "retention",
                     "auth_failed_retention",
                     "max_output",
                     "max_jobs_per_identity",
                     "max_command_bytes_per_identity",
                     "max_requests_per_identity",
                     "identities",
                     "idle_after",
                     "unhealthy_jobs",
                     "utilization_fine_keep",
                     "utilization_keep",
                     "metrics_public",
                     "oidc",
                     "kubernetes",
                     "backends"};
  keys.extra_queue = ServerQueueKeys();
  keys.require_queues = true;
  auto pol = policy::ParsePolicy(root, keys);
  if (!pol.ok()) return Prefixed(pol.status());
  if (pol->pools.empty()) {
    pol->pools.push_back(
        {"default", {AllocationForm::kWhole, AllocationForm::kPartition, AllocationForm::kShare}});
  }
  return pol;
}

static Status CheckIdentityGroups(const EngineConfig& c) {
  for (const quota::GroupSpec& g : c.policy.groups) {
    if (!g.run_as.empty() && !IsUnixAccountName(g.run_as)) {
      return Bad("groups[" + g.name + "].run_as", "'" + g.run_as + "' is not a Unix account name");
    }
    if (g.run_as == "root") {
      return Bad("groups[" + g.name + "].run_as",
                 "jobs run as root only on a queue with run_as_root: true, never per group");
    }
  }
  for (size_t i = 0; i < c.identities.size(); ++i) {
    for (const auto& g : c.identities[i].groups) {
      if (!c.FindGroup(g)) {
        return Bad("identities[" + std::to_string(i) + "].groups", "unknown group '" + g + "'");
      }
    }
  }
  // A group's users are identities. Without an identity provider to bring others, a name that
  // no identity has is a typo whose weight and limit would never apply.
  if (c.oidc.enabled()) return Status::Ok();
  for (const quota::GroupSpec& g : c.policy.groups) {
    for (const quota::MemberSpec& m : g.members) {
      const bool known = std::any_of(c.identities.begin(), c.identities.end(),
                                     [&](const Identity& id) { return id.name == m.identity; });
      if (!known) {
        return Bad("groups[" + g.name + "].users[" + m.identity + "]",
                   "no identity is named '" + m.identity + "'");
      }
    }
  }
  return Status::Ok();
}

// The Unix account `id`'s jobs run under outside run_as_root queues: its own run_as, else its
// first group's, else its own name (when that is an account name; "" otherwise). Not so for an
// identity of the provider: its name is a username its person may choose (`daemon`, a
// colleague's account), so only the account claim (its run_as) or its group's run_as count.
std::string EngineConfig::AccountOf(const Identity& id, const std::string& group) const {
  if (!id.run_as.empty()) return id.run_as;
  const quota::GroupSpec* g =
      FindGroup(group.empty() && !id.groups.empty() ? id.groups.front() : group);
  if (g != nullptr && !g->run_as.empty()) return g->run_as;
  if (!id.subject.empty()) return "";
  return IsUnixAccountName(id.name) && id.name != "root" ? id.name : "";
}

std::vector<std::string> ConfigWarnings(const EngineConfig& c) {
  std::vector<std::string> out;
  std::map<std::string, std::vector<std::string>> by_account;
  for (const Identity& id : c.identities) {
    if (id.role == Role::kViewer || id.role == Role::kMetrics) continue;  // they run no jobs
    if (id.role == Role::kAgent) {
      if (id.nodes.empty()) {
        out.push_back("identity '" + id.name +
                      "' (agent) has no nodes: it speaks for every node; list its nodes (nodes: "
                      "[name, prefix*])");
      }
      continue;
    }
    for (const std::string& g : id.groups.empty() ? std::vector<std::string>{""} : id.groups) {
      const std::string account = c.AccountOf(id, g);
      if (account.empty()) {
        out.push_back("identity '" + id.name +
                      "' has no Unix account: its name is not one and neither it nor group '" + g +
                      "' sets run_as, so its jobs are refused; set run_as");
        continue;
      }
      auto& names = by_account[account];
      if (std::find(names.begin(), names.end(), id.name) == names.end()) names.push_back(id.name);
    }
  }
  for (const quota::GroupSpec& g : c.policy.groups) {
    if (g.run_as.empty()) continue;
    out.push_back(
        "group '" + g.name + "' sets run_as '" + g.run_as +
        "' for all its members: their jobs share one Unix account, so each can read the others' "
        "environments and signal their jobs; prefer run_as per identity");
  }
  for (const auto& [account, names] : by_account) {
    if (names.size() < 2) continue;
    std::string list;
    for (const std::string& n : names) list += (list.empty() ? "'" : ", '") + n + "'";
    out.push_back("identities " + list + " run their jobs as the one Unix account '" + account +
                  "': each can read the others' job environments and signal their jobs");
  }
  for (const QueueRoute& r : c.routes) {
    if (r.run_as_root)
      out.push_back("queue '" + r.queue + "' runs its jobs as root (run_as_root: true)");
  }
  return out;
}

// Each queue's route (backend and its keys), in the policy's queue order.
static Status ReadRoutes(const YAML::Node& queues, EngineConfig* c) {
  for (size_t i = 0; i < queues.size(); ++i) {
    auto route = ParseRoute(queues[i], "queues[" + policy::EntryName(queues[i], i) + "]", *c);
    if (!route.ok()) return route.status();
    route->queue = c->policy.queues[i].name;
    const auto& types = route->backend_types;
    const bool kube = std::find(types.begin(), types.end(), "kubernetes") != types.end();
    if (kube) {
      Status st = CheckKubeCluster(c->cluster);
      if (!st.ok()) return st;
    }
    c->policy.queues[i].external = route->external();
    c->policy.queues[i].swap_overcommit_percent = route->swap_overcommit_percent;
    c->policy.queues[i].min_isolation = route->min_isolation;
    c->policy.queues[i].compute_percent = route->compute_percent;
    // Kubernetes reports its capacity: admission keeps within it and reclaims by suspending.
    // Several backends: each is a pool of its own, named as the backend.
    c->policy.queues[i].external_pool =
        route->multi() || c->TypeOf(route->backend) == "kubernetes" ? route->backend : "";
    if (route->multi()) c->policy.queues[i].external_pools = route->backends;
    c->routes.push_back(*route);
  }
  return Status::Ok();
}

Result<EngineConfig> ParseConfig(const std::string& yaml_text) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument("config: not valid YAML: " + std::string(e.what()));
  }
  if (!root.IsMap()) return Status::InvalidArgument("config: expected a YAML map at the top");
  try {
    if (Status twice = policy::UniqueKeys(root, ""); !twice.ok()) return Prefixed(twice);
    EngineConfig c;
    c.source_yaml = yaml_text;
    Status st = ReadServerSettings(root, &c);
    if (st.ok()) st = ReadKubeSettings(root, &c);
    if (st.ok()) st = ReadNamedBackends(root, &c);
    if (st.ok()) st = ReadOidc(root, &c);
    if (!st.ok()) return st;
    st = ReadIdentities(root["identities"], &c.identities);
    if (!st.ok()) return st;
    auto pol = ReadPolicy(root);
    if (!pol.ok()) return pol.status();
    c.policy = std::move(*pol);
    st = CheckIdentityGroups(c);
    if (!st.ok()) return st;
    st = ReadRoutes(root["queues"], &c);
    if (!st.ok()) return st;
    Status valid = quota::Validate(c.policy);
    if (!valid.ok()) return Prefixed(valid);
    c.warnings = ConfigWarnings(c);
    return c;
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument("config: " + std::string(e.what()));
  }
}

Result<EngineConfig> LoadConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot read config '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseConfig(ss.str());
}

}  // namespace tessera::api
