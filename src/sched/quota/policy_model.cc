#include "sched/quota/policy_model.h"

#include <algorithm>
#include <map>
#include <set>

#include "common/enum_names.h"
#include "model/quantity.h"
#include "partition/catalog.h"
#include "sched/policy.h"

namespace tessera::quota {
namespace {

constexpr auto kClassNames =
    NamesUpTo<WorkloadClass::kBatch>("training", "inference", "interactive", "ci", "batch");
static_assert(kClassNames.names.size() == kClassCount);

// The first component of `a` above `b`, by name, or nullptr.
const char* FirstAbove(const Resources& a, const Resources& b) {
  if (a.gpu_milli > b.gpu_milli) return "gpu";
  if (a.gpu_memory_mib > b.gpu_memory_mib) return "gpu_memory";
  if (a.cpu_milli > b.cpu_milli) return "cpu";
  if (a.memory_mib > b.memory_mib) return "memory";
  return nullptr;
}

std::string FormList(const std::vector<AllocationForm>& forms) {
  std::string s;
  for (AllocationForm f : forms) s += (s.empty() ? "" : ", ") + std::string(AllocationFormName(f));
  return s.empty() ? "none" : s;
}

}  // namespace

std::string GpuFamilyOf(std::string_view model) {
  return std::string(model.substr(0, model.find('-')));
}

bool IsGpuFamily(std::string_view name) {
  if (name.empty()) return false;
  for (const partition::GpuModel& m : partition::Catalog::BuiltIn().models()) {
    if (partition::EqualsIgnoreCase(GpuFamilyOf(m.name), name)) return true;
  }
  return false;
}

bool ModelCovers(std::string_view name, std::string_view model) {
  if (IsGpuFamily(name)) return partition::EqualsIgnoreCase(GpuFamilyOf(model), name);
  const partition::Catalog& c = partition::Catalog::BuiltIn();
  const partition::GpuModel* a = c.Find(name);
  const partition::GpuModel* b = c.Find(model);
  if (a != nullptr || b != nullptr) return a == b;
  return name == model;
}

Status CheckModelName(std::string_view name, const std::string& field) {
  if (IsGpuFamily(name) || partition::Catalog::BuiltIn().Find(name) != nullptr) return Status::Ok();
  std::set<std::string> families;
  for (const partition::GpuModel& m : partition::Catalog::BuiltIn().models())
    families.insert(GpuFamilyOf(m.name));
  std::string fams;
  for (const std::string& f : families) fams += (fams.empty() ? "" : ", ") + f;
  return Status::InvalidArgument(
      field + ": '" + std::string(name) + "' is neither a GPU model nor a family (models: " +
      partition::Catalog::BuiltIn().ModelNames() + "; families: " + fams + ")");
}

const char* WorkloadClassName(WorkloadClass c) { return kClassNames.Of(c, "unknown"); }

Result<WorkloadClass> ParseWorkloadClass(std::string_view text) {
  if (auto c = kClassNames.Find(text, /*ignore_case=*/true)) return *c;
  return Status::InvalidArgument("unknown workload class '" + std::string(text) +
                                 "' (known: " + kClassNames.List() + ")");
}

Result<AllocationForm> ParseAllocationForm(std::string_view text) {
  for (AllocationForm f :
       {AllocationForm::kWhole, AllocationForm::kPartition, AllocationForm::kShare}) {
    if (EqualIgnoringAsciiCase(text, AllocationFormName(f))) return f;
  }
  return Status::InvalidArgument("unknown allocation form '" + std::string(text) +
                                 "' (known: whole, partition, share)");
}

ClassForms ClassForms::Default() {
  ClassForms cf;
  using F = AllocationForm;
  cf.table[static_cast<int>(WorkloadClass::kTraining)] = {F::kWhole};
  cf.table[static_cast<int>(WorkloadClass::kInference)] = {F::kPartition};
  cf.table[static_cast<int>(WorkloadClass::kInteractive)] = {F::kShare};
  cf.table[static_cast<int>(WorkloadClass::kCi)] = {F::kShare};
  cf.table[static_cast<int>(WorkloadClass::kBatch)] = {F::kWhole, F::kShare};
  return cf;
}

namespace {

using GroupIndex = std::map<std::string, const GroupSpec*>;

// One per-model or per-pool quota's amounts (`kind` "models" or "pools", `key` the model or
// pool): non-negative, the reservation within its limit, the limit within the group's GPU limit.
Status CheckQuotaAmounts(const GroupSpec& g, const std::string& field, const char* kind,
                         const std::string& key, int64_t reservation, int64_t limit) {
  const std::string kf = field + "." + kind + "[" + key + "]";
  if (reservation < 0) return Status::InvalidArgument(kf + ".reservation is negative");
  if (limit < 0) return Status::InvalidArgument(kf + ".limit is negative");
  if (reservation > limit) {
    return Status::InvalidArgument(field + ".reservation." + kind + "[" + key +
                                   "] exceeds its limit (limit." + kind + "[" + key + "])");
  }
  if (limit != kUnlimited && limit > g.limit.gpu_milli) {
    return Status::InvalidArgument(field + ".limit." + kind + "[" + key +
                                   "] exceeds the group's GPU limit (limit.gpu)");
  }
  return Status::Ok();
}

// The per-model or per-pool reservations, `reserved` together, within the group's GPU one.
Status CheckQuotaSum(const GroupSpec& g, const std::string& field, const char* kind,
                     int64_t reserved) {
  if (reserved > g.reservation.gpu_milli) {
    return Status::InvalidArgument(field + ".reservation." + kind + " sum to " +
                                   FormatMilli(reserved) + " GPU, more than reservation.gpu " +
                                   FormatMilli(g.reservation.gpu_milli));
  }
  return Status::Ok();
}

// A group's quotas per GPU model: named once each, amounts non-negative, each reservation within
// its limit, and the reservations together within the group's GPU reservation.
Status ValidateModelQuotas(const GroupSpec& g, const std::string& field) {
  std::set<std::string> seen;
  int64_t reserved = 0;
  for (const ModelQuota& m : g.models) {
    if (m.model.empty())
      return Status::InvalidArgument(field + ".reservation.models: an empty model");
    if (!seen.insert(m.model).second)
      return Status::InvalidArgument(field + ".models[" + m.model + "] is named twice");
    if (Status s = CheckModelName(m.model, field + ".models"); !s.ok()) return s;
    if (Status s = CheckQuotaAmounts(g, field, "models", m.model, m.reservation, m.limit); !s.ok())
      return s;
    reserved += m.reservation;
  }
  if (Status s = CheckQuotaSum(g, field, "models", reserved); !s.ok()) return s;
  // A family's reservation and one of its models' would promise the same cards twice.
  for (const ModelQuota& a : g.models) {
    for (const ModelQuota& b : g.models) {
      if (&a == &b || a.reservation <= 0 || b.reservation <= 0 || !IsGpuFamily(a.model) ||
          IsGpuFamily(b.model) || !ModelCovers(a.model, b.model))
        continue;
      return Status::InvalidArgument(field + ".reservation.models[" + b.model +
                                     "] is inside the family reserved by reservation.models[" +
                                     a.model + "]: reserve one or the other");
    }
  }
  return Status::Ok();
}

// A group's quotas per pool: pools that exist, named once, amounts as for models.
Status ValidatePoolQuotas(const GroupSpec& g, const std::string& field,
                          const std::set<std::string>& pools) {
  std::set<std::string> seen;
  int64_t reserved = 0;
  for (const PoolQuota& q : g.pools) {
    if (q.pool.empty()) return Status::InvalidArgument(field + ".pools: an empty pool name");
    if (!seen.insert(q.pool).second)
      return Status::InvalidArgument(field + ".pools[" + q.pool + "] is named twice");
    if (!pools.empty() && !pools.count(q.pool))  // none declared: the nodes' pools
      return Status::InvalidArgument(field + ".pools: '" + q.pool + "' is not a pool");
    if (Status s = CheckQuotaAmounts(g, field, "pools", q.pool, q.reservation, q.limit); !s.ok())
      return s;
    reserved += q.reservation;
  }
  return CheckQuotaSum(g, field, "pools", reserved);
}

Status ValidateGroup(const GroupSpec& g, size_t i, GroupIndex* groups) {
  std::string field = "groups[" + (g.name.empty() ? std::to_string(i) : g.name) + "]";
  if (g.name.empty()) return Status::InvalidArgument(field + ".name is empty");
  if (!groups->emplace(g.name, &g).second) {
    return Status::InvalidArgument(field + ".name is used twice");
  }
  if (!g.reservation.NonNegative()) {
    return Status::InvalidArgument(field + ".reservation is negative");
  }
  if (!g.limit.NonNegative()) return Status::InvalidArgument(field + ".limit is negative");
  if (const char* c = FirstAbove(g.reservation, g.limit)) {
    return Status::InvalidArgument(field + ".reservation." + c + " exceeds its limit");
  }
  if (g.weight_milli <= 0) return Status::InvalidArgument(field + ".weight must be positive");
  std::set<std::string> members;
  for (const MemberSpec& m : g.members) {
    const std::string mf = field + ".users[" + m.identity + "]";
    if (m.identity.empty()) return Status::InvalidArgument(field + ".users: an empty identity");
    if (!members.insert(m.identity).second) {
      return Status::InvalidArgument(mf + " is listed twice");
    }
    if (m.weight_milli <= 0) return Status::InvalidArgument(mf + ".weight must be positive");
    if (!m.limit.NonNegative()) return Status::InvalidArgument(mf + ".limit is negative");
  }
  return ValidateModelQuotas(g, field);
}

// Parents exist, no cycles, children's reservations within the parent's.
Status ValidateGroupTree(const PolicySpec& p, GroupIndex* groups) {
  std::map<std::string, Resources> child_sum;
  for (const GroupSpec& g : p.groups) {
    if (g.parent.empty()) continue;
    std::string field = "groups[" + g.name + "].parent";
    if (!groups->count(g.parent)) {
      return Status::InvalidArgument(field + " '" + g.parent + "' is not a group");
    }
    std::set<std::string> seen{g.name};
    std::string child = g.name;
    for (std::string at = g.parent; !at.empty();) {
      auto it = groups->find(at);
      if (it == groups->end()) {  // an ancestor's parent, checked here before its own turn
        return Status::InvalidArgument("groups[" + child + "].parent '" + at + "' is not a group");
      }
      if (!seen.insert(at).second) {
        return Status::InvalidArgument(field + " forms a cycle through '" + at + "'");
      }
      child = at;
      at = it->second->parent;
    }
    child_sum[g.parent] += g.reservation;
  }
  for (const auto& [parent, sum] : child_sum) {
    if (const char* c = FirstAbove(sum, (*groups)[parent]->reservation)) {
      return Status::InvalidArgument("groups[" + parent + "].reservation." + c +
                                     " is below the sum of its children's reservations");
    }
  }
  return Status::Ok();
}

Status ValidatePool(const PoolSpec& pool, size_t i, std::set<std::string>* pools) {
  std::string field = "pools[" + (pool.name.empty() ? std::to_string(i) : pool.name) + "]";
  if (pool.name.empty()) return Status::InvalidArgument(field + ".name is empty");
  if (!pools->insert(pool.name).second) {
    return Status::InvalidArgument(field + ".name is used twice");
  }
  if (pool.forms.empty()) return Status::InvalidArgument(field + ".forms is empty");
  return Status::Ok();
}

Status ValidateProfile(const ProfileSpec& pr, size_t i, const std::set<std::string>& pools,
                       std::set<std::string>* profiles) {
  std::string field = "profiles[" + (pr.name.empty() ? std::to_string(i) : pr.name) + "]";
  if (pr.name.empty()) return Status::InvalidArgument(field + ".name is empty");
  if (!profiles->insert(pr.name).second) {
    return Status::InvalidArgument(field + ".name is used twice");
  }
  if (pr.gpu_count < 0) return Status::InvalidArgument(field + ".gpu_count is negative");
  if (pr.gpu_milli < 0 || pr.gpu_milli > kWholeGpu) {
    return Status::InvalidArgument(field +
                                   ".gpu_fraction must be a fraction of at most 1 per device");
  }
  if (pr.gpu_count > 1 && pr.gpu_milli != kWholeGpu) {
    return Status::InvalidArgument(field + ".gpu_fraction: a fraction needs gpu_count 1");
  }
  if (pr.gpu_count > 0 && pr.gpu_milli == 0) {
    return Status::InvalidArgument(field + ".gpu_fraction is zero with gpu_count > 0");
  }
  if (pr.gpu_memory_mib < 0 || pr.cpu_milli < 0 || pr.memory_mib < 0) {
    return Status::InvalidArgument(field + " has a negative amount");
  }
  if (std::find(pr.forms.begin(), pr.forms.end(), AllocationForm::kShare) != pr.forms.end() &&
      pr.gpu_count > 0 && pr.gpu_memory_mib == 0) {
    return Status::InvalidArgument(field + ".gpu_memory: a share needs a memory cap");
  }
  if (pr.max_gpus != 0 && pr.max_gpus < pr.gpu_count) {
    return Status::InvalidArgument(field + ".max_gpus is below gpus");
  }
  if (pr.max_gpu_memory_mib != 0 && pr.max_gpu_memory_mib < pr.gpu_memory_mib) {
    return Status::InvalidArgument(field + ".max_gpu_memory is below gpu_memory");
  }
  for (const std::string& pool : pr.pools) {
    if (!pools.count(pool)) {
      return Status::InvalidArgument(field + ".pools: '" + pool + "' is not a pool");
    }
  }
  return Status::Ok();
}

Status ValidateQueue(const PolicySpec& p, const QueueSpec& q, size_t i, const GroupIndex& groups,
                     const std::set<std::string>& profiles, std::set<std::string>* queues) {
  std::string field = "queues[" + (q.name.empty() ? std::to_string(i) : q.name) + "]";
  if (q.name.empty()) return Status::InvalidArgument(field + ".name is empty");
  if (!queues->insert(q.name).second) {
    return Status::InvalidArgument(field + ".name is used twice");
  }
  if (!profiles.count(q.profile)) {
    return Status::InvalidArgument(field + ".profile '" + q.profile + "' is not a profile");
  }
  if (q.groups.empty()) return Status::InvalidArgument(field + ".groups is empty");
  if (q.max_runtime_s < 0) return Status::InvalidArgument(field + ".max_runtime is negative");
  if (q.min_runtime_s < 0) return Status::InvalidArgument(field + ".min_runtime is negative");
  if (q.preemption_delay_s < 0)
    return Status::InvalidArgument(field + ".preemption_delay is negative");
  if (q.idle_timeout_s < 0) return Status::InvalidArgument(field + ".idle_timeout is negative");
  if (q.swap_hold_limit_s < 0)
    return Status::InvalidArgument(field + ".swap_hold_limit is negative");
  if (q.idle_timeout_s > 0 && q.external) {
    return Status::InvalidArgument(field +
                                   ".idle_timeout is only for queues placed by this scheduler");
  }
  for (const std::string& g : q.groups) {
    if (!groups.count(g)) {
      return Status::InvalidArgument(field + ".groups: '" + g + "' is not a group");
    }
  }
  for (size_t k = 0; k < q.models.size(); ++k) {
    if (q.models[k].empty()) return Status::InvalidArgument(field + ".models: an empty model");
    if (Status s = CheckModelName(q.models[k], field + ".models"); !s.ok()) return s;
    if (std::find(q.models.begin(), q.models.begin() + k, q.models[k]) != q.models.begin() + k)
      return Status::InvalidArgument(field + ".models: '" + q.models[k] + "' is listed twice");
    if (q.external) {
      return Status::InvalidArgument(field + ".models is only for queues placed by this scheduler");
    }
  }
  if (q.models.size() > 64) return Status::InvalidArgument(field + ".models: at most 64");
  const ProfileSpec& pr = *std::find_if(p.profiles.begin(), p.profiles.end(),
                                        [&](const ProfileSpec& x) { return x.name == q.profile; });
  auto forms = FormsFor(p, pr, q.default_class, std::nullopt);
  if (!forms.ok() && pr.gpu_count > 0) {
    return Status::InvalidArgument(field + ".class: " + forms.status().message());
  }
  return Status::Ok();
}

// The class-forms table and the policy-wide settings.
// A placement the cycle can build: "nextfit" (its own search) or a placement-core policy that
// needs no workload mix up front. One it cannot build would have the cycle fall back to next-fit
// without a word.
Status ValidatePlacement(const std::string& name) {
  if (name == "nextfit") return Status::Ok();
  auto made = sched::MakePolicy(name, {});
  if (made.ok()) return Status::Ok();
  std::string known = "nextfit";
  for (const std::string& n : sched::PolicyNames()) {
    if (sched::MakePolicy(n, {}).ok()) known += ", " + n;
  }
  const bool exists = std::find(sched::PolicyNames().begin(), sched::PolicyNames().end(), name) !=
                      sched::PolicyNames().end();
  return Status::InvalidArgument(
      "placement: " + (exists ? made.status().message() +
                                    ", which the cycle does not have (known here: " + known + ")"
                              : "unknown policy '" + name + "' (known: " + known + ")"));
}

Status ValidateSettings(const PolicySpec& p) {
  for (int c = 0; c < kClassCount; ++c) {
    if (p.class_forms.table[c].empty()) {
      return Status::InvalidArgument(std::string("class_forms.") +
                                     WorkloadClassName(static_cast<WorkloadClass>(c)) +
                                     " is empty");
    }
  }
  if (p.grace_seconds < 0) return Status::InvalidArgument("grace is negative");
  if (p.fair_share_half_life_s <= 0) {
    return Status::InvalidArgument("fair_share_half_life must be positive");
  }
  return ValidatePlacement(p.placement);
}

}  // namespace

Status Validate(const PolicySpec& p) {
  GroupIndex groups;
  for (size_t i = 0; i < p.groups.size(); ++i) {
    if (Status s = ValidateGroup(p.groups[i], i, &groups); !s.ok()) return s;
  }
  if (Status s = ValidateGroupTree(p, &groups); !s.ok()) return s;
  std::set<std::string> pools;
  for (size_t i = 0; i < p.pools.size(); ++i) {
    if (Status s = ValidatePool(p.pools[i], i, &pools); !s.ok()) return s;
  }
  for (const GroupSpec& g : p.groups) {
    if (Status s = ValidatePoolQuotas(g, "groups[" + g.name + "]", pools); !s.ok()) return s;
  }
  std::set<std::string> profiles;
  for (size_t i = 0; i < p.profiles.size(); ++i) {
    if (Status s = ValidateProfile(p.profiles[i], i, pools, &profiles); !s.ok()) return s;
  }
  std::set<std::string> queues;
  for (size_t i = 0; i < p.queues.size(); ++i) {
    if (Status s = ValidateQueue(p, p.queues[i], i, groups, profiles, &queues); !s.ok()) return s;
  }
  return ValidateSettings(p);
}

Result<std::vector<AllocationForm>> FormsFor(const PolicySpec& policy, const ProfileSpec& profile,
                                             WorkloadClass cls,
                                             std::optional<AllocationForm> asked) {
  std::vector<AllocationForm> out;
  for (AllocationForm f : policy.class_forms.of(cls)) {
    if (profile.forms.empty() ||
        std::find(profile.forms.begin(), profile.forms.end(), f) != profile.forms.end()) {
      out.push_back(f);
    }
  }
  if (out.empty()) {
    return Status::InvalidArgument(std::string("class ") + WorkloadClassName(cls) + " allows " +
                                   FormList(policy.class_forms.of(cls)) + " but profile '" +
                                   profile.name + "' accepts " + FormList(profile.forms));
  }
  if (asked) {
    if (std::find(out.begin(), out.end(), *asked) == out.end()) {
      return Status::InvalidArgument(std::string("form ") + AllocationFormName(*asked) +
                                     " is not allowed for class " + WorkloadClassName(cls) +
                                     " in profile '" + profile.name +
                                     "' (allowed: " + FormList(out) + ")");
    }
    return std::vector<AllocationForm>{*asked};
  }
  return out;
}

}  // namespace tessera::quota
