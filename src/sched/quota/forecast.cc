#include "sched/quota/forecast.h"

#include <algorithm>

namespace tessera::quota {

int64_t PredictStart(int64_t capacity, int64_t now, std::vector<PoolHold> holds, int64_t need) {
  if (capacity < 0) return now;
  if (need > capacity) return kForecastNever;
  int64_t used = 0;
  for (const PoolHold& h : holds) used += h.gpu_milli;
  if (used + need <= capacity) return now;
  std::sort(holds.begin(), holds.end(),
            [](const PoolHold& a, const PoolHold& b) { return a.end < b.end; });
  for (const PoolHold& h : holds) {
    if (h.end >= kForecastNever) break;
    used -= h.gpu_milli;
    if (used + need <= capacity) return std::max(now, h.end);
  }
  return kForecastNever;
}

int ChooseEarliest(const std::vector<PoolForecast>& forecasts) {
  int best = -1;
  for (int i = 0; i < static_cast<int>(forecasts.size()); ++i) {
    if (forecasts[i].start >= kForecastNever) continue;
    if (best < 0 || forecasts[i].start < forecasts[best].start) best = i;
  }
  return best;
}

std::string DescribeForecasts(const std::vector<PoolForecast>& forecasts, int64_t now) {
  std::string out;
  for (const PoolForecast& f : forecasts) {
    if (!out.empty()) out += ", ";
    out += f.pool + (f.start >= kForecastNever ? " never"
                     : f.start <= now          ? " now"
                                               : " in " + std::to_string(f.start - now) + "s");
    if (!f.note.empty()) out += " (" + f.note + ")";
  }
  return out;
}

}  // namespace tessera::quota
