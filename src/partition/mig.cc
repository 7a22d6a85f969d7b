#include "partition/mig.h"

#include <algorithm>
#include <cassert>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

namespace tessera::partition {

Result<Instance> Instance::Parse(std::string_view text) {
  const size_t at = text.rfind('@');
  if (at == std::string_view::npos || at == 0 || at + 1 >= text.size()) {
    return Status::InvalidArgument("'" + std::string(text) +
                                   "' is not a MIG instance (profile@start)");
  }
  int start = 0;
  for (size_t k = at + 1; k < text.size(); ++k) {
    if (text[k] < '0' || text[k] > '9' || start > 1000) {
      return Status::InvalidArgument("'" + std::string(text) + "' has no start slice after '@'");
    }
    start = start * 10 + (text[k] - '0');
  }
  return Instance{std::string(text.substr(0, at)), start};
}
namespace {

using Mask = uint64_t;

Mask SliceMask(int start, int size) {
  Mask m = (size >= 64) ? ~Mask{0} : ((Mask{1} << size) - 1);
  return m << start;
}

int FirstSlice(Mask m) {
  for (int i = 0; i < 64; ++i) {
    if (m & (Mask{1} << i)) return i;
  }
  return -1;
}

// A placed instance by profile index.
struct Placed {
  int profile = 0;
  int start = 0;
};

// The occupancy of one device: what the legality rules need, updated incrementally.
class DeviceState {
 public:
  explicit DeviceState(const GpuModel& model)
      : model_(model), counts_(model.mig.profiles.size(), 0) {}

  const GpuModel& model() const { return model_; }
  const MigProfile& profile(int p) const { return model_.mig.profiles[static_cast<size_t>(p)]; }
  Mask used() const { return used_; }
  int count(int p) const { return counts_[static_cast<size_t>(p)]; }
  const std::vector<Placed>& placed() const { return placed_; }

  // OK when profile p may start at `start`; otherwise the broken rule, naming the conflict.
  Status Check(int p, int start) const {
    const MigProfile& prof = profile(p);
    const MigModelInfo& mig = model_.mig;
    if (std::find(prof.starts.begin(), prof.starts.end(), start) == prof.starts.end()) {
      return Status::InvalidArgument(prof.name + " cannot start at memory slice " +
                                     std::to_string(start) + " on " + model_.name +
                                     "; its starts are " + FormatStarts(prof.starts));
    }
    if (count(p) >= prof.max_instances) {
      return Status::FailedPrecondition(
          model_.name + " allows at most " + std::to_string(prof.max_instances) + " x " +
          prof.name + " per GPU, and " + std::to_string(count(p)) + " already exist");
    }
    if (prof.media_extension && me_count_ >= mig.media_extension_limit) {
      std::string existing;
      for (const Placed& q : placed_) {
        if (profile(q.profile).media_extension) existing = Name(q);
      }
      return Status::FailedPrecondition(
          prof.name + "@" + std::to_string(start) + " would be a second +me instance beside " +
          existing + "; " + model_.name + " allows " + std::to_string(mig.media_extension_limit) +
          " +me instance per GPU");
    }
    Mask want = SliceMask(start, prof.memory_slices);
    if (want & used_) {
      for (const Placed& q : placed_) {
        Mask theirs = SliceMask(q.start, profile(q.profile).memory_slices);
        if (want & theirs) {
          int slice = FirstSlice(want & theirs);
          return Status::FailedPrecondition(prof.name + "@" + std::to_string(start) + " overlaps " +
                                            Name(q) + " in memory slice " + std::to_string(slice));
        }
      }
    }
    if (compute_ + prof.compute_slices > mig.compute_slices) {
      return Status::FailedPrecondition(prof.name + " needs " +
                                        std::to_string(prof.compute_slices) + " compute slices; " +
                                        std::to_string(mig.compute_slices - compute_) + " of " +
                                        std::to_string(mig.compute_slices) + " are free");
    }
    if (static_cast<int>(placed_.size()) >= mig.max_gpu_instances) {
      return Status::FailedPrecondition(model_.name + " allows at most " +
                                        std::to_string(mig.max_gpu_instances) + " GPU instances");
    }
    return Status::Ok();
  }

  // The same rules as Check, without building messages (the hot path of the searches).
  bool CanPlace(int p, int start) const {
    const MigProfile& prof = profile(p);
    const MigModelInfo& mig = model_.mig;
    return count(p) < prof.max_instances &&
           !(prof.media_extension && me_count_ >= mig.media_extension_limit) &&
           !(SliceMask(start, prof.memory_slices) & used_) &&
           compute_ + prof.compute_slices <= mig.compute_slices &&
           static_cast<int>(placed_.size()) < mig.max_gpu_instances;
  }

  std::vector<int> Starts(int p) const {
    std::vector<int> out;
    for (int s : profile(p).starts) {
      if (CanPlace(p, s)) out.push_back(s);
    }
    return out;
  }

  void Add(int p, int start) {
    const MigProfile& prof = profile(p);
    used_ |= SliceMask(start, prof.memory_slices);
    ++counts_[static_cast<size_t>(p)];
    me_count_ += prof.media_extension ? 1 : 0;
    compute_ += prof.compute_slices;
    placed_.push_back({p, start});
  }

  // REQUIRES: (p, start) is the most recently added instance.
  void RemoveLast() {
    Placed q = placed_.back();
    placed_.pop_back();
    const MigProfile& prof = profile(q.profile);
    used_ &= ~SliceMask(q.start, prof.memory_slices);
    --counts_[static_cast<size_t>(q.profile)];
    me_count_ -= prof.media_extension ? 1 : 0;
    compute_ -= prof.compute_slices;
  }

  std::string Name(const Placed& q) const {
    return profile(q.profile).name + "@" + std::to_string(q.start);
  }

  Layout ToLayout() const {
    Layout l;
    for (const Placed& q : placed_) l.instances.push_back({profile(q.profile).name, q.start});
    return l;
  }

 private:
  const GpuModel& model_;
  std::vector<int> counts_;
  std::vector<Placed> placed_;
  Mask used_ = 0;
  int me_count_ = 0;
  int compute_ = 0;
};

Status UnknownProfile(const GpuModel& model, std::string_view name) {
  return Status::InvalidArgument("unknown profile '" + std::string(name) + "' for " + model.name +
                                 "; profiles: " + model.mig.ProfileNames());
}

// Builds the state of an existing layout, checking every instance against the rules.
Status LoadLayout(const Layout& layout, DeviceState* state) {
  const GpuModel& model = state->model();
  if (!model.is_mig()) {
    return Status::InvalidArgument(model.name + " is not a MIG device");
  }
  for (const Instance& inst : layout.instances) {
    int p = model.mig.ProfileIndex(inst.profile);
    if (p < 0) return UnknownProfile(model, inst.profile);
    Status s = state->Check(p, inst.start);
    if (!s.ok()) {
      return Status::InvalidArgument("the existing layout is not legal: " + s.message());
    }
    state->Add(p, inst.start);
  }
  return Status::Ok();
}

std::vector<int> IncludedProfiles(const GpuModel& model, EnumerateOptions options) {
  std::vector<int> out;
  for (size_t i = 0; i < model.mig.profiles.size(); ++i) {
    if (options.include_media_extension || !model.mig.profiles[i].media_extension) {
      out.push_back(static_cast<int>(i));
    }
  }
  return out;
}

// Visits every legal set of (profile, start) candidates once, in candidate order.
template <typename Visit>
void EnumerateFrom(DeviceState* state, const std::vector<Placed>& candidates, size_t next,
                   Visit& visit) {
  visit(*state);
  for (size_t i = next; i < candidates.size(); ++i) {
    const Placed& c = candidates[i];
    if (!state->CanPlace(c.profile, c.start)) continue;
    state->Add(c.profile, c.start);
    EnumerateFrom(state, candidates, i + 1, visit);
    state->RemoveLast();
  }
}

template <typename Visit>
void EnumerateStates(const GpuModel& model, EnumerateOptions options, Visit visit) {
  assert(model.is_mig());
  std::vector<Placed> candidates;
  for (int p : IncludedProfiles(model, options)) {
    for (int s : model.mig.profiles[static_cast<size_t>(p)].starts) candidates.push_back({p, s});
  }
  DeviceState state(model);
  EnumerateFrom(&state, candidates, 0, visit);
}

bool IsMaximal(const DeviceState& state, const std::vector<int>& included) {
  for (int p : included) {
    for (int s : state.profile(p).starts) {
      if (state.CanPlace(p, s)) return false;
    }
  }
  return true;
}

using Counts = std::vector<int>;  // instances per profile index

ProfileMultiset ToMultiset(const GpuModel& model, const Counts& counts) {
  ProfileMultiset out;
  for (size_t p = 0; p < counts.size(); ++p) {
    for (int k = 0; k < counts[p]; ++k) out.push_back(model.mig.profiles[p].name);
  }
  return out;
}

std::set<Counts> FittingCounts(const GpuModel& model, EnumerateOptions options) {
  std::set<Counts> out;
  EnumerateStates(model, options, [&](const DeviceState& state) {
    if (state.placed().empty()) return;
    Counts c(model.mig.profiles.size(), 0);
    for (const Placed& q : state.placed()) ++c[static_cast<size_t>(q.profile)];
    out.insert(std::move(c));
  });
  return out;
}

// Orders multisets with fewer instances first, then by catalog order: small ones read first.
bool MultisetLess(const GpuModel& model, const ProfileMultiset& a, const ProfileMultiset& b) {
  if (a.size() != b.size()) return a.size() < b.size();
  for (size_t i = 0; i < a.size(); ++i) {
    int pa = model.mig.ProfileIndex(a[i]), pb = model.mig.ProfileIndex(b[i]);
    if (pa != pb) return pa < pb;
  }
  return false;
}

// Backtracking search for the `order` (indices into `wanted`) on top of `state`.
bool Search(DeviceState* state, const std::vector<int>& wanted, const std::vector<int>& order,
            size_t k, std::vector<int>* starts) {
  if (k == order.size()) return true;
  int item = order[k];
  int p = wanted[static_cast<size_t>(item)];
  // Identical profiles are interchangeable: place them at increasing starts only.
  int min_start = -1;
  if (k > 0 && wanted[static_cast<size_t>(order[k - 1])] == p) {
    min_start = (*starts)[static_cast<size_t>(order[k - 1])];
  }
  for (int s : state->profile(p).starts) {
    if (s <= min_start || !state->CanPlace(p, s)) continue;
    state->Add(p, s);
    (*starts)[static_cast<size_t>(item)] = s;
    if (Search(state, wanted, order, k + 1, starts)) return true;
    state->RemoveLast();
  }
  return false;
}

// Largest memory first, then fewest listed starts, then catalog order (keeps equal profiles
// adjacent for the symmetry cut in Search).
std::vector<int> SearchOrder(const GpuModel& model, const std::vector<int>& wanted,
                             const std::vector<int>& items) {
  std::vector<int> order = items;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const MigProfile& pa = model.mig.profiles[static_cast<size_t>(wanted[static_cast<size_t>(a)])];
    const MigProfile& pb = model.mig.profiles[static_cast<size_t>(wanted[static_cast<size_t>(b)])];
    if (pa.memory_slices != pb.memory_slices) return pa.memory_slices > pb.memory_slices;
    if (pa.compute_slices != pb.compute_slices) return pa.compute_slices > pb.compute_slices;
    if (pa.starts.size() != pb.starts.size()) return pa.starts.size() < pb.starts.size();
    return wanted[static_cast<size_t>(a)] < wanted[static_cast<size_t>(b)];
  });
  return order;
}

bool Feasible(DeviceState* state, const std::vector<int>& wanted, const std::vector<int>& items,
              std::vector<int>* starts) {
  size_t before = state->placed().size();
  bool ok = Search(state, wanted, SearchOrder(state->model(), wanted, items), 0, starts);
  while (state->placed().size() > before) state->RemoveLast();
  return ok;
}

std::string JoinWithAnd(const std::vector<std::string>& parts) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += (i + 1 == parts.size()) ? " and " : ", ";
    out += parts[i];
  }
  return out;
}

std::string ExistingSuffix(const DeviceState& existing, size_t count, const char* prefix) {
  if (count == 0) return "";
  std::string out = prefix;
  for (size_t i = 0; i < count; ++i) {
    out += (i > 0 ? ", " : "") + existing.Name(existing.placed()[i]);
  }
  return out;
}

// Explains why `items` (a minimal infeasible subset) cannot be placed beside `existing`.
std::string DescribeConflict(const DeviceState& existing, const std::vector<int>& wanted,
                             const std::vector<int>& items) {
  std::map<int, int> groups;  // profile -> count, catalog order
  for (int i : items) ++groups[wanted[static_cast<size_t>(i)]];
  std::vector<std::pair<int, int>> ordered(groups.begin(), groups.end());
  std::stable_sort(ordered.begin(), ordered.end(), [&](const auto& a, const auto& b) {
    return existing.profile(a.first).memory_slices > existing.profile(b.first).memory_slices;
  });
  std::vector<std::string> parts;
  for (const auto& [p, n] : ordered) {
    std::string names;
    for (int k = 0; k < n; ++k) names += (k > 0 ? "+" : "") + existing.profile(p).name;
    std::vector<int> starts = existing.Starts(p);
    parts.push_back(names + " (starts " + (starts.empty() ? "none free" : FormatStarts(starts)) +
                    ")");
  }
  size_t n_existing = existing.placed().size();
  if (parts.size() == 1 && n_existing > 0) {
    return parts[0] + " cannot be placed" +
           ExistingSuffix(existing, n_existing, ": memory slices are taken by existing ");
  }
  std::string verb = items.size() == 1 ? " has no legal start" : " overlap in memory slices";
  return JoinWithAnd(parts) + verb + ExistingSuffix(existing, n_existing, " beside existing ");
}

std::string SliceWord(int n) { return n == 1 ? " slice" : " slices"; }

}  // namespace

std::string Layout::ToString() const {
  if (instances.empty()) return "(empty)";
  std::vector<Instance> sorted = instances;
  std::sort(sorted.begin(), sorted.end(),
            [](const Instance& a, const Instance& b) { return a.start < b.start; });
  std::string out;
  for (const Instance& i : sorted) out += (out.empty() ? "" : ", ") + i.ToString();
  return out;
}

std::string FormatStarts(const std::vector<int>& starts) {
  std::string out = "{";
  for (size_t i = 0; i < starts.size(); ++i) {
    out += (i > 0 ? "," : "") + std::to_string(starts[i]);
  }
  return out + "}";
}

Result<std::vector<int>> LegalStarts(const GpuModel& model, const Layout& layout,
                                     std::string_view profile) {
  DeviceState state(model);
  Status s = LoadLayout(layout, &state);
  if (!s.ok()) return s;
  int p = model.mig.ProfileIndex(profile);
  if (p < 0) return UnknownProfile(model, profile);
  return state.Starts(p);
}

Status CheckCreate(const GpuModel& model, const Layout& layout, const Instance& instance) {
  DeviceState state(model);
  Status s = LoadLayout(layout, &state);
  if (!s.ok()) return s;
  int p = model.mig.ProfileIndex(instance.profile);
  if (p < 0) return UnknownProfile(model, instance.profile);
  return state.Check(p, instance.start);
}

Status CreateInstance(const GpuModel& model, Layout* layout, const Instance& instance) {
  Status s = CheckCreate(model, *layout, instance);
  if (!s.ok()) return s;
  const MigProfile* p = model.mig.FindProfile(instance.profile);
  layout->instances.push_back({p->name, instance.start});
  return Status::Ok();
}

Status DestroyInstance(const GpuModel& model, Layout* layout, const Instance& instance) {
  const MigProfile* p = model.mig.FindProfile(instance.profile);
  if (p == nullptr) return UnknownProfile(model, instance.profile);
  for (auto it = layout->instances.begin(); it != layout->instances.end(); ++it) {
    if (it->start == instance.start && model.mig.FindProfile(it->profile) == p) {
      layout->instances.erase(it);
      return Status::Ok();
    }
  }
  return Status::NotFound("no " + p->name + " instance at memory slice " +
                          std::to_string(instance.start) + " (layout: " + layout->ToString() + ")");
}

std::vector<Layout> EnumerateLayouts(const GpuModel& model, EnumerateOptions options) {
  std::vector<Layout> out;
  EnumerateStates(model, options, [&](const DeviceState& s) { out.push_back(s.ToLayout()); });
  return out;
}

std::vector<Layout> MaximalLayouts(const GpuModel& model, EnumerateOptions options) {
  std::vector<int> included = IncludedProfiles(model, options);
  std::vector<Layout> out;
  EnumerateStates(model, options, [&](const DeviceState& s) {
    if (IsMaximal(s, included)) out.push_back(s.ToLayout());
  });
  return out;
}

std::vector<ProfileMultiset> FittingMultisets(const GpuModel& model, EnumerateOptions options) {
  std::vector<ProfileMultiset> out;
  for (const Counts& c : FittingCounts(model, options)) out.push_back(ToMultiset(model, c));
  std::sort(out.begin(), out.end(),
            [&](const auto& a, const auto& b) { return MultisetLess(model, a, b); });
  return out;
}

std::vector<Geometry> MaximalGeometries(const GpuModel& model, EnumerateOptions options) {
  std::vector<int> included = IncludedProfiles(model, options);
  std::map<Counts, Layout> seen;
  EnumerateStates(model, options, [&](const DeviceState& s) {
    if (s.placed().empty() || !IsMaximal(s, included)) return;
    Counts c(model.mig.profiles.size(), 0);
    for (const Placed& q : s.placed()) ++c[static_cast<size_t>(q.profile)];
    seen.emplace(std::move(c), s.ToLayout());  // keeps the first layout found
  });
  std::vector<Geometry> out;
  for (const auto& [counts, layout] : seen) out.push_back({ToMultiset(model, counts), layout});
  std::sort(out.begin(), out.end(), [&](const Geometry& a, const Geometry& b) {
    return MultisetLess(model, a.profiles, b.profiles);
  });
  return out;
}

std::vector<ProfileMultiset> MaximalMultisets(const GpuModel& model, EnumerateOptions options) {
  std::vector<ProfileMultiset> out;
  for (Geometry& g : MaximalGeometries(model, options)) out.push_back(std::move(g.profiles));
  return out;
}

namespace {

// ", 2 already present" (nothing when n is 0): what the device holds, in an error.
std::string ExistingNote(int n, const char* what) {
  return n > 0 ? ", " + std::to_string(n) + " " + what : std::string();
}

// The caps of each profile (at most so many per GPU) and of the "+me" profiles together.
Status CheckProfileCaps(const GpuModel& model, const DeviceState& state,
                        const std::vector<int>& wanted) {
  const MigModelInfo& mig = model.mig;
  std::vector<int> want_count(mig.profiles.size(), 0);
  for (int p : wanted) ++want_count[static_cast<size_t>(p)];
  for (size_t p = 0; p < mig.profiles.size(); ++p) {
    int have = state.count(static_cast<int>(p));
    if (want_count[p] > 0 && want_count[p] + have > mig.profiles[p].max_instances) {
      return Status::ResourceExhausted(
          "wants " + std::to_string(want_count[p]) + " x " + mig.profiles[p].name +
          ExistingNote(have, "already present") + ", at most " +
          std::to_string(mig.profiles[p].max_instances) + " per GPU on " + model.name);
    }
  }
  // The "+me" cap spans profiles.
  int me_want = 0, me_have = 0;
  std::string me_names;
  for (int p : wanted) {
    if (mig.profiles[static_cast<size_t>(p)].media_extension) {
      ++me_want;
      me_names += (me_names.empty() ? "" : ", ") + mig.profiles[static_cast<size_t>(p)].name;
    }
  }
  for (const Placed& q : state.placed()) me_have += state.profile(q.profile).media_extension;
  if (me_want > 0 && me_want + me_have > mig.media_extension_limit) {
    return Status::ResourceExhausted("wants " + std::to_string(me_want) + " +me instances (" +
                                     me_names + ")" + ExistingNote(me_have, "already present") +
                                     ", at most " + std::to_string(mig.media_extension_limit) +
                                     " +me instance per GPU on " + model.name);
  }
  return Status::Ok();
}

// The device's totals: memory and compute slices, GPU instances.
Status CheckTotals(const GpuModel& model, const DeviceState& state,
                   const std::vector<int>& wanted) {
  const MigModelInfo& mig = model.mig;
  const size_t n_existing = state.placed().size();
  int mem_want = 0, compute_want = 0, mem_have = 0, compute_have = 0;
  for (int p : wanted) {
    mem_want += mig.profiles[static_cast<size_t>(p)].memory_slices;
    compute_want += mig.profiles[static_cast<size_t>(p)].compute_slices;
  }
  for (const Placed& q : state.placed()) {
    mem_have += state.profile(q.profile).memory_slices;
    compute_have += state.profile(q.profile).compute_slices;
  }
  if (mem_want + mem_have > mig.memory_slices) {
    return Status::ResourceExhausted("wants " + std::to_string(mem_want) + " memory" +
                                     SliceWord(mem_want) +
                                     ExistingNote(mem_have, "already in use") + ", " + model.name +
                                     " has " + std::to_string(mig.memory_slices));
  }
  if (compute_want + compute_have > mig.compute_slices) {
    return Status::ResourceExhausted("wants " + std::to_string(compute_want) + " compute" +
                                     SliceWord(compute_want) +
                                     ExistingNote(compute_have, "already in use") + ", " +
                                     model.name + " has " + std::to_string(mig.compute_slices));
  }
  if (static_cast<int>(wanted.size() + n_existing) > mig.max_gpu_instances) {
    return Status::ResourceExhausted("wants " + std::to_string(wanted.size()) + " GPU instances" +
                                     ExistingNote(static_cast<int>(n_existing), "already present") +
                                     ", " + model.name + " allows " +
                                     std::to_string(mig.max_gpu_instances));
  }
  return Status::Ok();
}

// Deletion filter: drops every item whose removal leaves the rest still infeasible. What
// remains is a minimal conflicting subset.
std::vector<int> MinimalConflict(DeviceState* state, const std::vector<int>& wanted,
                                 const std::vector<int>& items) {
  std::vector<int> core = items;
  for (int item : items) {
    std::vector<int> without;
    for (int i : core) {
      if (i != item) without.push_back(i);
    }
    std::vector<int> scratch(wanted.size(), -1);
    if (!Feasible(state, wanted, without, &scratch)) core = std::move(without);
  }
  return core;
}

}  // namespace

Result<MigPlan> Plan(const GpuModel& model, const std::vector<std::string>& wanted_names,
                     const Layout& existing) {
  DeviceState state(model);
  Status loaded = LoadLayout(existing, &state);
  if (!loaded.ok()) return loaded;
  const MigModelInfo& mig = model.mig;
  std::vector<int> wanted;
  for (const std::string& name : wanted_names) {
    int p = mig.ProfileIndex(name);
    if (p < 0) return UnknownProfile(model, name);
    wanted.push_back(p);
  }
  if (Status caps = CheckProfileCaps(model, state, wanted); !caps.ok()) return caps;
  if (Status totals = CheckTotals(model, state, wanted); !totals.ok()) return totals;

  std::vector<int> items(wanted.size());
  std::iota(items.begin(), items.end(), 0);
  std::vector<int> starts(wanted.size(), -1);
  if (Feasible(&state, wanted, items, &starts)) {
    MigPlan plan;
    plan.layout = existing;
    for (size_t i = 0; i < wanted.size(); ++i) {
      Instance inst{mig.profiles[static_cast<size_t>(wanted[i])].name, starts[i]};
      plan.placed.push_back(inst);
      plan.layout.instances.push_back(inst);
    }
    return plan;
  }
  const std::vector<int> core = MinimalConflict(&state, wanted, items);
  return Status::ResourceExhausted("no legal layout on " + model.name + ": " +
                                   DescribeConflict(state, wanted, core));
}

Result<Eviction> CheapestEviction(const GpuModel& model, const std::vector<CostedInstance>& current,
                                  std::string_view wanted) {
  if (!model.is_mig()) return Status::InvalidArgument(model.name + " is not a MIG device");
  int want = model.mig.ProfileIndex(wanted);
  if (want < 0) return UnknownProfile(model, wanted);
  constexpr size_t kMaxInstances = 20;  // 2^20 subsets at most; real devices hold <= 7
  if (current.size() > kMaxInstances) {
    return Status::InvalidArgument("too many current instances (" + std::to_string(current.size()) +
                                   ")");
  }
  Layout all;
  for (const CostedInstance& c : current) {
    if (c.cost < 0) {
      return Status::InvalidArgument("negative eviction cost " + std::to_string(c.cost) + " for " +
                                     c.instance.ToString());
    }
    all.instances.push_back(c.instance);
  }
  {
    DeviceState check(model);
    Status s = LoadLayout(all, &check);
    if (!s.ok()) return s;
  }
  std::vector<int> profile_of;
  for (const CostedInstance& c : current)
    profile_of.push_back(model.mig.ProfileIndex(c.instance.profile));

  struct Best {
    uint64_t subset = 0;
    int64_t cost = 0;
    int count = 0;
    int slices = 0;
    int start = 0;
  };
  bool found = false;
  Best best;
  const uint64_t n_subsets = uint64_t{1} << current.size();
  for (uint64_t subset = 0; subset < n_subsets; ++subset) {
    int64_t cost = 0;
    int count = 0, slices = 0;
    DeviceState state(model);
    for (size_t i = 0; i < current.size(); ++i) {
      if (subset & (uint64_t{1} << i)) {
        cost += current[i].cost;
        ++count;
        slices += model.mig.profiles[static_cast<size_t>(profile_of[i])].memory_slices;
      } else {
        state.Add(profile_of[i], current[i].instance.start);
      }
    }
    if (found && std::tie(cost, count, slices) >= std::tie(best.cost, best.count, best.slices)) {
      continue;
    }
    std::vector<int> starts = state.Starts(want);
    if (starts.empty()) continue;
    found = true;
    best = {subset, cost, count, slices, starts.front()};
  }
  if (!found) {
    return Status::ResourceExhausted("no set of instances to evict lets " +
                                     model.mig.profiles[static_cast<size_t>(want)].name +
                                     " fit on " + model.name);
  }
  Eviction out;
  out.cost = best.cost;
  out.placed = {model.mig.profiles[static_cast<size_t>(want)].name, best.start};
  for (size_t i = 0; i < current.size(); ++i) {
    if (best.subset & (uint64_t{1} << i)) out.evict.push_back(current[i].instance);
  }
  return out;
}

std::string SliceMap(const GpuModel& model, const Layout& layout) {
  constexpr int kWidth = kSliceMapWidth;
  const int n = model.mig.memory_slices;
  std::string map(static_cast<size_t>(n * kWidth), '.');
  for (const Instance& inst : layout.instances) {
    const MigProfile* p = model.mig.FindProfile(inst.profile);
    if (p == nullptr || inst.start < 0 || inst.start + p->memory_slices > n) continue;
    const int room = p->memory_slices * kWidth - 2;
    std::string label = p->name;
    if (static_cast<int>(label.size()) > room) label = label.substr(0, label.find('.'));
    if (static_cast<int>(label.size()) > room) label = label.substr(0, static_cast<size_t>(room));
    label.resize(static_cast<size_t>(room), ' ');
    map.replace(static_cast<size_t>(inst.start * kWidth),
                static_cast<size_t>(p->memory_slices * kWidth), "[" + label + "]");
  }
  return map;
}

}  // namespace tessera::partition
