// Quota dimensions of the quota engine (engine_models.cc; docs/scheduling.md, "Quota per GPU
// model" and "Quota per pool"). A grant lands on a device, and the device is a cell along each
// dimension: its GPU model (cells: the engine's model ids) and its pool (cells: pool indices).
// A group's quotas along a dimension each cover a set of cells (a model: one; a family: its
// models; a pool: one) with a reservation and a limit in milli-GPU. The same rules hold along
// both dimensions: limits stop admission, reservations are promises that reclaim restores and
// lenders keep, and the GPU reservation less the dimension's reservations may be held anywhere.
//
// Thread-safety: value types, owned by the engine's one thread.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "sched/quota/policy_model.h"

namespace tessera::quota::internal {

inline constexpr int kModelDim = 0, kPoolDim = 1, kDims = 2;

// One quota of a group along a dimension.
struct CellQuota {
  std::string name;     // as the policy names it: a model, a family or a pool
  bool family = false;  // a GPU model family: models that appear later join its cells
  uint64_t cells = 0;   // a bit per cell
  int64_t res = 0;
  int64_t limit = kUnlimited;
};

// A group's quotas along one dimension, and what it holds per cell (own and descendants').
struct DimQuota {
  bool on = false;  // the group has quotas along this dimension
  std::array<int64_t, 64> usage{};
  std::vector<CellQuota> quotas;
  std::array<int8_t, 64> reserving;  // per cell: the quota whose reservation covers it; -1 none
  int64_t generic_res = 0;           // the GPU reservation less the quotas' reservations
  DimQuota() { reserving.fill(-1); }
  int64_t Held(uint64_t cells) const {
    int64_t h = 0;
    for (uint64_t m = cells; m != 0; m &= m - 1) h += usage[__builtin_ctzll(m)];
    return h;
  }
};

// What a job's grants charge per cell (milli-GPU), and per dimension.
using CellCharge = std::vector<std::pair<int, int64_t>>;
// What victims take from groups: dimension -> cell -> milli-GPU.
using CellTaken = std::array<std::map<int, int64_t>, kDims>;

}  // namespace tessera::quota::internal
