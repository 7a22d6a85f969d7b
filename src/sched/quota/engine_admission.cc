// The quota engine: admission against groups' and members' limits, and which jobs are guaranteed
// (inside their group's reservation) or borrow.
#include <algorithm>
#include <functional>

#include "sched/quota/engine_impl.h"

namespace tessera::quota::internal {

// ------------------------------------------------------------------------------------------
// Quota

void Engine::AddUsage(int g, const Resources& r, int sign) {
  for (; g >= 0; g = groups_[g].parent) {
    if (sign > 0) {
      groups_[g].usage += r;
    } else {
      groups_[g].usage -= r;
    }
  }
}

// A held job's charge into its groups' usage (and their preemptible GPU), or out of it.
void Engine::ChargeGroups(const Job& j, int sign) {
  AddUsage(j.group, j.charge, sign);
  for (int g = j.group; g >= 0 && j.preemptible; g = groups_[g].parent)
    groups_[g].preemptible += sign * j.charge.gpu_milli;
}

Status Engine::Admission(const Job& j, const Resources& charge, bool* guaranteed) const {
  const char* which = nullptr;
  for (int g = j.group; g >= 0; g = groups_[g].parent) {
    const GroupRt& gr = groups_[g];
    if (options_.engine_break == EngineOptions::Break::kIgnoreLimits) break;
    if (!Within(gr.usage, charge, gr.spec.limit, &which)) {
      std::string w = which;
      return Status::ResourceExhausted("group " + gr.spec.name + " at its " + w + " limit: holds " +
                                       Amount(which, Component(gr.usage, w)) + ", job needs " +
                                       Amount(which, Component(charge, w)) + ", limit " +
                                       Amount(which, Component(gr.spec.limit, w)));
    }
  }
  if (j.member >= 0 && options_.engine_break != EngineOptions::Break::kIgnoreLimits) {
    // A member's own limit inside its group (GroupSpec::members).
    const MemberRt& m = members_[j.member];
    if (!Within(m.usage, charge, m.limit, &which)) {
      std::string w = which;
      return Status::ResourceExhausted(
          "user " + m.identity + " at its " + w + " limit in group " + groups_[j.group].spec.name +
          ": holds " + Amount(which, Component(m.usage, w)) + ", job needs " +
          Amount(which, Component(charge, w)) + ", limit " + Amount(which, Component(m.limit, w)));
    }
  }
  // The reservation guarantees the components it names (> 0); one naming none guarantees
  // nothing. A GPU-only reservation thus covers a job's GPU compute whatever its CPU needs.
  // Counting the group's claims in flight: a job placed on free capacity while a reclaim for the
  // group waits out its grace is borrowed, or the group would end past its reservation.
  const GroupRt& own = groups_[j.group];
  Resources held = own.usage;
  if (static_cast<size_t>(j.group) < claimed_gpu_.size()) held.gpu_milli += claimed_gpu_[j.group];
  *guaranteed = WithinReservation(held, charge, own.spec.reservation);
  return *guaranteed ? Status::Ok() : BorrowRoom(j, charge);
}

// Reclaim keeps a reservation by preempting borrowers, and cannot take back a borrower that may
// not be preempted: such a job borrows only where every reservation stays within reach. What a
// group needs of the cluster is the larger of its reservation and what reclaim could never take
// back from it: its own jobs less its preemptible ones above its reservation, plus what its
// children need (a child's non-preemptible borrowing may not take a sibling's reservation either).
// The top-level groups' needs together fit the cluster: the engine's cards and the capacity
// external pools report (a reservation may be met in Kubernetes, by suspending borrowers there),
// counted in GPU. One once took a card another group reserved, and that group waited at Placement
// for as long as it ran. A job the cluster could not hold beside the work that may not be
// preempted, reservations or none, waits for room at Placement, as before.
// `held` false: as if nothing ran (at submission, whether it could ever be admitted).
Status Engine::BorrowRoom(const Job& j, const Resources& charge, bool held) const {
  if (j.preemptible || j.external || charge.gpu_milli <= 0 ||
      options_.engine_break == EngineOptions::Break::kBorrowReserved)
    return Status::Ok();
  MilliGpu cluster = gpu_capacity_;
  for (const auto& [pool, cap] : ext_cap_) cluster += cap;
  const auto usage = [&](int g) { return held ? groups_[g].usage.gpu_milli : MilliGpu{0}; };
  const auto preemptible = [&](int g) { return held ? groups_[g].preemptible : MilliGpu{0}; };
  MilliGpu firm = charge.gpu_milli;  // what may not be preempted, with j
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (groups_[g].parent < 0)
      firm += usage(static_cast<int>(g)) - preemptible(static_cast<int>(g));
  }
  if (firm > cluster) return Status::Ok();
  // need(g), with `extra` more GPU held by j's group.
  std::function<MilliGpu(int, MilliGpu)> need = [&](int g, MilliGpu extra) {
    const MilliGpu reserved = groups_[g].spec.reservation.gpu_milli;
    const MilliGpu in = usage(g) + (InChain(j.group, g) ? extra : 0);
    MilliGpu own = in, own_preemptible = preemptible(g), below = 0;
    for (int c : groups_[g].children) {
      own -= usage(c) + (InChain(j.group, c) ? extra : 0);
      own_preemptible -= preemptible(c);
      below += need(c, extra);
    }
    const MilliGpu taken = std::min(own_preemptible, std::max<MilliGpu>(0, in - reserved));
    return std::max(reserved, own - taken + below);
  };
  int top = j.group;
  while (groups_[top].parent >= 0) top = groups_[top].parent;
  MilliGpu needed = 0, others = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (groups_[g].parent >= 0) continue;
    const MilliGpu n = need(static_cast<int>(g), charge.gpu_milli);
    needed += n;
    if (static_cast<int>(g) != top) others += n;
  }
  if (needed <= cluster) return Status::Ok();
  // What the other top-level groups keep, and what that leaves j's (a new user read "reservations
  // ... take 3" with its own group's reservation, which the job would fill, among the 3), and
  // whether it could be admitted with nothing running at all (the new user's waited for good,
  // not told so; refused at submission, it would be refused while nodes still register).
  const std::string& name = groups_[top].spec.name;
  const bool ever = !held || BorrowRoom(j, charge, /*held=*/false).ok();
  return Status::ResourceExhausted(
      "queue " + policy_.queues[j.queue].name + " is not preemptible, so group " +
      groups_[j.group].spec.name +
      " borrows only what leaves every reservation within reach: of the cluster's " +
      Amount("gpu", cluster) + " GPU, the other groups keep " + Amount("gpu", others) +
      (held ? " (reservations and work that may not be preempted)" : " (their reservations)") +
      ", leaving group " + name + " " + Amount("gpu", std::max<MilliGpu>(0, cluster - others)) +
      " for work that may not be preempted; " +
      (held ? "with this job it would need " : "it needs ") +
      Amount("gpu", need(top, charge.gpu_milli)) +
      (ever ? ""
            : " (nor with nothing running: it waits for the reservations to change or the "
              "cluster to grow)"));
}

// Whether `g` is `ancestor` or below it.
bool Engine::InChain(int g, int ancestor) const {
  for (; g >= 0; g = groups_[g].parent)
    if (g == ancestor) return true;
  return false;
}

Resources Engine::ChargeOf(const Job& j, const std::vector<Grant>& gs) const {
  Resources r;
  for (const Grant& g : gs) {
    r.gpu_milli += g.compute;
    r.gpu_memory_mib += g.memory;
    r.cpu_milli += g.cpu;
    r.memory_mib += g.host_memory;
  }
  (void)j;
  return r;
}

}  // namespace tessera::quota::internal
