// The quota engine: placement in a partition of a card, MIG on NVIDIA and compute/memory
// partitions on AMD (FindPartition and the per-card steps it tries).
#include "sched/quota/engine_impl.h"

namespace tessera::quota::internal {

bool Engine::MigPartitionAt(const Job& j, size_t di, int pass, Candidate* c) {
  const Dev& d = devs_[di];
  int pi = BestMigProfile(d.model, j.gpu_milli, j.gpu_mem);
  if (pi < 0) return false;
  const part::MigProfile& p = d.model->mig.profiles[pi];
  int di_int = static_cast<int>(di);
  if (pass == 0 && d.mig) {
    for (size_t s = 0; s < d.slots.size(); ++s) {
      if (d.slots[s].alive && d.slots[s].holder < 0 && d.slots[s].profile == p.name) {
        c->grants = {{d.node, di_int, static_cast<int>(s), d.slots[s].memory, d.slots[s].compute,
                      j.cpu, j.mem}};
        cursor_dev_part_ = di;
        return true;
      }
    }
  } else if (pass == 1 && d.mig && !((d.no_start >> pi) & 1u)) {
    part::Layout layout;
    for (const Slot& s : d.slots) {
      if (s.alive) layout.instances.push_back({s.profile, s.start});
    }
    auto starts = part::LegalStarts(*d.model, layout, p.name);
    if (options_.engine_break == EngineOptions::Break::kMigOverlap && !layout.instances.empty() &&
        starts.ok()) {
      starts->assign(1, layout.instances.front().start);
    }
    if (starts.ok() && !starts->empty()) {
      c->create = {{di_int, part::Instance{p.name, starts->front()}}};
      c->grants = {{d.node, di_int, static_cast<int>(d.slots.size()), p.memory_mib,
                    p.compute_slices * kWholeGpu / d.model->mig.compute_slices, j.cpu, j.mem}};
      cursor_dev_part_ = di;
      return true;
    }
    if (pi < 64) devs_[di].no_start |= uint64_t{1} << pi;
  } else if (pass == 2 && !d.split && d.idle()) {
    c->enable_mig_dev = di_int;
    c->create = {{di_int, part::Instance{p.name, p.starts.front()}}};
    c->grants = {{d.node, di_int, 0, p.memory_mib,
                  p.compute_slices * kWholeGpu / d.model->mig.compute_slices, j.cpu, j.mem}};
    return true;
  }
  return false;
}

bool Engine::AmdPartitionAt(const Job& j, size_t di, int pass, Candidate* c) {
  const Dev& d = devs_[di];
  int di_int = static_cast<int>(di);
  if (pass == 0 && d.split) {
    for (size_t s = 0; s < d.slots.size(); ++s) {
      const Slot& sl = d.slots[s];
      if (sl.holder < 0 && sl.memory >= j.gpu_mem && sl.compute >= j.gpu_milli) {
        c->grants = {{d.node, di_int, static_cast<int>(s), sl.memory, sl.compute, j.cpu, j.mem}};
        cursor_dev_part_ = di;
        return true;
      }
    }
  } else if (pass == 2 && !d.split && d.idle()) {
    // A compute-mode change on an idle device keeps the node's memory mode.
    std::optional<part::AmdPartitioning> best = AmdShapeFor(d, j, /*keep_memory_mode=*/true);
    if (!best) return false;
    c->amd_dev = di_int;
    c->amd_switch = best->pair.ToString();
    c->grants = {{d.node, di_int, 0, best->memory_per_partition_mib, kWholeGpu / best->partitions,
                  j.cpu, j.mem}};
    return true;
  }
  return false;
}

std::optional<part::AmdPartitioning> Engine::AmdShapeFor(const Dev& d, const Job& j,
                                                         bool keep_memory_mode) const {
  // The smallest partitions (more than one to a card) that cover the job's memory and compute,
  // the device's memory mode first. (This loop once returned at the first shape that did not
  // fit, SPX, so an idle card was never split in place.)
  auto cur = part::ParsePair(*d.model, d.amd_pair);
  std::optional<part::AmdPartitioning> best;
  for (const part::AmdPartitioning& a : part::AllPartitionings(*d.model)) {
    if (a.partitions <= 1 || a.memory_per_partition_mib < std::max<MiB>(j.gpu_mem, 1)) continue;
    if (kWholeGpu / a.partitions < j.gpu_milli) continue;
    const bool same_mode = cur.ok() && a.pair.memory == cur->memory;
    if (keep_memory_mode && !same_mode) continue;
    const bool best_same = best && cur.ok() && best->pair.memory == cur->memory;
    if (!best ||
        std::make_tuple(!same_mode, a.memory_per_partition_mib, a.memory_domains) <
            std::make_tuple(!best_same, best->memory_per_partition_mib, best->memory_domains)) {
      best = a;
    }
  }
  return best;
}

bool Engine::PartitionAt(const Job& j, int self, size_t di, int pass, Candidate* c, bool* blocked) {
  const Dev& d = devs_[di];
  if (!Serves(j, d) || !PoolAllows(d.pool, AllocationForm::kPartition)) return false;
  if (!d.mig_capable() && !d.amd_capable()) return false;
  const NodeRt& node = nodes_[d.node];
  if (!NodeHas(node, j.cpu, j.mem)) return false;
  bool bf = false;
  if (!Usable(d, j, self, &bf, blocked)) return false;
  bool found = d.mig_capable() ? MigPartitionAt(j, di, pass, c) : AmdPartitionAt(j, di, pass, c);
  if (found && TakesHostFromHead(j, self, c->grants)) {  // another card may be on another node
    *c = Candidate{};
    *blocked = true;
    return false;
  }
  if (found) c->backfill = bf;
  return found;
}

bool Engine::FindPartition(Job& j, int self, Candidate* c, bool* blocked) {
  size_t n = devs_.size();
  if (n == 0) return false;
  // Pass 0: a free slot of the right size. Pass 1: a new MIG instance on free slices.
  // Pass 2: an idle, unsplit device switched into partitions (nothing is lost: it is idle).
  // Passes 0 and 1 walk their indexes; pass 2 is next fit over all devices.
  for (int d : free_slot_devs_) {
    if (PartitionAt(j, self, static_cast<size_t>(d), 0, c, blocked)) return true;
  }
  for (int d : mig_open_devs_) {
    if (PartitionAt(j, self, static_cast<size_t>(d), 1, c, blocked)) return true;
  }
  for (size_t step = 0; step < n; ++step) {
    size_t di = (cursor_dev_part_ + step) % n;
    if (PartitionAt(j, self, di, 2, c, blocked)) {
      cursor_dev_part_ = di;
      return true;
    }
  }
  return false;
}

}  // namespace tessera::quota::internal
