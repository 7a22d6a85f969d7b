// NVIDIA MIG layout engine: where GPU instances (GIs) may go on one device.
//
// A MIG device has M memory slices (8 on A100/H100/H200/B200, 4 on A30) and C compute slices
// (7, or 4). A GI of profile P occupies memory slices [start, start + P.memory_slices) and
// P.compute_slices compute slices. A layout is legal when:
//   1. every GI starts at one of its profile's listed starts;
//   2. no two GIs share a memory slice;
//   3. no profile has more than its max_instances GIs;
//   4. at most `media_extension_limit` (1) "+me" GIs exist, across all "+me" profiles
//      (one OFA/JPEG engine per GPU; on A30 this covers both 1g.6gb+me and 2g.12gb+me);
//   5. the compute slices add up to at most C, and the GI count to at most max_gpu_instances.
//
// Worked example, A100-40GB (starts: 1g {0..6}, 2g {0,2,4}, 3g {0,4}, 4g {0}, 7g {0}):
//   Plan(a100, {"1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"}) places the largest first:
//     3g.20gb@0 (slices 0-3), 2g.10gb@4 (4-5), 1g.5gb@6, and the second 1g.5gb has no room
//     (slice 7 takes no 1g), so the search backtracks: 3g.20gb@4, 2g.10gb@0, 1g.5gb@2, 1g.5gb@3.
//   A 1g.5gb at slice 4 blocks a later 3g.20gb at 4; anything in slices 0-3 blocks 4g.20gb.
//
// All functions are pure: they take the model and the current instances and return a value
// or a Status whose message names the conflict. Errors: kInvalidArgument for unknown profiles
// and malformed input; kFailedPrecondition when the current instances forbid one placement;
// kResourceExhausted when a whole request cannot be met.
//
// Thread-safety: stateless functions over value types.
#pragma once

#include <compare>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "partition/catalog.h"

namespace tessera::partition {

// One GPU instance: a profile (canonical name) placed at its first memory slice.
struct Instance {
  std::string profile;
  int start = 0;

  friend bool operator==(const Instance&, const Instance&) = default;
  friend auto operator<=>(const Instance&, const Instance&) = default;
  // "3g.20gb@4"
  std::string ToString() const { return profile + "@" + std::to_string(start); }
  // The inverse of ToString: "3g.20gb@4" -> {"3g.20gb", 4}; the profile is not checked here.
  static Result<Instance> Parse(std::string_view text);
};

// The GPU instances on one device. Order is not significant.
struct Layout {
  std::vector<Instance> instances;

  bool empty() const { return instances.empty(); }
  // "1g.5gb@0, 3g.20gb@4" (sorted by start), or "(empty)".
  std::string ToString() const;
};

// A sorted multiset of profile names (catalog order), e.g. {"1g.5gb", "1g.5gb", "3g.20gb"}.
using ProfileMultiset = std::vector<std::string>;

struct EnumerateOptions {
  bool include_media_extension = false;  // count "+me" profiles too
};

// Starts where `profile` could be created now, ascending; empty when none (including when a
// per-GPU cap is reached). kInvalidArgument for an unknown profile or an illegal `layout`.
// REQUIRES: model.is_mig().
Result<std::vector<int>> LegalStarts(const GpuModel& model, const Layout& layout,
                                     std::string_view profile);

// OK when `instance` may be added to `layout`; otherwise the rule it breaks and the instance
// it conflicts with, e.g. "4g.20gb@0 overlaps 1g.5gb@1 in memory slice 1".
Status CheckCreate(const GpuModel& model, const Layout& layout, const Instance& instance);

// Adds `instance` (profile name canonicalised) when CheckCreate allows it.
Status CreateInstance(const GpuModel& model, Layout* layout, const Instance& instance);

// Removes one instance equal to `instance` (profile matched case-insensitively, also through
// aliases); kNotFound when there is none.
Status DestroyInstance(const GpuModel& model, Layout* layout, const Instance& instance);

// Every legal layout of the model, the empty one included. Each set of instances once.
std::vector<Layout> EnumerateLayouts(const GpuModel& model, EnumerateOptions options = {});
// The legal layouts to which no instance of an included profile can be added.
std::vector<Layout> MaximalLayouts(const GpuModel& model, EnumerateOptions options = {});

// The distinct non-empty multisets of profiles that some legal layout holds.
std::vector<ProfileMultiset> FittingMultisets(const GpuModel& model, EnumerateOptions options = {});

// A geometry: the multiset of profiles of a maximal layout, with one such layout. Distinct
// maximal layouts with the same multiset are one geometry. Fragmentation counts: on
// A100-40GB, 3g.20gb@0 + 1g.10gb@4 + 1g.5gb@6 is maximal (slice 7 takes no 1g.5gb) although
// the same profiles plus another 1g.5gb fit when placed differently.
struct Geometry {
  ProfileMultiset profiles;
  Layout example;  // a maximal layout holding exactly `profiles`
};
// The geometries of the model (fewer instances first, then catalog order). For the 8-slice
// placement table there are 38 (and 77 fitting multisets), "+me" profiles left out.
std::vector<Geometry> MaximalGeometries(const GpuModel& model, EnumerateOptions options = {});
// Just the multisets of MaximalGeometries.
std::vector<ProfileMultiset> MaximalMultisets(const GpuModel& model, EnumerateOptions options = {});

struct MigPlan {
  std::vector<Instance> placed;  // one per wanted profile, in the order wanted
  Layout layout;                 // existing instances plus `placed`
};

// Finds explicit starts for every wanted profile next to `existing`, by backtracking with
// the largest profiles first. On failure the message is precise: an unknown profile
// (kInvalidArgument); or (kResourceExhausted) a per-GPU cap ("wants 2 x 4g.20gb, at most 1
// per GPU"), too many "+me" GIs, memory or compute slices beyond the device's, or else a
// minimal conflicting subset with the starts each allows, e.g. "3g.20gb (starts {0,4}) and
// 1g.5gb+1g.5gb+1g.5gb+1g.5gb (starts {0,1,2,3,4,5,6}) overlap in memory slices".
Result<MigPlan> Plan(const GpuModel& model, const std::vector<std::string>& wanted,
                     const Layout& existing = {});

struct CostedInstance {
  Instance instance;
  int64_t cost = 1;  // e.g. the priority or the work lost by evicting it; >= 0
};

struct Eviction {
  std::vector<Instance> evict;  // may be empty: the profile fits already
  int64_t cost = 0;
  Instance placed;  // where the wanted profile goes once `evict` is gone
};

// The cheapest set of current instances to remove so that `wanted` gets a legal start.
// Ties go to fewer instances, then fewer memory slices freed. kResourceExhausted when no set
// works; kInvalidArgument for an unknown profile, a negative cost or illegal current layout.
Result<Eviction> CheapestEviction(const GpuModel& model, const std::vector<CostedInstance>& current,
                                  std::string_view wanted);

// A one-line picture of the memory slices, kSliceMapWidth characters per slice, free slices
// as dots: "[3g.20gb           ][2g.10gb ][1g ]....." for 3g@0, 2g@4, 1g@6 on A100-40GB.
inline constexpr int kSliceMapWidth = 5;
std::string SliceMap(const GpuModel& model, const Layout& layout);

// "{0,2,4}".
std::string FormatStarts(const std::vector<int>& starts);

}  // namespace tessera::partition
