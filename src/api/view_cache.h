// ViewCache: the renderings of the views people and dashboards poll (jobs, groups, nodes,
// summary, health), kept with the version of memory they show. A rendering of the current
// version is served again without the engine's lock; while that lock is busy the last one is
// served at once with its age ("stale_ms") instead of waiting. The version is the ledger's
// (LedgerReads::MemoryVersion), bumped by every change to memory. Bounded: 512 renderings, then
// it starts over.
//
// Thread-safety: every method may be called from any thread; the cache's lock is never held
// while the caller takes another.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>

namespace tessera::api {

class ViewCache {
 public:
  // The rendering kept for `key` if it shows `version`.
  std::optional<nlohmann::json> Current(const std::string& key, int64_t version);
  // The last rendering kept for `key`, whatever it shows, with "stale_ms": its age at `now_ms`.
  std::optional<nlohmann::json> Last(const std::string& key, int64_t now_ms);
  void Keep(const std::string& key, int64_t version, int64_t at_ms, nlohmann::json view);

 private:
  struct Kept {
    int64_t version = -1;
    int64_t at_ms = 0;
    nlohmann::json view;
  };
  static constexpr size_t kMaxKept = 512;  // one per identity and view
  std::mutex mu_;
  std::unordered_map<std::string, Kept> kept_;
};

// At most `per_second` events admitted in any one second; the rest are counted and the count
// handed to the next one admitted (auth failures in the audit trail).
class PerSecondLimit {
 public:
  explicit PerSecondLimit(int per_second) : per_second_(per_second) {}
  // -1 when `second`'s allowance is used up (counted as suppressed); else how many were
  // suppressed since the last admitted one.
  int64_t Admit(int64_t second) {
    if (second != second_) {
      second_ = second;
      in_second_ = 0;
    }
    if (++in_second_ > per_second_) {
      ++suppressed_;
      return -1;
    }
    const int64_t n = suppressed_;
    suppressed_ = 0;
    return n;
  }

 private:
  const int per_second_;
  int64_t second_ = 0;
  int in_second_ = 0;
  int64_t suppressed_ = 0;
};

}  // namespace tessera::api
