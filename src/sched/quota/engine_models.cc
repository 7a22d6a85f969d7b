// The quota engine: quota per GPU model or family (GroupSpec::models), per pool
// (GroupSpec::pools) and a queue's ordered models (QueueSpec::models). See docs/scheduling.md,
// "Quota per GPU model" and "Quota per pool", quota_cells.h and engine_impl.h. Everything below
// holds along both dimensions; the text says models.
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

int Engine::ModelId(const std::string& name) {
  const std::string c = Canonical(name);
  auto it = model_index_.find(c);
  if (it != model_index_.end()) return it->second;
  if (model_names_.size() >= 64) return -1;
  const int id = static_cast<int>(model_names_.size());
  model_names_.push_back(c);
  model_index_[c] = id;
  model_mirror_.push_back(0);
  NewModel(id);
  return id;
}

void Engine::NewModel(int id) {
  const uint64_t bit = uint64_t{1} << id;
  const std::string& name = model_names_[id];
  for (GroupRt& g : groups_) {
    DimQuota& md = g.dims[kModelDim];
    for (size_t k = 0; k < md.quotas.size(); ++k) {
      CellQuota& q = md.quotas[k];
      if (!q.family || !ModelCovers(q.name, name)) continue;
      q.cells |= bit;
      if (q.res > 0) md.reserving[id] = static_cast<int8_t>(k);
    }
  }
  std::vector<bool> grew(queue_model_order_.size(), false);
  for (size_t qi = 0; qi < queue_model_order_.size(); ++qi) {
    const std::vector<std::string>& names = policy_.queues[qi].models;
    for (size_t k = 0; k < names.size() && k < queue_model_order_[qi].size(); ++k) {
      if (!IsGpuFamily(names[k]) || !ModelCovers(names[k], name)) continue;
      queue_model_order_[qi][k] |= bit;
      queue_model_mask_[qi] |= bit;
      grew[qi] = true;
    }
  }
  // Jobs already submitted to those queues accept it too (a job's masks are its queue's).
  for (Job& j : jobs_) {
    if (static_cast<size_t>(j.queue) >= grew.size() || !grew[j.queue]) continue;
    j.queue_models = j.models = queue_model_mask_[j.queue];
    j.model_order = queue_model_order_[j.queue];
  }
}

Status Engine::InitModels() {
  // A model or family's cells (a family's catalog models get their ids now).
  auto model_cells = [&](const std::string& name, bool* family) -> uint64_t {
    *family = IsGpuFamily(name);
    uint64_t cells = 0;
    if (*family) {
      for (const part::GpuModel& m : part::Catalog::BuiltIn().models()) {
        if (!ModelCovers(name, m.name)) continue;
        const int id = ModelId(m.name);
        if (id >= 0) cells |= uint64_t{1} << id;
      }
      return cells;
    }
    const int id = ModelId(name);
    return id < 0 ? 0 : uint64_t{1} << id;
  };
  for (GroupRt& g : groups_) {
    DimQuota& md = g.dims[kModelDim];
    int64_t reserved = 0;
    for (const ModelQuota& m : g.spec.models) {
      CellQuota q{m.model, false, 0, m.reservation, m.limit};
      q.cells = model_cells(m.model, &q.family);
      if (q.cells == 0) {
        return Status::InvalidArgument("groups[" + g.spec.name + "].models: at most 64 GPU models");
      }
      md.quotas.push_back(q);
      reserved += m.reservation;
      md.on = true;
    }
    md.generic_res = g.spec.reservation.gpu_milli - reserved;
    DimQuota& pd = g.dims[kPoolDim];
    reserved = 0;
    for (const PoolQuota& pq : g.spec.pools) {
      CellQuota q{pq.pool, false, 0, pq.reservation, pq.limit};
      for (size_t p = 0; p < policy_.pools.size(); ++p) {
        if (policy_.pools[p].name == pq.pool) q.cells = uint64_t{1} << p;
      }
      pd.quotas.push_back(q);
      reserved += pq.reservation;
      pd.on = true;
    }
    pd.generic_res = g.spec.reservation.gpu_milli - reserved;
    for (int d = 0; d < kDims; ++d) {
      DimQuota& dq = g.dims[d];
      for (size_t k = 0; k < dq.quotas.size(); ++k) {
        for (uint64_t c = dq.quotas[k].cells; dq.quotas[k].res > 0 && c != 0; c &= c - 1)
          dq.reserving[__builtin_ctzll(c)] = static_cast<int8_t>(k);
      }
      any_quota_[d] = any_quota_[d] || dq.on;
    }
  }
  for (const QueueSpec& q : policy_.queues) {
    uint64_t mask = q.models.empty() ? ~uint64_t{0} : 0;
    std::vector<uint64_t> order;
    for (const std::string& m : q.models) {
      bool family = false;
      const uint64_t cells = model_cells(m, &family);
      if (cells == 0 && !family)
        return Status::InvalidArgument("queues[" + q.name + "].models: at most 64");
      mask |= cells;
      order.push_back(cells);
    }
    queue_model_mask_.push_back(mask);
    queue_model_order_.push_back(std::move(order));
  }
  return Status::Ok();
}

bool Engine::ChainHasQuota(int d, int g) const {
  for (; g >= 0; g = groups_[g].parent) {
    if (groups_[g].dims[d].on) return true;
  }
  return false;
}

CellCharge Engine::ChargeCells(int d, const std::vector<Grant>& grants) const {
  CellCharge out;
  for (const Grant& g : grants) {
    if (g.dev < 0) continue;
    const int m = CellOf(d, g.dev);
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& p) { return p.first == m; });
    if (it == out.end()) {
      out.push_back({m, g.compute});
    } else {
      it->second += g.compute;
    }
  }
  return out;
}

void Engine::ChargeJobCells(Job& j, int sign) {
  for (int d = 0; d < kDims; ++d) {
    if (sign > 0) j.cell_charge[d] = ChargeCells(d, j.grants);
    for (int g = j.group; g >= 0; g = groups_[g].parent) {
      for (const auto& [c, v] : j.cell_charge[d]) groups_[g].dims[d].usage[c] += sign * v;
    }
    if (sign < 0) j.cell_charge[d].clear();
  }
}

Status Engine::CellAdmission(const Job& j, const std::vector<Grant>& grants,
                             bool* guaranteed) const {
  for (int d = 0; d < kDims; ++d) {
    if (!any_quota_[d] || !ChainHasQuota(d, j.group)) continue;
    const CellCharge mc = ChargeCells(d, grants);
    auto charged = [&](uint64_t cells) {
      int64_t c = 0;
      for (const auto& [cell, v] : mc) c += ((cells >> cell) & 1u) ? v : 0;
      return c;
    };
    if (options_.engine_break != EngineOptions::Break::kIgnoreLimits) {
      for (int g = j.group; g >= 0; g = groups_[g].parent) {
        const DimQuota& dq = groups_[g].dims[d];
        for (const CellQuota& q : dq.quotas) {
          const int64_t c = charged(q.cells);
          if (c > 0 && q.limit < kUnlimited && dq.Held(q.cells) + c > q.limit) {
            return Status::ResourceExhausted("group " + groups_[g].spec.name + " at its " +
                                             QuotaName(d, q.name) + " limit: holds " +
                                             FormatMilli(dq.Held(q.cells)) + " GPU, job needs " +
                                             FormatMilli(c) + ", limit " + FormatMilli(q.limit));
          }
        }
      }
    }
    const DimQuota& own = groups_[j.group].dims[d];
    if (!own.on || !*guaranteed) continue;
    // Inside the reservations covering the cells it lands on: guaranteed (the promise there),
    // whatever the group borrows elsewhere.
    bool within = true;
    for (const auto& [cell, v] : mc) {
      const int r = own.reserving[cell];
      within = within && r >= 0 &&
               own.Held(own.quotas[r].cells) + charged(own.quotas[r].cells) <= own.quotas[r].res;
    }
    if (within) continue;
    std::array<int64_t, 64> held = own.usage;
    for (const auto& [cell, v] : mc) held[cell] += v;
    int64_t excess = 0;
    for (int c = 0; c < CellCount(d); ++c) excess += own.reserving[c] < 0 ? held[c] : 0;
    for (const CellQuota& q : own.quotas) {
      if (q.res <= 0) continue;
      int64_t h = 0;
      for (uint64_t m = q.cells; m != 0; m &= m - 1) h += held[__builtin_ctzll(m)];
      excess += Excess(h, q.res);
    }
    if (excess > own.generic_res) *guaranteed = false;
  }
  return Status::Ok();
}

std::vector<uint64_t> Engine::CellsWithin(int d, const Job& j, std::vector<uint64_t> masks,
                                          std::string* reason) const {
  if (!any_quota_[d] || !ChainHasQuota(d, j.group) ||
      options_.engine_break == EngineOptions::Break::kIgnoreLimits) {
    return masks;
  }
  const bool whole_only = j.forms.size() == 1 && j.forms.front() == AllocationForm::kWhole;
  const int64_t nominal = j.gpu_count * (whole_only ? kWholeGpu : j.gpu_milli);
  std::vector<uint64_t> out;
  for (uint64_t mask : masks) {
    for (int g = j.group; g >= 0; g = groups_[g].parent) {
      const DimQuota& dq = groups_[g].dims[d];
      for (const CellQuota& q : dq.quotas) {
        if (!(mask & q.cells) || q.limit >= kUnlimited || dq.Held(q.cells) + nominal <= q.limit)
          continue;
        mask &= ~q.cells;
        if (reason->empty()) {
          *reason = "group " + groups_[g].spec.name + " at its " + QuotaName(d, q.name) +
                    " limit: holds " + FormatMilli(dq.Held(q.cells)) + " GPU, job needs " +
                    FormatMilli(nominal) + ", limit " + FormatMilli(q.limit);
        }
      }
    }
    if (mask != 0) out.push_back(mask);
  }
  return out;
}

std::vector<uint64_t> Engine::ModelsToTry(const Job& j, std::string* reason) const {
  std::vector<uint64_t> masks = j.model_order;
  if (masks.empty()) masks.push_back(j.queue_models);
  return CellsWithin(kModelDim, j, std::move(masks), reason);
}

bool Engine::TryPlace(int self, std::string* step, std::string* reason, bool* backfilled,
                      bool guaranteed_only) {
  Job& j = jobs_[self];
  const bool model_quota = any_quota_[kModelDim] && ChainHasQuota(kModelDim, j.group);
  const bool pool_quota = any_quota_[kPoolDim] && ChainHasQuota(kPoolDim, j.group);
  if (j.external || (j.model_order.empty() && !model_quota && !pool_quota))
    return TryPlaceIn(self, step, reason, backfilled, guaranteed_only);
  std::string at_limit;
  // Only where it would stay inside its group's reservation: the cells ReclaimCells names (a
  // bench's look-ahead once searched every model of 56,000 jobs each cycle for nothing).
  const GroupRt& own = groups_[j.group];
  const std::vector<uint64_t> masks = guaranteed_only && own.dims[kModelDim].on
                                          ? ReclaimCells(kModelDim, j)
                                          : ModelsToTry(j, &at_limit);
  const uint64_t pools = j.pools;
  std::string pool_limit;  // a pool left out at its limit, said when the others have no room
  const std::vector<uint64_t> pool_masks = !pool_quota ? std::vector<uint64_t>{pools}
                                           : guaranteed_only && own.dims[kPoolDim].on
                                               ? ReclaimCells(kPoolDim, j)
                                               : CellsWithin(kPoolDim, j, {pools}, &pool_limit);
  if (at_limit.empty()) at_limit = pool_limit;
  if (masks.empty() || pool_masks.empty()) {
    *step = "Admission";
    *reason =
        at_limit.empty() ? "no model or pool it accepts keeps it inside its reservation" : at_limit;
    return false;
  }
  // In the queue's order: the first model with room (and quota) takes it; the reason a job
  // waits is its first choice's.
  std::string first_step, first_reason;
  bool placed = false;
  for (uint64_t mask : masks) {
    for (uint64_t pm : pool_masks) {
      j.models = mask;
      j.pools = pm;
      placed = TryPlaceIn(self, step, reason, backfilled, guaranteed_only);
      if (placed) break;
      if (first_step.empty()) first_step = *step, first_reason = *reason;
    }
    if (placed) break;
  }
  j.models = j.queue_models;
  j.pools = pools;
  if (!placed) {
    *step = first_step;
    *reason = first_reason;
    if (masks.size() > 1) *reason += " (nor on its queue's other models)";
    if (pool_masks.size() > 1) *reason += " (nor in its other pools)";
    if (!pool_limit.empty()) *reason += "; " + pool_limit;
  }
  return placed;
}

std::vector<uint64_t> Engine::ReclaimCells(int d, const Job& j) const {
  std::vector<uint64_t> order = d == kModelDim ? j.model_order : std::vector<uint64_t>{};
  if (order.empty()) order.push_back(d == kModelDim ? j.queue_models : j.pools);
  const DimQuota& g = groups_[j.group].dims[d];
  const int64_t nominal = j.gpu_count * j.gpu_milli;
  std::array<int64_t, 64> held = g.usage;  // and its claims in flight
  for (const auto& [k, v] : claimed_cells_) {
    if (k[0] == d && k[1] == j.group) held[k[2]] += v;
  }
  auto quota_held = [&](const CellQuota& q) {
    int64_t h = 0;
    for (uint64_t m = q.cells; m != 0; m &= m - 1) h += held[__builtin_ctzll(m)];
    return h;
  };
  int64_t excess = 0;
  for (int c = 0; c < CellCount(d); ++c) excess += g.reserving[c] < 0 ? held[c] : 0;
  for (const CellQuota& q : g.quotas) excess += q.res > 0 ? Excess(quota_held(q), q.res) : 0;
  std::string ignored;
  uint64_t open = 0;  // not at a limit
  for (uint64_t m : CellsWithin(d, j, order, &ignored)) open |= m;
  uint64_t below = 0, other = 0;
  for (int c = 0; c < CellCount(d); ++c) {
    if (!((open >> c) & 1u)) continue;
    const int r = g.reserving[c];
    const int64_t h = r >= 0 ? quota_held(g.quotas[r]) : 0;
    if (r >= 0 && h + nominal <= g.quotas[r].res) {
      below |= uint64_t{1} << c;
    } else if (r >= 0
                   ? excess - Excess(h, g.quotas[r].res) + Excess(h + nominal, g.quotas[r].res) <=
                         g.generic_res
                   : excess + nominal <= g.generic_res) {
      other |= uint64_t{1} << c;
    }
  }
  // The queue's order within each: below a reservation first, then the rest.
  std::vector<uint64_t> out;
  for (uint64_t set : {below, other}) {
    for (uint64_t o : order) {
      if (o & set) out.push_back(o & set);
    }
  }
  return out;
}

bool Engine::TryReclaim(int self) {
  Job& j = jobs_[self];
  j.claim_cell = {-1, -1};
  const GroupRt& g = groups_[j.group];
  if (j.external || (j.model_order.empty() && !g.dims[kModelDim].on && !g.dims[kPoolDim].on))
    return TryPreempt(self, /*reclaim=*/true);
  std::vector<uint64_t> masks = j.model_order;
  if (g.dims[kModelDim].on) {
    masks = ReclaimCells(kModelDim, j);
  } else if (masks.empty()) {
    masks.push_back(j.queue_models);
  }
  const uint64_t pools = j.pools;
  const std::vector<uint64_t> pool_masks =
      g.dims[kPoolDim].on ? ReclaimCells(kPoolDim, j) : std::vector<uint64_t>{pools};
  bool tried = false;
  for (uint64_t mask : masks) {
    for (uint64_t pm : pool_masks) {
      j.models = mask;
      j.pools = pm;
      tried = TryPreempt(self, /*reclaim=*/true);
      if (tried) break;
    }
    if (tried) break;
  }
  j.models = j.queue_models;
  j.pools = pools;
  return tried;
}

bool Engine::KeepsReservations(int g, const CellTaken& taken) const {
  if (options_.engine_break == EngineOptions::Break::kReclaimAnyBorrower) return true;
  for (int d = 0; d < kDims; ++d) {
    const DimQuota& dq = groups_[g].dims[d];
    if (!dq.on || taken[d].empty()) continue;
    for (const CellQuota& q : dq.quotas) {
      if (q.res <= 0) continue;
      int64_t t = 0, leaving = 0;
      for (const auto& [c, v] : taken[d]) t += ((q.cells >> c) & 1u) ? v : 0;
      if (t == 0) continue;
      for (uint64_t m = q.cells; m != 0; m &= m - 1) {
        auto it = leaving_cells_.find({d, g, __builtin_ctzll(m)});
        leaving += it == leaving_cells_.end() ? 0 : it->second;
      }
      if (dq.Held(q.cells) - leaving - t < q.res) return false;
    }
  }
  return true;
}

void Engine::AddTaken(const Job& x, CellTaken* taken) const {
  for (int d = 0; d < kDims; ++d) {
    for (const auto& [c, v] : x.cell_charge[d]) (*taken)[d][c] += v;
  }
}

void Engine::AddClaim(const Job& j, int64_t gpu_milli) {
  for (int d = 0; d < kDims; ++d) {
    if (any_quota_[d] && j.claim_cell[d] >= 0)
      claimed_cells_[{d, j.group, j.claim_cell[d]}] += gpu_milli;
  }
}

void Engine::AddLeaving(const Job& x, int sign) {
  AddToChain(leaving_gpu_, x.group, sign * x.charge.gpu_milli);
  for (int d = 0; d < kDims; ++d) {
    if (!any_quota_[d]) continue;
    for (const auto& [c, v] : x.cell_charge[d]) leaving_cells_[{d, x.group, c}] += sign * v;
  }
}

}  // namespace tessera::quota::internal
