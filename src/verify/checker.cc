#include "verify/checker.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <utility>

#include "partition/amd.h"
#include "partition/mig.h"
#include "verify/checker_internal.h"

namespace tessera::verify {

namespace part = partition;

// What a group holds under a quota naming `name`: a model or family (quota::ModelCovers), or a
// pool (the pool itself), from held per model or per pool.
static MilliGpu HeldUnder(const std::map<std::string, MilliGpu>& held, const std::string& name,
                          bool model) {
  MilliGpu sum = 0;
  for (const auto& [k, v] : held) sum += (model ? quota::ModelCovers(name, k) : k == name) ? v : 0;
  return sum;
}

// One quota per model or pool of a group, for the checks that treat them alike.
struct CellQuotaRef {
  const std::string& name;
  MilliGpu reservation, limit;
  bool model;
};

static std::vector<CellQuotaRef> CellQuotas(const quota::GroupSpec& g) {
  std::vector<CellQuotaRef> out;
  for (const quota::ModelQuota& q : g.models)
    out.push_back({q.model, q.reservation, q.limit, true});
  for (const quota::PoolQuota& q : g.pools) out.push_back({q.pool, q.reservation, q.limit, false});
  return out;
}
using internal::Nominal;
using quota::EventKind;
using quota::JobState;

std::string Violation::ToString() const {
  std::ostringstream o;
  o << property << " at t=" << time << "s: " << what;
  if (!jobs.empty()) {
    o << " [jobs";
    for (const std::string& j : jobs) o << " " << j;
    o << "]";
  }
  if (!devices.empty()) {
    o << " [devices";
    for (const std::string& d : devices) o << " " << d;
    o << "]";
  }
  return o.str();
}

Checker::Checker(const quota::PolicySpec& policy, const std::vector<quota::NodeSpec>& nodes,
                 Bounds bounds)
    : world_(World::Make(policy, nodes)), bounds_(bounds) {
  down_.assign(world_.nodes.size(), false);
  layout_.assign(world_.devices.size(), {});
  owned_.assign(world_.devices.size(), 0);
  reconfig_times_.resize(world_.devices.size());
}

void Checker::Submitted(int handle, const quota::JobSpec& spec) {
  if (static_cast<size_t>(handle) >= wants_.size()) wants_.resize(handle + 1);
  wants_[handle] = world_.Resolve(spec);
  handle_of_[spec.id] = handle;
  if (static_cast<size_t>(handle) >= standing_.size()) standing_.resize(handle + 1, 0);
  standing_[handle] = next_standing_++;
}

void Checker::NodeDown(const std::string& node, bool down) {
  for (size_t n = 0; n < world_.nodes.size(); ++n) {
    if (world_.nodes[n].name == node) down_[n] = down;
  }
  if (down) seen_.node_loss = true;
}

void Checker::Report(std::string property, int64_t now, std::string what,
                     std::vector<std::string> jobs, std::vector<std::string> devices) {
  // One report per property and subject (its first job, else device, else the text).
  std::string key = property + "|" +
                    (!jobs.empty()      ? jobs[0]
                     : !devices.empty() ? devices[0]
                                        : what);
  if (!reported_.insert(key).second) return;
  violations_.push_back(
      {std::move(property), now, std::move(what), std::move(jobs), std::move(devices)});
}

void Checker::AfterCycle(const quota::QuotaEngine& e, int64_t now) {
  ReadEvents(e, now);
  Snapshot s = Snapshot::Take(world_, e, down_);
  // A card its operator registered split, whose mode the engine has changed since, is the
  // engine's to return to whole: taken for the operator's still, an MI300X node registered in
  // CPX that the engine had split to DPX was never free for a gang, which started on it by its
  // expected time, and a job on an L4 card was said to delay it (seed 1581795).
  for (size_t d = 0; d < s.devices.size() && d < owned_.size(); ++d) s.devices[d].owned = owned_[d];
  for (size_t h = 0; h < s.jobs.size(); ++h) {
    if (s.jobs[h].state == JobState::kRunning && s.jobs[h].start >= 0)
      started_at_[static_cast<int>(h)] = s.jobs[h].start;
  }
  // A share held swapped out stays on its device (paused), where alone it resumes: the engine's
  // view names it ("node/gpuN"), read once a hold.
  for (auto& [h, p] : pauses_) {
    if (p.held_at < 0 || static_cast<size_t>(h) >= s.jobs.size() ||
        s.jobs[h].state != JobState::kPending)
      continue;
    if (p.device < 0) {
      const std::string on = e.job(h).held_on;
      for (size_t d = 0; d < world_.devices.size() && p.device < 0; ++d) {
        const DeviceInfo& di = world_.devices[d];
        if (on == world_.nodes[di.node].name + "/gpu" + std::to_string(di.index))
          p.device = static_cast<int>(d);
      }
    }
    if (p.device < 0) continue;
    s.jobs[h].held_on = p.device;
    s.devices[p.device].held.push_back(h);
  }
  for (std::map<int, int>* m : {&leaving_for_, &making_room_for_}) {
    for (auto it = m->begin(); it != m->end();) {
      bool leaving = static_cast<size_t>(it->first) < s.jobs.size() &&
                     s.jobs[it->first].state == JobState::kTerminating;
      it = leaving ? std::next(it) : m->erase(it);
    }
  }
  for (auto it = leaves_by_.begin(); it != leaves_by_.end();) {
    const bool leaving = static_cast<size_t>(it->first) < s.jobs.size() &&
                         s.jobs[it->first].state == JobState::kTerminating;
    it = leaving ? std::next(it) : leaves_by_.erase(it);
  }
  CheckDevices(s, now);
  CheckLimits(s, now);
  CheckBorrowing(s, now);
  CheckReclaim(s, now);
  CheckStart(s, now);
  CheckReservation(s, now);
  JudgeHeads(&s, now);
  CheckHead(s, now);
  CheckStability(e, now);
  CheckFairness(s, now);
  CheckIdle(s, now);
  CheckWalltime(s, now);
  preempted_this_cycle_.clear();
  placed_this_cycle_.clear();
}

void Checker::Finish(int64_t now) { JudgeHeads(nullptr, now); }

// ------------------------------------------------------------------------------------------
// Events: preemptions (standing), and what the history contained.

void Checker::ReadEvents(const quota::QuotaEngine& e, int64_t now) {
  const std::vector<quota::Event>& ev = e.events();
  if (ev.size() < events_seen_) events_seen_ = 0;  // cleared by the owner
  for (; events_seen_ < ev.size(); ++events_seen_) {
    const quota::Event& x = ev[events_seen_];
    auto h = handle_of_.find(x.job);
    if (x.detail.rfind("idle_timeout:", 0) == 0 &&
        (x.kind == EventKind::kPreempted || x.kind == EventKind::kStopped ||
         x.kind == EventKind::kSwappedOut)) {
      CheckIdleEvent(x, now);  // a guard's give-back, for no claimant
      if (x.kind == EventKind::kPreempted && h != handle_of_.end())
        idle_requeued_.insert(h->second);  // to the back of the order once back to pending
      continue;
    }
    if (h != handle_of_.end()) {
      NotePause(x, h->second);
      if (x.kind == EventKind::kRequeued && idle_requeued_.erase(h->second) > 0)
        standing_[h->second] = next_standing_++;
      if (x.kind == EventKind::kSubmitted || x.kind == EventKind::kRequeued ||
          (x.kind == EventKind::kSwappedOut && !x.for_job.empty()))
        waiting_since_[h->second] = x.time;
      const auto c = handle_of_.find(x.for_job);
      if ((x.kind == EventKind::kPreempted || x.kind == EventKind::kSwappedOut) &&
          c != handle_of_.end())
        CheckPreemptionGuards(x, h->second, c->second);
      if (x.kind == EventKind::kPreempted || x.kind == EventKind::kRequeued ||
          x.kind == EventKind::kCompleted || x.kind == EventKind::kStopped)
        started_at_.erase(h->second);  // held swapped out, it keeps its start
    }
    if (x.kind == EventKind::kPlaced) {
      if (h != handle_of_.end()) placed_this_cycle_.push_back(h->second);
      seen_.backfill = seen_.backfill || x.detail.find("[backfill]") != std::string::npos;
      if (h != handle_of_.end() && wants_[h->second].count >= 2) seen_.gang = true;
    } else if (x.kind == EventKind::kRepartitioned) {
      seen_.repartition = true;
      if (x.detail.find("waiting for a whole device or a share") != std::string::npos)
        seen_.unsplit = true;
      if (x.detail.find("compute mode") != std::string::npos ||
          x.detail.find("NPS") != std::string::npos) {
        seen_.amd_mode_change = true;
      }
    } else if (x.kind == EventKind::kPreempted && h != handle_of_.end()) {
      const int v = h->second;
      leaves_by_[v] = now + bounds_.grace_s;
      const Want& victim = wants_[v];
      auto c = handle_of_.find(x.for_job);
      const bool reclaim = x.detail.rfind("reclaim:", 0) == 0;
      const bool priority = x.detail.rfind("priority preemption:", 0) == 0;
      const bool drain = x.detail.rfind("drain ", 0) == 0;
      if (!victim.preemptible) {
        Report("safety.preemption", now,
               x.job + " is not preemptible but was preempted: " + x.detail, {x.job});
      }
      if (c == handle_of_.end() || !(reclaim || priority || drain)) {
        Report("safety.preemption", now, x.job + " preempted for no job it names: " + x.detail,
               {x.job});
        continue;
      }
      const Want& claimant = wants_[c->second];
      making_room_for_[v] = c->second;
      paid_for_.insert(c->second);
      if (claimant.group == victim.group) own_for_own_.push_back(v);
      if (drain && claimant.group != victim.group)
        preempted_this_cycle_.insert(v);  // keeps its reservation too
      if (priority && (claimant.group != victim.group || victim.priority >= claimant.priority)) {
        Report("safety.preemption", now,
               x.job + " (priority " + std::to_string(victim.priority) + ") preempted for " +
                   x.for_job + " (priority " + std::to_string(claimant.priority) +
                   ") of another group or no higher priority",
               {x.job, x.for_job});
      }
      if (reclaim) {
        seen_.reclaim = true;
        if (bounds_.grace_s > 0) seen_.reclaim_in_flight = true;
        if (claimant.group == victim.group) {
          Report("safety.preemption", now,
                 x.job + " reclaimed for " + x.for_job + " of its own group", {x.job});
        }
        leaving_for_[v] = c->second;
        preempted_this_cycle_.insert(v);
      }
    }
  }
}

// ------------------------------------------------------------------------------------------
// Safety: devices, limits, reclaim.

void Checker::CheckDevices(Snapshot& s, int64_t now) {
  int overcommit = 100;
  for (const quota::QueueSpec& q : world_.policy.queues)
    overcommit = std::max(overcommit, q.swap_overcommit_percent);
  std::map<int, std::string> node_memory_mode;
  for (size_t d = 0; d < world_.devices.size(); ++d) {
    const DeviceInfo& info = world_.devices[d];
    const DeviceNow& dn = s.devices[d];
    int whole = 0;
    MilliGpu compute = 0;
    MiB memory = 0;
    std::vector<std::string> slots, jobs;
    bool unsliced = false;
    for (const Holding& h : dn.holders) {
      const std::string id =
          wants_.size() > static_cast<size_t>(h.job) ? wants_[h.job].id : std::to_string(h.job);
      jobs.push_back(id);
      if (h.form == AllocationForm::kWhole) ++whole;
      if (h.slot.empty()) {
        unsliced = true;
        compute += h.compute;
        memory += h.memory;
      } else {
        slots.push_back(h.slot);
        bool exists = std::any_of(dn.slots.begin(), dn.slots.end(),
                                  [&](const quota::SlotView& v) { return v.name == h.slot; });
        if (!exists)
          Report("safety.exclusive", now,
                 id + " holds " + h.slot + ", which the device does not have", {id}, {info.name});
      }
    }
    std::sort(slots.begin(), slots.end());
    if (std::adjacent_find(slots.begin(), slots.end()) != slots.end()) {
      Report("safety.exclusive", now, "a partition of " + info.name + " is in two grants", jobs,
             {info.name});
    }
    if ((whole > 0 && dn.holders.size() > 1) || (unsliced && !slots.empty())) {
      Report("safety.exclusive", now, info.name + " is held whole (or shared) beside other grants",
             jobs, {info.name});
    }
    if (whole == 0 &&
        (compute > kWholeGpu * overcommit / 100 || memory > info.memory * overcommit / 100)) {
      Report("safety.capacity", now,
             info.name + " shares hold compute " + std::to_string(compute) + " and memory " +
                 std::to_string(memory) + " MiB past the device",
             jobs, {info.name});
    }
    if (info.model == nullptr) continue;
    if (info.model->is_mig()) {
      if (!dn.mig && !dn.slots.empty()) {
        Report("safety.layout", now, info.name + " has MIG instances with MIG off", jobs,
               {info.name});
      }
      part::Layout layout;
      for (const quota::SlotView& sl : dn.slots) {
        Status st = part::CreateInstance(*info.model, &layout, {sl.profile, sl.start});
        if (!st.ok())
          Report("safety.layout", now, info.name + ": " + st.message(), jobs, {info.name});
      }
    } else if (info.model->is_amd() && !dn.amd_pair.empty()) {
      auto pair = part::ParsePair(*info.model, dn.amd_pair);
      auto shape = pair.ok() ? part::Partition(*info.model, *pair)
                             : Result<part::AmdPartitioning>(pair.status());
      if (!shape.ok()) {
        Report("safety.layout", now, info.name + ": " + shape.status().message(), jobs,
               {info.name});
        continue;
      }
      auto [it, fresh] = node_memory_mode.emplace(info.node, pair->memory);
      if (!fresh && it->second != pair->memory) {
        Report("safety.layout", now,
               world_.nodes[info.node].name + " has devices in memory modes " + it->second +
                   " and " + pair->memory,
               jobs, {info.name});
      }
    }
  }
  for (size_t n = 0; n < world_.nodes.size(); ++n) {
    if (s.cpu_free[n] < 0 || s.mem_free[n] < 0) {
      Report("safety.capacity", now, world_.nodes[n].name + " holds more CPU or memory than it has",
             {}, {world_.nodes[n].name});
    }
  }
}

void Checker::CheckLimits(const Snapshot& s, int64_t now) {
  for (size_t g = 0; g < world_.group_names.size(); ++g) {
    const Resources& u = s.usage[g];
    const Resources& l = world_.policy.groups[g].limit;
    if (u.gpu_milli > l.gpu_milli || u.gpu_memory_mib > l.gpu_memory_mib ||
        u.cpu_milli > l.cpu_milli || u.memory_mib > l.memory_mib) {
      Report("safety.limits", now,
             "group " + world_.group_names[g] + " holds " + u.ToString() + ", past its limit " +
                 l.ToString(),
             {}, {world_.group_names[g]});
    }
    for (const CellQuotaRef& q : CellQuotas(world_.policy.groups[g])) {
      const MilliGpu held =
          HeldUnder(q.model ? s.model_usage[g] : s.pool_usage[g], q.name, q.model);
      if (held > q.limit) {
        Report("safety.limits", now,
               "group " + world_.group_names[g] + " holds " + std::to_string(held) +
                   " milli-GPU of " + (q.model ? "" : "pool ") + q.name +
                   ", past its limit there " + std::to_string(q.limit),
               {}, {world_.group_names[g]});
      }
    }
  }
}

MilliGpu Checker::FirmNeed(const Snapshot& s, int g, MilliGpu extra, MilliGpu* firm) const {
  const size_t groups = world_.group_names.size();
  // Per group, with its descendants (as Snapshot::usage): GPU held on the cards, and of it the
  // preemptible jobs'; j's `extra` counted in its group and every ancestor.
  std::vector<MilliGpu> held(groups, 0), preemptible(groups, 0);
  for (int x = g; x >= 0; x = world_.parent[x]) held[x] += extra;
  *firm = extra;
  for (size_t k = 0; k < s.jobs.size() && k < wants_.size(); ++k) {
    const JobNow& j = s.jobs[k];
    if ((j.state != JobState::kRunning && j.state != JobState::kTerminating) || j.group < 0 ||
        wants_[k].external)
      continue;
    if (!wants_[k].preemptible) *firm += j.charge.gpu_milli;
    for (int x = j.group; x >= 0; x = world_.parent[x]) {
      held[x] += j.charge.gpu_milli;
      if (wants_[k].preemptible) preemptible[x] += j.charge.gpu_milli;
    }
  }
  // need(x): the larger of its reservation and what reclaim could never take back from it (its
  // own jobs less its preemptible ones above its reservation), plus its children's needs.
  std::function<MilliGpu(int)> need = [&](int x) {
    MilliGpu own = held[x], own_preemptible = preemptible[x], below = 0;
    for (size_t c = 0; c < groups; ++c) {
      if (world_.parent[c] != x) continue;
      own -= held[c];
      own_preemptible -= preemptible[c];
      below += need(static_cast<int>(c));
    }
    const MilliGpu reserved = world_.policy.groups[x].reservation.gpu_milli;
    return std::max(
        reserved,
        own - std::min(own_preemptible, std::max<MilliGpu>(0, held[x] - reserved)) + below);
  };
  MilliGpu total = 0;
  for (size_t t = 0; t < groups; ++t) {
    if (world_.parent[t] < 0) total += need(static_cast<int>(t));
  }
  return total;
}

void Checker::CheckBorrowing(const Snapshot& s, int64_t now) {
  const MilliGpu cards = static_cast<MilliGpu>(world_.devices.size()) * kWholeGpu;
  for (int k : placed_this_cycle_) {
    if (static_cast<size_t>(k) >= s.jobs.size() || static_cast<size_t>(k) >= wants_.size())
      continue;
    const JobNow& j = s.jobs[k];
    if (j.state != JobState::kRunning || !j.borrowed || wants_[k].preemptible || wants_[k].external)
      continue;
    MilliGpu firm = 0;
    const MilliGpu need = FirmNeed(s, -1, 0, &firm);
    if (need > cards && firm <= cards) {
      Report("safety.borrowing", now,
             wants_[k].id + " (not preemptible) borrowed past its group's reservation where " +
                 "reservations and work reclaim cannot take back need " + std::to_string(need) +
                 " milli-GPU of the cluster's " + std::to_string(cards),
             {wants_[k].id});
    }
    return;  // the state after the cycle, judged once
  }
}

// The least a pending job may charge against GPU quota: a partition at least its compute.
static MilliGpu NominalLow(const Want& w) {
  const bool whole_only = w.forms.size() == 1 && w.forms[0] == AllocationForm::kWhole;
  return static_cast<MilliGpu>(w.count) * (whole_only ? kWholeGpu : w.milli);
}

void Checker::CheckReclaim(const Snapshot& s, int64_t now) {
  // Victims' side: a group that lost work to reclaim this cycle keeps its reservation.
  // (A group's own jobs that capacity is leaving for, by any preemption, count as staying: a
  // group may drain its own work for its own higher-priority job.)
  std::map<int, std::vector<std::string>> victims_of;
  for (int v : preempted_this_cycle_) victims_of[wants_[v].group].push_back(wants_[v].id);
  std::map<int, MilliGpu> own_claims;
  for (const auto& [v, c] : making_room_for_) {
    if (s.jobs[c].state != JobState::kPending) continue;
    for (int g = wants_[c].group; g >= 0; g = world_.parent[g]) own_claims[g] += Nominal(wants_[c]);
  }
  // and so does what a group gave up for its own jobs this cycle.
  for (int v : own_for_own_) {
    for (int g = wants_[v].group; g >= 0; g = world_.parent[g]) own_claims[g] += Nominal(wants_[v]);
  }
  own_for_own_.clear();
  // Per GPU model: a victim's group at or above its reservation on a model before this cycle is
  // not below it after (what it gave up for its own jobs excepted, as above).
  for (const auto& [g, ids] : victims_of) {
    if (own_claims[g] > 0 || static_cast<size_t>(g) >= prev_model_staying_.size()) continue;
    for (const CellQuotaRef& q : CellQuotas(world_.policy.groups[g])) {
      const MilliGpu was =
          HeldUnder(q.model ? prev_model_staying_[g] : prev_pool_staying_[g], q.name, q.model);
      const MilliGpu is =
          HeldUnder(q.model ? s.model_staying[g] : s.pool_staying[g], q.name, q.model);
      if (q.reservation > 0 && was >= q.reservation && is < q.reservation) {
        Report("safety.reclaim", now,
               "reclaim or a drain for another group took group " + world_.group_names[g] + " to " +
                   std::to_string(is) + " milli-GPU of " + (q.model ? "" : "pool ") + q.name +
                   ", below its reservation there " + std::to_string(q.reservation),
               ids);
      }
    }
  }
  prev_model_staying_ = s.model_staying;
  prev_pool_staying_ = s.pool_staying;
  for (const auto& [g, ids] : victims_of) {
    const MilliGpu reservation = world_.policy.groups[g].reservation.gpu_milli;
    if (s.staying[g] + own_claims[g] < reservation) {
      Report("safety.reclaim", now,
             "reclaim or a drain for another group took group " + world_.group_names[g] + " to " +
                 std::to_string(s.staying[g]) + " milli-GPU, below its reservation " +
                 std::to_string(reservation),
             ids);
    }
  }
  // Claimants' side: what a group holds inside its reservation plus what waits on capacity
  // leaving for it stays within its reservation (borrowed work placed on free capacity meanwhile
  // is not reclaim's doing).
  std::map<int, std::set<int>> claimants_of;
  for (const auto& [v, c] : leaving_for_) {
    if (s.jobs[c].state == JobState::kPending) claimants_of[wants_[c].group].insert(c);
  }
  for (const auto& [g, claimants] : claimants_of) {
    MilliGpu claimed = 0;
    std::vector<std::string> ids;
    for (int c : claimants) {
      claimed += NominalLow(wants_[c]);  // the least, so that what is reported is certain
      ids.push_back(wants_[c].id);
    }
    const MilliGpu reservation = world_.policy.groups[g].reservation.gpu_milli;
    if (s.guaranteed[g] + claimed > reservation) {
      Report("safety.reclaim", now,
             "group " + world_.group_names[g] + " holds " + std::to_string(s.guaranteed[g]) +
                 " milli-GPU inside its reservation and reclaims " + std::to_string(claimed) +
                 " more, past its reservation " + std::to_string(reservation),
             ids);
    }
  }
}

// ------------------------------------------------------------------------------------------
// Guards: idle holdings given back.

void Checker::CheckIdleEvent(const quota::Event& x, int64_t now) {
  auto h = handle_of_.find(x.job);
  if (h == handle_of_.end()) return;
  const Want& w = wants_[h->second];
  if (w.idle_timeout <= 0) {
    Report(
        "guard.idle", now,
        x.job + " was given back for idleness, but its queue has no " + "idle_timeout: " + x.detail,
        {x.job});
    return;
  }
  // "idle_timeout: idle 300s since ..."
  const std::string key = "idle_timeout: idle ";
  const int64_t idle = std::atoll(x.detail.c_str() + key.size());
  if (idle < w.idle_timeout) {
    Report("guard.idle", now,
           x.job + " was given back after " + std::to_string(idle) +
               " s idle, before its queue's idle_timeout of " + std::to_string(w.idle_timeout) +
               " s: " + x.detail,
           {x.job});
  }
}

void Checker::CheckIdle(const Snapshot& s, int64_t now) {
  // A requeue gives the holding to jobs that wait: owed once a job that could take it has
  // waited since the last check, which the engine's cycle then saw. A stop is owed regardless.
  const bool waited = others_waited_;
  others_waited_ = false;
  // As the engine counts them: not held swapped out, not held at a limit, not another
  // scheduler's.
  for (size_t h = 0; h < s.jobs.size() && h < wants_.size(); ++h) {
    const JobNow& p = s.jobs[h];
    if (p.state == JobState::kPending && p.held_on < 0 && !p.at_admission && !wants_[h].external)
      others_waited_ = true;
  }
  for (size_t h = 0; h < s.jobs.size() && h < wants_.size(); ++h) {
    const JobNow& j = s.jobs[h];
    if (j.state != JobState::kRunning || j.idle_since < 0 || j.swapped_out) continue;
    if (!waited && !wants_[h].idle_stop) continue;
    const int64_t timeout = wants_[h].idle_timeout;
    if (timeout > 0 && now - j.idle_since >= timeout) {
      Report("guard.idle", now,
             wants_[h].id + " idle since t=" + std::to_string(j.idle_since) +
                 " still holds past its queue's idle_timeout of " + std::to_string(timeout) + " s",
             {wants_[h].id});
    }
  }
}

void Checker::NotePause(const quota::Event& x, int handle) {
  if (x.kind == EventKind::kSwappedOut) {  // held (an idle share's swap-out runs on: not here)
    Pause& p = pauses_[handle];
    p.held_paused = p.paused;
    p.held_at = x.time;
    p.device = -1;  // read from the engine's view at the next look
    return;
  }
  auto p = pauses_.find(handle);
  if (p == pauses_.end()) return;
  if (x.kind == EventKind::kPlaced) {
    p->second.paused = 0;
  } else if (x.kind == EventKind::kSwappedIn && p->second.held_at >= 0) {
    p->second.paused = p->second.held_paused + x.time - p->second.held_at;
    p->second.held_at = -1;
    seen_.swap_hold = true;
  }
}

void Checker::CheckPreemptionGuards(const quota::Event& x, int victim, int claimant) {
  const Want& v = wants_[victim];
  const Want& c = wants_[claimant];
  if (v.min_runtime > 0) {
    // Not running at the last cycle's look: it started in this one.
    const auto s = started_at_.find(victim);
    const int64_t ran = s == started_at_.end() ? 0 : x.time - s->second;
    if (ran < v.min_runtime) {
      Report("guard.min_runtime", x.time,
             x.job + " preempted for " + x.for_job + " after running " + std::to_string(ran) +
                 " s, under its queue's min_runtime of " + std::to_string(v.min_runtime) + " s",
             {x.job, x.for_job});
    }
  }
  if (c.preemption_delay > 0) {
    const auto w = waiting_since_.find(claimant);
    if (w != waiting_since_.end() && x.time - w->second < c.preemption_delay) {
      Report("guard.preemption_delay", x.time,
             x.for_job + " preempted " + x.job + " after waiting " +
                 std::to_string(x.time - w->second) + " s, under its queue's preemption_delay of " +
                 std::to_string(c.preemption_delay) + " s",
             {x.for_job, x.job});
    }
  }
}

int64_t Checker::Paused(int handle) const {
  const auto p = pauses_.find(handle);
  return p == pauses_.end() ? 0 : p->second.paused;
}

void Checker::CheckWalltime(const Snapshot& s, int64_t now) {
  for (size_t h = 0; h < s.jobs.size() && h < wants_.size(); ++h) {
    const JobNow& j = s.jobs[h];
    const Want& w = wants_[h];
    if (j.state != JobState::kRunning || w.external || j.start < 0) continue;
    const int64_t paused = Paused(static_cast<int>(h));
    if (w.walltime > 0 && now > j.start + w.walltime + paused) {
      Report("guard.walltime", now,
             w.id + " running since t=" + std::to_string(j.start) + " holds past its walltime of " +
                 std::to_string(w.walltime) + " s",
             {w.id});
    }
    if (w.max_runtime > 0 && now > j.start + w.max_runtime + paused) {
      Report("guard.max_runtime", now,
             w.id + " running since t=" + std::to_string(j.start) +
                 " holds past its queue's max_runtime of " + std::to_string(w.max_runtime) + " s",
             {w.id});
    }
  }
}

}  // namespace tessera::verify
