// RequestSlots: how many requests each identity may have in the server at once. A user holding
// a valid token once sent 64 concurrent `GET /v1/jobs?limit=10000` and pushed /v1/health to
// 10.5 s: past its slots, an identity's request is answered 429 (with Retry-After) at once,
// before any work, and other identities and agents keep the server.
//
// Thread-safety: every member may be called from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace tessera::api {

class RequestSlots {
 public:
  explicit RequestSlots(int64_t per_identity) : per_identity_(per_identity) {}

  // Takes one of `identity`'s slots: false when all are taken (or none are configured).
  bool Acquire(const std::string& identity) {
    std::lock_guard<std::mutex> g(mu_);
    int64_t& n = used_[identity];
    if (n >= per_identity_) {
      if (n == 0) used_.erase(identity);
      return false;
    }
    ++n;
    return true;
  }
  void Release(const std::string& identity) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = used_.find(identity);
    if (it == used_.end()) return;
    if (--it->second <= 0) used_.erase(it);
  }
  int64_t InUse(const std::string& identity) const {
    std::lock_guard<std::mutex> g(mu_);
    auto it = used_.find(identity);
    return it == used_.end() ? 0 : it->second;
  }

  // A slot held for a scope.
  class Held {
   public:
    Held(RequestSlots* slots, std::string identity)
        : slots_(slots), identity_(std::move(identity)) {}
    ~Held() {
      if (slots_ != nullptr) slots_->Release(identity_);
    }
    Held(const Held&) = delete;
    Held& operator=(const Held&) = delete;

   private:
    RequestSlots* slots_;
    std::string identity_;
  };

 private:
  const int64_t per_identity_;
  mutable std::mutex mu_;
  std::map<std::string, int64_t> used_;
};

}  // namespace tessera::api
