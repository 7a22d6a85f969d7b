#include "api/silence_watch.h"

#include <algorithm>
#include <chrono>

namespace tessera::api {

SilenceWatch::SilenceWatch()
    : clock_([] {
        return static_cast<int64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
      }) {}

void SilenceWatch::SetClock(Clock monotonic) {
  clock_ = std::move(monotonic);
  last_pass_ = -1;
  window_from_ = 0;
}

int64_t SilenceWatch::Pass(int64_t now, int64_t stall_ms) {
  const int64_t gap = last_pass_ < 0 ? 0 : now - last_pass_;
  last_pass_ = now;
  if (gap <= stall_ms) return 0;
  window_from_ = now;
  return gap;
}

int64_t SilenceWatch::SilentFor(int64_t heard, int64_t now) const {
  return now - std::max(heard, window_from_);
}

}  // namespace tessera::api
