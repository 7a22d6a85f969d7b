// One queue over several external backends (issue 39): each job goes to the backend where it is
// predicted to start first, from that backend's capacity and what Tessera holds there. Pure
// integer arithmetic (thousandths of a card, seconds); no engine state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::quota {

// A job held in a backend: its GPU (milli) and when it is expected to give it back (its start
// plus its walltime; kForecastNever when it declared none).
struct PoolHold {
  int64_t gpu_milli = 0;
  int64_t end = 0;
};

inline constexpr int64_t kForecastNever = INT64_MAX / 4;

// The earliest time at or after `now` at which `need` fits in `capacity` (negative: unbounded,
// so now) once the holds that end by then have given theirs back; kForecastNever when it never
// does (a hold without an end, or more than the whole capacity).
int64_t PredictStart(int64_t capacity, int64_t now, std::vector<PoolHold> holds, int64_t need);

// One backend's forecast for a job at dispatch.
struct PoolForecast {
  std::string pool;
  int64_t start = kForecastNever;  // predicted start (seconds on the engine's clock)
  std::string note;                // why, when not now: "1.000 of 2.000 GPU free", "not answering"
};

// The index of the earliest predicted start; on a tie the first in the list (the queue's order
// of preference). -1 when every start is kForecastNever.
int ChooseEarliest(const std::vector<PoolForecast>& forecasts);

// "kube-a now, kube-b in 127s (1 of 2 GPU free), slurm never (not answering)".
std::string DescribeForecasts(const std::vector<PoolForecast>& forecasts, int64_t now);

}  // namespace tessera::quota
