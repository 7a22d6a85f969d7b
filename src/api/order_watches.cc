#include "api/order_watches.h"

namespace tessera::api {

uint64_t OrderWatches::Watch(const std::string& node, int64_t after, Wake wake, int64_t news,
                             const std::function<int64_t()>& durable) {
  std::lock_guard<std::mutex> g(mu_);
  Entry& w = watches_[node];
  if (w.wake) {
    w.wake(0);  // replaced by a newer watch (the agent reconnected)
  } else {
    ++count_;
  }
  w = Entry{++next_ticket_, after, std::move(wake)};
  if (news > after && news <= durable()) {
    w.wake(news);
    watches_.erase(node);
    --count_;
    return 0;
  }
  return w.ticket;
}

void OrderWatches::Unwatch(const std::string& node, uint64_t ticket) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = watches_.find(node);
  if (it == watches_.end() || it->second.ticket != ticket) return;
  watches_.erase(it);
  --count_;
}

void OrderWatches::UnwatchAll() {
  std::lock_guard<std::mutex> g(mu_);
  for (auto& [node, w] : watches_) w.wake(0);
  watches_.clear();
  count_ = 0;
}

void OrderWatches::Fire(const std::vector<std::pair<std::string, int64_t>>& touched) {
  std::lock_guard<std::mutex> g(mu_);
  for (const auto& [node, seq] : touched) {
    auto it = watches_.find(node);
    if (it == watches_.end() || seq <= it->second.after) continue;
    it->second.wake(seq);
    watches_.erase(it);
    --count_;
  }
}

}  // namespace tessera::api
