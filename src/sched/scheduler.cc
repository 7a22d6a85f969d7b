#include "sched/scheduler.h"

#include <algorithm>
#include <numeric>

#include "common/enum_names.h"
#include "model/quantity.h"

namespace tessera::sched {

namespace {
constexpr auto kOutcomeNames =
    NamesUpTo<Outcome::kNeverSchedulable>("placed", "unschedulable now", "never schedulable");
}  // namespace

const char* OutcomeName(Outcome o) { return kOutcomeNames.Of(o, "unknown"); }

Scheduler::Scheduler(ClusterState state, std::unique_ptr<Policy> policy, uint64_t seed)
    : state_(std::move(state)), policy_(std::move(policy)), rng_(seed) {
  order_.resize(state_.node_count());
  std::iota(order_.begin(), order_.end(), 0);
  // Fisher-Yates with raw draws: the same seed gives the same order with any standard library.
  for (size_t i = order_.size(); i > 1; --i) {
    std::swap(order_[i - 1], order_[static_cast<size_t>(rng_() % i)]);
  }
  rank_of_.resize(order_.size());
  for (size_t i = 0; i < order_.size(); ++i) rank_of_[order_[i]] = static_cast<int>(i);
  ctx_ = SelectContext{&order_, &rank_of_, &rng_};
  policy_->Attach(state_, ctx_);
}

PlacementResult Scheduler::Place(const PlacementRequest& r) {
  policy_->Observe(r);
  PlacementResult res;
  if (!policy_->Select(state_, r, ctx_, &res.placement)) return Diagnose(r);
  state_.Reserve(res.placement);
  policy_->Reserved(res.placement, r);
  policy_->NodeChanged(state_, res.placement.node);
  res.outcome = Outcome::kPlaced;
  return res;
}

Status Scheduler::Adopt(const Placement& p) {
  if (p.node < 0 || p.node >= state_.node_count()) return Status::InvalidArgument("no such node");
  const NodeState& n = state_.node(p.node);
  if (p.cpu_milli < 0 || p.memory_mib < 0 || p.gpu_milli < 0 || p.gpu_memory_mib < 0) {
    return Status::InvalidArgument("a placement's amounts cannot be negative");
  }
  if (p.device_count < 0 || p.device_count > n.device_count) {
    return Status::InvalidArgument("device count " + std::to_string(p.device_count) +
                                   " on a node of " + std::to_string(n.device_count) + " devices");
  }
  if (p.gpu_milli > 1000) {
    return Status::InvalidArgument(
        "GPU share per device past a whole device: " + std::to_string(p.gpu_milli) + " milli");
  }
  for (int k = 0; k < p.device_count; ++k) {
    for (int j = 0; j < k; ++j) {
      if (p.devices[j] == p.devices[k]) {
        return Status::InvalidArgument("device " + std::to_string(p.devices[k]) +
                                       " is listed twice");
      }
    }
  }
  if (n.cpu_free < p.cpu_milli || n.memory_free < p.memory_mib) {
    return Status::FailedPrecondition("node '" + state_.node_name(p.node) +
                                      "' lacks CPU or memory");
  }
  for (int k = 0; k < p.device_count; ++k) {
    int d = p.devices[k];
    if (d < 0 || d >= n.device_count) return Status::InvalidArgument("no such device");
    if (n.gpu_free[d] < p.gpu_milli || n.gpu_memory_free[d] < p.gpu_memory_mib) {
      return Status::FailedPrecondition("device " + std::to_string(d) + " of node '" +
                                        state_.node_name(p.node) + "' is already taken");
    }
  }
  state_.Reserve(p);
  PlacementRequest r;  // what the placement holds, as a request
  r.cpu_milli = p.cpu_milli;
  r.memory_mib = p.memory_mib;
  r.gpu_count = p.device_count;
  r.gpu_milli = p.gpu_milli;
  r.gpu_memory_mib = p.gpu_memory_mib;
  policy_->Reserved(p, r);
  policy_->NodeChanged(state_, p.node);
  return Status::Ok();
}

Status Scheduler::AddNode(const Node& n) {
  auto added = state_.AddNode(n);
  if (!added.ok()) return added.status();
  order_.push_back(*added);
  rank_of_.push_back(static_cast<int>(order_.size()) - 1);
  if (!policy_->NodeAdded(state_, *added)) {
    return Status::FailedPrecondition("policy '" + std::string(policy_->name()) +
                                      "' does not take nodes in place");
  }
  return Status::Ok();
}

void Scheduler::Release(const Placement& p) {
  state_.Release(p);
  policy_->Released(p);
  policy_->NodeChanged(state_, p.node);
}

// Only on failure: could an empty cluster hold the request at all (against each node's totals),
// and which filter step rejected the most nodes now? One pass, no copies.
PlacementResult Scheduler::Diagnose(const PlacementRequest& r) const {
  int resource = 0, model = 0, gpu = 0;
  bool ever = false;
  for (int i = 0; i < state_.node_count(); ++i) {
    const NodeState& n = state_.node(i);
    const bool model_ok =
        r.gpu_count == 0 ||
        (n.model >= 0 && (r.models == 0 || (r.models & (ModelMask{1} << n.model)) != 0));
    if (!model_ok) {
      ++model;
      continue;
    }
    if (!ever && n.cpu_total >= r.cpu_milli && n.memory_total >= r.memory_mib) {
      int could = 0;
      for (int d = 0; d < n.device_count; ++d) {
        could += n.gpu_memory_total[d] >= r.gpu_memory_mib ? 1 : 0;
      }
      ever = r.gpu_count == 0 || (r.gpu_milli <= kWholeGpu && could >= r.gpu_count);
    }
    if (n.cpu_free < r.cpu_milli || n.memory_free < r.memory_mib) {
      ++resource;
    } else {
      ++gpu;
    }
  }
  PlacementResult res;
  res.outcome = ever ? Outcome::kUnschedulableNow : Outcome::kNeverSchedulable;
  std::string need = "cpu " + FormatMilli(r.cpu_milli) + ", memory " + FormatMiB(r.memory_mib);
  if (r.gpu_count > 0) {
    need += ", " + std::to_string(r.gpu_count) + " x " + FormatMilli(r.gpu_milli) + " GPU";
  }
  const int total = state_.node_count();
  if (model == total) {
    res.step = "GpuModel";
    res.reason = "no node has an allowed GPU model";
  } else if (resource >= gpu) {
    res.step = "ResourceFit";
    res.reason = std::to_string(resource) + " of " + std::to_string(total) +
                 " nodes lack CPU or memory for " + need;
  } else {
    res.step = "GpuFit";
    res.reason = std::to_string(gpu) + " of " + std::to_string(total) +
                 " nodes lack devices with room for " + need;
  }
  if (!ever) res.reason = "no node could hold it even when empty: " + res.reason;
  return res;
}

}  // namespace tessera::sched
