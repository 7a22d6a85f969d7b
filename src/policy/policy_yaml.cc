#include "policy/policy_yaml.h"

#include <algorithm>

#include "policy/yaml_fields.h"

namespace tessera::policy {
namespace {

const std::set<std::string> kPolicyRoot = {"grace",
                                           "placement",
                                           "fair_share_half_life",
                                           "repartition",
                                           "repartition_horizon",
                                           "pools",
                                           "groups",
                                           "profiles",
                                           "queues",
                                           "class_forms"};

}  // namespace

const std::set<std::string>& PolicyRootKeys() { return kPolicyRoot; }

namespace {

Status List(const YAML::Node& n, const std::string& field) {
  if (n && !n.IsSequence()) return FieldError(field, "expected a list");
  return Status::Ok();
}

// `read(n, f)` for each entry n of the optional list `root[key]`, f naming it in errors
// ("groups[gpu-team]", or by its index when it has no name).
template <typename Read>
Status ForEachEntry(const YAML::Node& root, const std::string& key, Read read) {
  TESSERA_TRY(List(root[key], key));
  for (size_t i = 0; root[key] && i < root[key].size(); ++i) {
    const YAML::Node n = root[key][i];
    TESSERA_TRY(read(n, key + "[" + EntryName(n, i) + "]"));
  }
  return Status::Ok();
}

Status ReadPools(const YAML::Node& root, quota::PolicySpec& p) {
  return ForEachEntry(root, "pools", [&](const YAML::Node& n, const std::string& f) -> Status {
    TESSERA_TRY(KnownKeys(n, f, {"name", "forms"}));
    quota::PoolSpec ps;
    if (n["name"]) TESSERA_TRY_ASSIGN(ps.name, GetString(n["name"], f + ".name"));
    if (n["forms"]) TESSERA_TRY_ASSIGN(ps.forms, GetForms(n["forms"], f + ".forms"));
    p.pools.push_back(ps);
    return Status::Ok();
  });
}

// A group's users: {alice: {weight: 2, limit: {gpu: 4}}, bob: {}} (fair share inside the group).
Status ReadMembers(const YAML::Node& n, const std::string& f, quota::GroupSpec& g) {
  if (!n.IsMap()) return FieldError(f, "expected a map of identity to {weight, limit}");
  for (const auto& kv : n) {
    quota::MemberSpec m;
    m.identity = Scalar(kv.first);
    const std::string mf = f + "[" + m.identity + "]";
    const YAML::Node v = kv.second;
    if (v && !v.IsNull()) {
      if (!v.IsMap()) return FieldError(mf, "expected a map with weight and limit");
      TESSERA_TRY(KnownKeys(v, mf, {"weight", "limit"}));
      if (v["weight"]) TESSERA_TRY_ASSIGN(m.weight_milli, GetMilli(v["weight"], mf + ".weight"));
      if (v["limit"]) {
        TESSERA_TRY_ASSIGN(m.limit,
                           GetResources(v["limit"], mf + ".limit", quota::UnlimitedResources()));
      }
    }
    g.members.push_back(m);
  }
  return Status::Ok();
}

// A `models:` or `pools:` map of ReadQuota, GPUs per GPU model or pool (`noun` in errors): each
// amount set as the limit or the reservation of the entry of `quotas` whose `key` it names (added
// when there is none yet). Returns the amounts' sum.
template <typename Quota>
Result<int64_t> ReadQuotaMap(const YAML::Node& map, const std::string& f, const std::string& noun,
                             std::string Quota::*key, bool limit, std::vector<Quota>& quotas) {
  if (!map.IsMap()) return FieldError(f, "expected a map of " + noun + " to GPUs");
  int64_t sum = 0;
  for (const auto& kv : map) {
    const std::string name = Scalar(kv.first);
    if (name.empty()) return FieldError(f, "a " + noun + " name is empty");
    int64_t v = 0;
    TESSERA_TRY_ASSIGN(v, GetMilli(kv.second, f + "[" + name + "]"));
    auto it =
        std::find_if(quotas.begin(), quotas.end(), [&](const Quota& q) { return q.*key == name; });
    if (it == quotas.end()) it = quotas.insert(quotas.end(), Quota{name});
    (limit ? it->limit : it->reservation) = v;
    sum += v;
  }
  return sum;
}

// A group's reservation or limit: the totals {gpu, gpu_memory, cpu, memory} and, beside them,
// `models: {H100-80GB: 4, H100: 2, ...}` in GPUs per GPU model or family (GroupSpec::models) and
// `pools: {east: 4, ...}` in GPUs per pool (GroupSpec::pools). A reservation that names models or
// pools but no gpu reserves the larger of their sums.
Status ReadQuota(const YAML::Node& n, const std::string& f, bool limit, quota::GroupSpec& g) {
  TESSERA_TRY(KnownKeys(n, f, {"gpu", "gpu_memory", "cpu", "memory", "models", "pools"}));
  YAML::Node totals(YAML::NodeType::Map);
  for (const auto& kv : n) {
    if (Scalar(kv.first) != "models" && Scalar(kv.first) != "pools") totals[kv.first] = kv.second;
  }
  Resources& r = limit ? g.limit : g.reservation;
  TESSERA_TRY_ASSIGN(r, GetResources(totals, f, r));
  int64_t most = 0;
  if (const YAML::Node models = n["models"]) {
    int64_t sum = 0;
    TESSERA_TRY_ASSIGN(sum, ReadQuotaMap(models, f + ".models", "GPU model",
                                         &quota::ModelQuota::model, limit, g.models));
    most = std::max(most, sum);
  }
  if (const YAML::Node pools = n["pools"]) {
    int64_t sum = 0;
    TESSERA_TRY_ASSIGN(
        sum, ReadQuotaMap(pools, f + ".pools", "pool", &quota::PoolQuota::pool, limit, g.pools));
    most = std::max(most, sum);
  }
  if (!limit && !n["gpu"] && (n["models"] || n["pools"])) r.gpu_milli = most;
  return Status::Ok();
}

Status ReadGroups(const YAML::Node& root, quota::PolicySpec& p) {
  return ForEachEntry(root, "groups", [&](const YAML::Node& n, const std::string& f) -> Status {
    TESSERA_TRY(KnownKeys(
        n, f,
        {"name", "parent", "reservation", "limit", "weight", "run_as", "members_cancel", "users"}));
    quota::GroupSpec g;
    if (n["name"]) TESSERA_TRY_ASSIGN(g.name, GetString(n["name"], f + ".name"));
    if (n["parent"]) TESSERA_TRY_ASSIGN(g.parent, GetString(n["parent"], f + ".parent"));
    if (n["reservation"]) TESSERA_TRY(ReadQuota(n["reservation"], f + ".reservation", false, g));
    if (n["limit"]) TESSERA_TRY(ReadQuota(n["limit"], f + ".limit", true, g));
    if (n["weight"]) TESSERA_TRY_ASSIGN(g.weight_milli, GetMilli(n["weight"], f + ".weight"));
    if (n["run_as"]) TESSERA_TRY_ASSIGN(g.run_as, GetString(n["run_as"], f + ".run_as"));
    if (n["members_cancel"])
      TESSERA_TRY_ASSIGN(g.members_cancel, GetBool(n["members_cancel"], f + ".members_cancel"));
    if (n["users"]) TESSERA_TRY(ReadMembers(n["users"], f + ".users", g));
    p.groups.push_back(g);
    return Status::Ok();
  });
}

Status ReadProfiles(const YAML::Node& root, quota::PolicySpec& p) {
  return ForEachEntry(root, "profiles", [&](const YAML::Node& n, const std::string& f) -> Status {
    TESSERA_TRY(KnownKeys(n, f,
                          {"name", "gpus", "gpu_fraction", "gpu_memory", "cpu", "memory",
                           "max_gpus", "max_gpu_memory", "forms", "pools"}));
    quota::ProfileSpec pr;
    int64_t v = 0;
    if (n["name"]) TESSERA_TRY_ASSIGN(pr.name, GetString(n["name"], f + ".name"));
    if (n["gpus"]) {
      TESSERA_TRY_ASSIGN(v, GetInt(n["gpus"], f + ".gpus"));
      pr.gpu_count = static_cast<int>(v);
    }
    if (n["max_gpus"]) {
      TESSERA_TRY_ASSIGN(v, GetInt(n["max_gpus"], f + ".max_gpus"));
      pr.max_gpus = static_cast<int>(v);
    }
    if (n["gpu_fraction"]) {
      TESSERA_TRY_ASSIGN(pr.gpu_milli, GetMilli(n["gpu_fraction"], f + ".gpu_fraction"));
    }
    if (n["gpu_memory"]) {
      TESSERA_TRY_ASSIGN(pr.gpu_memory_mib, GetMemory(n["gpu_memory"], f + ".gpu_memory"));
    }
    if (n["max_gpu_memory"]) {
      TESSERA_TRY_ASSIGN(pr.max_gpu_memory_mib,
                         GetMemory(n["max_gpu_memory"], f + ".max_gpu_memory"));
    }
    if (n["cpu"]) TESSERA_TRY_ASSIGN(pr.cpu_milli, GetMilli(n["cpu"], f + ".cpu"));
    if (n["memory"]) TESSERA_TRY_ASSIGN(pr.memory_mib, GetMemory(n["memory"], f + ".memory"));
    if (n["forms"]) TESSERA_TRY_ASSIGN(pr.forms, GetForms(n["forms"], f + ".forms"));
    if (n["pools"]) TESSERA_TRY_ASSIGN(pr.pools, GetStrings(n["pools"], f + ".pools"));
    // A CPU-only profile: a job of it that asks for GPUs gets whole ones unless it says
    // gpu_fraction itself, so a fraction here would be dropped without a word.
    if (pr.gpu_count == 0 && n["gpu_fraction"])
      return FieldError(f + ".gpu_fraction", "only for a profile of 1 or more gpus");
    if (pr.gpu_count == 0) pr.gpu_milli = 0;
    p.profiles.push_back(pr);
    return Status::Ok();
  });
}

Status ReadQueues(const YAML::Node& root, const PolicyKeys& keys, quota::PolicySpec& p) {
  TESSERA_TRY(List(root["queues"], "queues"));  // before the count: a map is not "no queues"
  if (keys.require_queues && (!root["queues"] || root["queues"].size() == 0)) {
    return FieldError("queues", "at least one queue is needed");
  }
  std::set<std::string> known = {
      "name",        "profile",     "groups",           "priority",     "preemptible", "class",
      "max_runtime", "min_runtime", "preemption_delay", "idle_timeout", "idle_action", "models"};
  known.insert("swap_hold_limit");
  known.insert(keys.extra_queue.begin(), keys.extra_queue.end());
  return ForEachEntry(root, "queues", [&](const YAML::Node& n, const std::string& f) -> Status {
    TESSERA_TRY(KnownKeys(n, f, known));
    quota::QueueSpec q;
    if (n["name"]) TESSERA_TRY_ASSIGN(q.name, GetString(n["name"], f + ".name"));
    if (n["profile"]) TESSERA_TRY_ASSIGN(q.profile, GetString(n["profile"], f + ".profile"));
    if (n["groups"]) TESSERA_TRY_ASSIGN(q.groups, GetStrings(n["groups"], f + ".groups"));
    // GPU models its jobs accept, in order: [H100-80GB, A100-80GB] (QueueSpec::models).
    if (n["models"]) TESSERA_TRY_ASSIGN(q.models, GetStrings(n["models"], f + ".models"));
    if (n["priority"]) {  // may be negative: a scavenger queue below the default 0
      std::string text;
      TESSERA_TRY_ASSIGN(text, GetString(n["priority"], f + ".priority"));
      const bool negative = !text.empty() && text[0] == '-';
      int64_t v = 0;
      TESSERA_TRY_ASSIGN(v, GetInt(YAML::Node(negative ? text.substr(1) : text), f + ".priority"));
      if (v > 1000000) return FieldError(f + ".priority", "must be within -1000000..1000000");
      q.priority = static_cast<int>(negative ? -v : v);
    }
    if (n["preemptible"]) {
      TESSERA_TRY_ASSIGN(q.preemptible, GetBool(n["preemptible"], f + ".preemptible"));
    }
    if (n["class"]) {
      std::string c;
      TESSERA_TRY_ASSIGN(c, GetString(n["class"], f + ".class"));
      auto cls = quota::ParseWorkloadClass(c);
      if (!cls.ok()) return FieldError(f + ".class", cls.status().message());
      q.default_class = *cls;
    }
    // Runtime guards (whole seconds; see QueueSpec): stopped at max_runtime; no victim before
    // min_runtime; may preempt only after preemption_delay of waiting.
    if (n["max_runtime"])
      TESSERA_TRY_ASSIGN(q.max_runtime_s, GetDuration(n["max_runtime"], f + ".max_runtime"));
    if (n["min_runtime"])
      TESSERA_TRY_ASSIGN(q.min_runtime_s, GetDuration(n["min_runtime"], f + ".min_runtime"));
    if (n["preemption_delay"]) {
      TESSERA_TRY_ASSIGN(q.preemption_delay_s,
                         GetDuration(n["preemption_delay"], f + ".preemption_delay"));
    }
    // Idle holdings given back: a share of a swapping queue is swapped out; anything else is
    // requeued (idle_action: requeue, the default) or stopped (idle_action: stop).
    if (n["idle_timeout"])
      TESSERA_TRY_ASSIGN(q.idle_timeout_s, GetDuration(n["idle_timeout"], f + ".idle_timeout"));
    if (n["idle_action"]) {
      std::string a;
      TESSERA_TRY_ASSIGN(a, GetString(n["idle_action"], f + ".idle_action"));
      if (a != "requeue" && a != "stop")
        return FieldError(f + ".idle_action", "must be requeue or stop, not '" + a + "'");
      if (!n["idle_timeout"]) return FieldError(f + ".idle_action", "needs idle_timeout");
      q.idle_action = a == "stop" ? quota::QueueSpec::IdleAction::kStop
                                  : quota::QueueSpec::IdleAction::kRequeue;
    }
    // Preemption by swapping: a share held swapped out this long is stopped (0: no limit).
    if (n["swap_hold_limit"]) {
      TESSERA_TRY_ASSIGN(q.swap_hold_limit_s,
                         GetDuration(n["swap_hold_limit"], f + ".swap_hold_limit"));
    }
    p.queues.push_back(q);
    return Status::Ok();
  });
}

}  // namespace

Result<quota::ClassForms> GetClassForms(const YAML::Node& n, const std::string& field,
                                        quota::ClassForms cf) {
  try {
    if (!n.IsMap()) return FieldError(field, "expected a map of class to forms");
    for (const auto& kv : n) {
      std::string k = Scalar(kv.first);
      auto c = quota::ParseWorkloadClass(k);
      if (!c.ok()) return FieldError(field, c.status().message());
      TESSERA_TRY_ASSIGN(cf.table[static_cast<int>(*c)], GetForms(kv.second, field + "." + k));
    }
    return cf;
  } catch (const YAML::Exception&
               e) {  // a key that is not a string (ParsePolicy's callers catch it too)
    return FieldError(field, std::string("not valid YAML: ") + e.what());
  }
}

Result<quota::PolicySpec> ParsePolicy(const YAML::Node& root, const PolicyKeys& keys) {
  try {
    std::set<std::string> known = kPolicyRoot;
    known.insert(keys.extra_root.begin(), keys.extra_root.end());
    TESSERA_TRY(KnownKeys(root, "top level", known));
    quota::PolicySpec p;
    if (root["grace"]) TESSERA_TRY_ASSIGN(p.grace_seconds, GetDuration(root["grace"], "grace"));
    if (root["placement"])
      TESSERA_TRY_ASSIGN(p.placement, GetString(root["placement"], "placement"));
    if (root["fair_share_half_life"]) {
      TESSERA_TRY_ASSIGN(p.fair_share_half_life_s,
                         GetDuration(root["fair_share_half_life"], "fair_share_half_life"));
    }
    if (root["repartition"]) {
      TESSERA_TRY_ASSIGN(p.repartition, GetBool(root["repartition"], "repartition"));
    }
    if (root["repartition_horizon"]) {
      TESSERA_TRY_ASSIGN(p.repartition_horizon_s,
                         GetDuration(root["repartition_horizon"], "repartition_horizon"));
    }
    TESSERA_TRY(ReadPools(root, p));
    TESSERA_TRY(ReadGroups(root, p));
    TESSERA_TRY(ReadProfiles(root, p));
    TESSERA_TRY(ReadQueues(root, keys, p));
    if (root["class_forms"]) {
      TESSERA_TRY_ASSIGN(p.class_forms,
                         GetClassForms(root["class_forms"], "class_forms", p.class_forms));
    }
    return p;
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(std::string("not valid YAML: ") + e.what());
  }
}

}  // namespace tessera::policy
