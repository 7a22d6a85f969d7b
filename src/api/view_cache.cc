#include "api/view_cache.h"

#include <algorithm>

namespace tessera::api {

std::optional<nlohmann::json> ViewCache::Current(const std::string& key, int64_t version) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = kept_.find(key);
  if (it == kept_.end() || it->second.version != version) return std::nullopt;
  return it->second.view;
}

std::optional<nlohmann::json> ViewCache::Last(const std::string& key, int64_t now_ms) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = kept_.find(key);
  if (it == kept_.end()) return std::nullopt;
  nlohmann::json stale = it->second.view;
  stale["stale_ms"] = std::max<int64_t>(0, now_ms - it->second.at_ms);
  return stale;
}

void ViewCache::Keep(const std::string& key, int64_t version, int64_t at_ms, nlohmann::json view) {
  std::lock_guard<std::mutex> g(mu_);
  if (kept_.size() >= kMaxKept && kept_.count(key) == 0) kept_.clear();
  kept_[key] = Kept{version, at_ms, std::move(view)};
}

}  // namespace tessera::api
