// OrderWatches: the agents' long polls for orders (GET /v1/agent/orders), one per node. A watch
// waits for a durable change that gives its node orders newer than the ones its agent knows
// (`after`); whoever learns of one (the commit writer, once a batch about the node is written)
// calls Fire, which wakes the watch once and forgets it. A newer watch for the same node answers
// the older with 0, as does UnwatchAll (the server stops).
//
// Thread-safety: every method may be called from any thread. Wake callbacks run under the
// watches' own lock and must not call back into it (nor take a lock held around Fire).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tessera::api {

class OrderWatches {
 public:
  using Wake = std::function<void(int64_t)>;
  // Registers a watch for `node` past `after` and returns its ticket; 0 when it was woken at once
  // because `news` (the last batch that gives the node orders) is newer than `after` and durable
  // by `durable()`, read after the watch is in place, so that a write landing meanwhile fires it.
  uint64_t Watch(const std::string& node, int64_t after, Wake wake, int64_t news,
                 const std::function<int64_t()>& durable);
  void Unwatch(const std::string& node, uint64_t ticket);  // no call
  void UnwatchAll();                                       // each answered with 0
  // Wakes the watches of the nodes given (node, batch) whose batch is newer than their `after`.
  void Fire(const std::vector<std::pair<std::string, int64_t>>& touched);
  // Whether any watch waits (read without the lock: a hint for what to collect).
  bool Any() const { return count_.load(std::memory_order_relaxed) > 0; }

 private:
  struct Entry {
    uint64_t ticket = 0;
    int64_t after = 0;
    Wake wake;
  };
  std::mutex mu_;
  std::unordered_map<std::string, Entry> watches_;
  uint64_t next_ticket_ = 0;
  std::atomic<int> count_{0};  // watches_.size()
};

}  // namespace tessera::api
