// The quota engine: quota per GPU model (GroupSpec::models) and a queue's ordered models
// (QueueSpec::models). See docs/scheduling.md, "Quota per GPU model", and engine_impl.h.
//
// The rule, in exact milli-GPU: a grant charges a model what it charges the group's GPU total
// (ChargeOf: a whole card 1000, a partition its compute share, a share its compute weight), on
// its device's model. A group's per-model reservations are promises on those models; its GPU
// reservation less their sum (generic_res) may be held on any model. A placement is guaranteed
// when the group's totals stay within its reservation and either it stays within the per-model
// reservation of its model, or what the group holds past its per-model reservations, summed over
// models, stays within generic_res; else it borrows. Reserving
// {gpu: 12, models: {H100-80GB: 4}} guarantees 4 H100 and 8 of anything.
#include "sched/quota/engine_impl.h"

namespace tessera::quota::internal {
namespace {

// Catalog models by their catalog name (so "H100" and "H100-80GB" agree when the catalog
// knows both); anything else by the name as given.
std::string Canonical(const std::string& name) {
  const part::GpuModel* m = name.empty() ? nullptr : part::Catalog::BuiltIn().Find(name);
  return m ? m->name : name;
}

int64_t Excess(int64_t held, int64_t reserved) { return std::max<int64_t>(0, held - reserved); }

}  // namespace

int Engine::FindModel(const std::string& name) const {
  auto it = model_index_.find(Canonical(name));
  return it == model_index_.end() ? -1 : it->second;
}

int Engine::ModelId(const std::string& name) {
  const std::string c = Canonical(name);
  auto it = model_index_.find(c);
  if (it != model_index_.end()) return it->second;
  if (model_names_.size() >= 64) return -1;
  const int id = static_cast<int>(model_names_.size());
  model_names_.push_back(c);
  model_index_[c] = id;
  model_mirror_.push_back(0);
  return id;
}

Status Engine::InitModels() {
  for (GroupRt& g : groups_) {
    g.model_limit.fill(kUnlimited);
    int64_t reserved = 0;
    for (const ModelQuota& m : g.spec.models) {
      const int id = ModelId(m.model);
      if (id < 0) {
        return Status::InvalidArgument("groups[" + g.spec.name + "].models: at most 64 GPU models");
      }
      g.model_res[id] = m.reservation;
      g.model_limit[id] = m.limit;
      reserved += m.reservation;
      g.model_quota = true;
    }
    g.generic_res = g.spec.reservation.gpu_milli - reserved;
    any_model_quota_ = any_model_quota_ || g.model_quota;
  }
  for (const QueueSpec& q : policy_.queues) {
    uint64_t mask = q.models.empty() ? ~uint64_t{0} : 0;
    std::vector<int> order;
    for (const std::string& m : q.models) {
      const int id = ModelId(m);
      if (id < 0) return Status::InvalidArgument("queues[" + q.name + "].models: at most 64");
      mask |= uint64_t{1} << id;
      order.push_back(id);
    }
    queue_model_mask_.push_back(mask);
    queue_model_order_.push_back(std::move(order));
  }
  return Status::Ok();
}

bool Engine::ChainHasModelQuota(int g) const {
  for (; g >= 0; g = groups_[g].parent) {
    if (groups_[g].model_quota) return true;
  }
  return false;
}

std::vector<std::pair<int, MilliGpu>> Engine::ModelCharge(const std::vector<Grant>& grants) const {
  std::vector<std::pair<int, MilliGpu>> out;
  for (const Grant& g : grants) {
    if (g.dev < 0) continue;
    const int m = devs_[g.dev].model_id;
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& p) { return p.first == m; });
    if (it == out.end()) {
      out.push_back({m, g.compute});
    } else {
      it->second += g.compute;
    }
  }
  return out;
}

void Engine::AddModelUsage(int g, const std::vector<std::pair<int, MilliGpu>>& mc, int sign) {
  for (; g >= 0; g = groups_[g].parent) {
    for (const auto& [m, c] : mc) groups_[g].model_usage[m] += sign * c;
  }
}

Status Engine::ModelAdmission(const Job& j, const std::vector<Grant>& grants,
                              bool* guaranteed) const {
  if (!any_model_quota_ || !ChainHasModelQuota(j.group)) return Status::Ok();
  const auto mc = ModelCharge(grants);
  if (options_.engine_break != EngineOptions::Break::kIgnoreLimits) {
    for (int g = j.group; g >= 0; g = groups_[g].parent) {
      const GroupRt& gr = groups_[g];
      for (const auto& [m, c] : mc) {
        if (c > 0 && gr.model_usage[m] + c > gr.model_limit[m]) {
          return Status::ResourceExhausted("group " + gr.spec.name + " at its " + model_names_[m] +
                                           " limit: holds " + FormatMilli(gr.model_usage[m]) +
                                           " GPU, job needs " + FormatMilli(c) + ", limit " +
                                           FormatMilli(gr.model_limit[m]));
        }
      }
    }
  }
  const GroupRt& own = groups_[j.group];
  if (!own.model_quota || !*guaranteed) return Status::Ok();
  // Inside its per-model reservations: guaranteed (the promise on those models), whatever the
  // group borrows on others.
  bool within_models = true;
  for (const auto& [m, c] : mc)
    within_models = within_models && own.model_usage[m] + c <= own.model_res[m];
  if (within_models) return Status::Ok();
  int64_t excess = 0;
  for (size_t m = 0; m < model_names_.size(); ++m) {
    int64_t held = own.model_usage[m];
    for (const auto& [k, c] : mc) {
      if (k == static_cast<int>(m)) held += c;
    }
    excess += Excess(held, own.model_res[m]);
  }
  if (excess > own.generic_res) *guaranteed = false;
  return Status::Ok();
}

std::vector<uint64_t> Engine::ModelsToTry(const Job& j, std::string* reason) const {
  const bool whole_only = j.forms.size() == 1 && j.forms.front() == AllocationForm::kWhole;
  const int64_t nominal = j.gpu_count * (whole_only ? kWholeGpu : j.gpu_milli);
  std::vector<uint64_t> masks;
  if (j.model_order.empty()) {
    masks.push_back(j.queue_models);
  } else {
    for (int m : j.model_order) masks.push_back(uint64_t{1} << m);
  }
  if (!any_model_quota_ || !ChainHasModelQuota(j.group) ||
      options_.engine_break == EngineOptions::Break::kIgnoreLimits) {
    return masks;
  }
  std::vector<uint64_t> out;
  for (uint64_t mask : masks) {
    for (int g = j.group; g >= 0; g = groups_[g].parent) {
      const GroupRt& gr = groups_[g];
      if (!gr.model_quota) continue;
      for (size_t m = 0; m < model_names_.size(); ++m) {
        if (!((mask >> m) & 1u) || gr.model_usage[m] + nominal <= gr.model_limit[m]) continue;
        mask &= ~(uint64_t{1} << m);
        if (reason->empty()) {
          *reason = "group " + gr.spec.name + " at its " + model_names_[m] + " limit: holds " +
                    FormatMilli(gr.model_usage[m]) + " GPU, job needs " + FormatMilli(nominal) +
                    ", limit " + FormatMilli(gr.model_limit[m]);
        }
      }
    }
    if (mask != 0) out.push_back(mask);
  }
  return out;
}

bool Engine::TryPlace(int self, std::string* step, std::string* reason, bool* backfilled,
                      bool guaranteed_only) {
  Job& j = jobs_[self];
  if (j.external || (j.model_order.empty() && !(any_model_quota_ && ChainHasModelQuota(j.group))))
    return TryPlaceIn(self, step, reason, backfilled, guaranteed_only);
  std::string at_limit;
  // Only where it would stay inside its group's reservation: the models ReclaimModels names (a
  // bench's look-ahead once searched every model of 56,000 jobs each cycle for nothing).
  const std::vector<uint64_t> masks = guaranteed_only && groups_[j.group].model_quota
                                          ? ReclaimModels(j)
                                          : ModelsToTry(j, &at_limit);
  if (masks.empty()) {
    *step = "Admission";
    *reason = at_limit.empty() ? "no model it accepts keeps it inside its reservation" : at_limit;
    return false;
  }
  // In the queue's order: the first model with room (and quota) takes it; the reason a job
  // waits is its first choice's.
  std::string first_step, first_reason;
  bool placed = false;
  for (uint64_t mask : masks) {
    j.models = mask;
    placed = TryPlaceIn(self, step, reason, backfilled, guaranteed_only);
    if (placed) break;
    if (first_step.empty()) first_step = *step, first_reason = *reason;
  }
  j.models = j.queue_models;
  if (!placed) {
    *step = first_step;
    *reason = first_reason;
    if (masks.size() > 1) *reason += " (nor on its queue's other models)";
  }
  return placed;
}

std::vector<uint64_t> Engine::ReclaimModels(const Job& j) const {
  std::vector<int> cands = j.model_order;
  if (cands.empty()) {
    for (size_t m = 0; m < model_names_.size(); ++m) {
      if ((j.queue_models >> m) & 1u) cands.push_back(static_cast<int>(m));
    }
  }
  const GroupRt& g = groups_[j.group];
  const int64_t nominal = j.gpu_count * j.gpu_milli;
  std::vector<int> below, other;
  int64_t excess = 0;
  auto held = [&](int m) {
    auto it = claimed_model_.find({j.group, m});
    return g.model_usage[m] + (it == claimed_model_.end() ? 0 : it->second);
  };
  for (size_t m = 0; m < model_names_.size(); ++m) {
    excess += Excess(held(static_cast<int>(m)), g.model_res[m]);
  }
  std::string ignored;
  const std::vector<uint64_t> open = ModelsToTry(j, &ignored);  // not at a limit
  uint64_t open_mask = 0;
  for (uint64_t m : open) open_mask |= m;
  for (int m : cands) {
    if (!((open_mask >> m) & 1u)) continue;
    const int64_t h = held(m);
    if (g.model_res[m] > 0 && h + nominal <= g.model_res[m]) {
      below.push_back(m);
    } else if (excess - Excess(h, g.model_res[m]) + Excess(h + nominal, g.model_res[m]) <=
               g.generic_res) {
      other.push_back(m);
    }
  }
  std::vector<uint64_t> out;
  auto add = [&](const std::vector<int>& ms) {
    if (ms.empty()) return;
    if (!j.model_order.empty()) {
      for (int m : ms) out.push_back(uint64_t{1} << m);
      return;
    }
    uint64_t mask = 0;
    for (int m : ms) mask |= uint64_t{1} << m;
    out.push_back(mask);
  };
  add(below);
  add(other);
  return out;
}

bool Engine::TryReclaim(int self) {
  Job& j = jobs_[self];
  j.claim_model = -1;
  if (j.external || (j.model_order.empty() && !groups_[j.group].model_quota))
    return TryPreempt(self, /*reclaim=*/true);
  std::vector<uint64_t> masks;
  if (groups_[j.group].model_quota) {
    masks = ReclaimModels(j);
  } else {
    for (int m : j.model_order) masks.push_back(uint64_t{1} << m);
  }
  bool tried = false;
  for (uint64_t mask : masks) {
    j.models = mask;
    tried = TryPreempt(self, /*reclaim=*/true);
    if (tried) break;
  }
  j.models = j.queue_models;
  return tried;
}

bool Engine::KeepsModelReservations(int g, const std::map<int, int64_t>& taken) const {
  const GroupRt& gr = groups_[g];
  if (!gr.model_quota || options_.engine_break == EngineOptions::Break::kReclaimAnyBorrower)
    return true;
  for (const auto& [m, t] : taken) {
    if (gr.model_res[m] <= 0) continue;
    auto it = leaving_model_.find({g, m});
    const int64_t leaving = it == leaving_model_.end() ? 0 : it->second;
    if (gr.model_usage[m] - leaving - t < gr.model_res[m]) return false;
  }
  return true;
}

void Engine::AddLeaving(const Job& x, int sign) {
  AddToChain(leaving_gpu_, x.group, sign * x.charge.gpu_milli);
  if (!any_model_quota_) return;
  for (const auto& [m, c] : x.model_charge) leaving_model_[{x.group, m}] += sign * c;
}

}  // namespace tessera::quota::internal
