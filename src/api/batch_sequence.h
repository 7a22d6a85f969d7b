// BatchSequence: numbers the batches the engine queues for the commit writer, and remembers per
// agent node the last batch about its jobs (what a heartbeat that changes nothing waits for) and
// the last one that may give it new orders (an order watch wakes once that one is durable; a
// node's own heartbeat is no news to it). A reload starts a new epoch: batches of an older one
// were dropped with the memory that made them. Not thread-safe: under the engine's mutex.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

namespace tessera::api {

class BatchSequence {
 public:
  int64_t Next() { return ++last_; }      // the next batch's number
  int64_t last() const { return last_; }  // the last batch queued (0: none)
  int64_t epoch() const { return epoch_; }
  // The first batch of this epoch: those before it were dropped or failed, and memory was rebuilt
  // without them.
  int64_t epoch_began() const { return epoch_began_; }
  void NewEpoch() {
    ++epoch_;
    epoch_began_ = last_ + 1;
  }
  // Batch `seq` is about `node`'s jobs; `news`: it may give the node new orders.
  void About(const std::string& node, int64_t seq, bool news) {
    about_[node] = seq;
    if (news) news_[node] = seq;
  }
  int64_t LastAbout(const std::string& node) const { return Of(about_, node); }  // 0: none
  int64_t LastNews(const std::string& node) const { return Of(news_, node); }    // 0: none

 private:
  static int64_t Of(const std::unordered_map<std::string, int64_t>& m, const std::string& node) {
    auto it = m.find(node);
    return it == m.end() ? 0 : it->second;
  }
  int64_t last_ = 0;
  int64_t epoch_ = 0;  // reloads so far
  int64_t epoch_began_ = 1;
  std::unordered_map<std::string, int64_t> about_, news_;
};

}  // namespace tessera::api
