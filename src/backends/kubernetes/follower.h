// One kind of Kubernetes object (Jobs, pods, ResourceClaims, ResourceSlices), listed in chunks
// and then watched from the list's resourceVersion, kept in a cache by "ns/name" ("API concepts:
// Efficient detection of changes"); and the error text of a refused call. Used by the backend's
// watcher threads (kubernetes.cc).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "backends/kubernetes/client.h"
#include "backends/kubernetes/manifest.h"

namespace tessera::backends::kube {

// A Status body's message (or the body itself, cut).
std::string Message(const Response& r);
// "kubernetes: WHAT: HTTP N: message".
Status Failed(const std::string& what, const Response& r);

// One kind of object, listed then watched, kept in a cache by "ns/name".
class Follower {
 public:
  // Whether `a` is an older version of the object than `b`. resourceVersions are opaque to
  // clients ("API concepts: Resource versions"); where both are decimal (etcd revisions, as every
  // API server backed by etcd gives) they are compared, else `a` is taken as newer.
  static bool Older(const Json& a, const Json& b);

  // `query`: the selectors of every list and watch, e.g.
  // "labelSelector=tessera.io%2Fcluster%3Dlab".
  Follower(std::string path, std::string query)
      : path_(std::move(path)), query_(std::move(query)) {}

  // Lists everything (in chunks); the cache is replaced. Returns the list's resourceVersion.
  Result<std::string> Relist(Client& c);

  // What a watch's end asks for: watch again at once (the server ended the stream), after a
  // pause (no connection), or list again first (410 Expired, another error status).
  enum class Next { kWatch, kPauseThenWatch, kRelist };

  // Watches from the last resourceVersion until the stream ends.
  Next Watch(Client& c, const std::atomic<bool>& stop);

  template <typename F>
  auto Read(F f) const {
    std::lock_guard<std::mutex> l(mu_);
    return f(cache_);
  }
  bool synced() const {
    std::lock_guard<std::mutex> l(mu_);
    return synced_;
  }
  int64_t relists() const {
    std::lock_guard<std::mutex> l(mu_);
    return relists_;
  }
  // The HTTP status of the last list that failed with one (404: the server lacks the resource).
  int last_status() const {
    std::lock_guard<std::mutex> l(mu_);
    return last_status_;
  }
  void Put(const Json& obj) {  // our own write's answer, ahead of its watch event
    std::lock_guard<std::mutex> l(mu_);
    auto old = cache_.find(KeyOf(obj));
    if (old == cache_.end() || !Older(obj, old->second)) cache_[KeyOf(obj)] = obj;
  }

 private:
  const std::string path_, query_;
  mutable std::mutex mu_;
  std::map<std::string, Json> cache_;
  std::string rv_;
  bool synced_ = false;
  int last_status_ = 0;
  int64_t relists_ = 0, events_ = 0;
};

}  // namespace tessera::backends::kube
