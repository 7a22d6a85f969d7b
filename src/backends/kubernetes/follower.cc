#include "backends/kubernetes/follower.h"

namespace tessera::backends::kube {

std::string Message(const Response& r) {
  Json j = Json::parse(r.body, nullptr, false);
  if (j.is_object() && j.contains("message") && j["message"].is_string())
    return j["message"].get<std::string>();
  return r.body.substr(0, 200);
}

Status Failed(const std::string& what, const Response& r) {
  return Status::FailedPrecondition("kubernetes: " + what + ": HTTP " + std::to_string(r.status) +
                                    ": " + Message(r));
}

bool Follower::Older(const Json& a, const Json& b) {
  const std::string ra = RvOf(a), rb = RvOf(b);
  auto decimal = [](const std::string& v) {
    return !v.empty() && v.size() < 19 && v.find_first_not_of("0123456789") == std::string::npos;
  };
  if (!decimal(ra) || !decimal(rb)) return false;
  return std::stoll(ra) < std::stoll(rb);
}

Result<std::string> Follower::Relist(Client& c) {
  std::map<std::string, Json> all;
  std::string cont, rv;
  const int64_t began = relists();
  for (int restarts = 0;;) {
    std::string q = path_ + "?limit=500" + (query_.empty() ? "" : "&" + query_);
    if (!cont.empty()) q += "&continue=" + QueryEscape(cont);
    auto r = c.Call("GET", q);
    if (!r.ok()) return r.status();
    if (r->status == 410 && !cont.empty() &&
        ++restarts < 5) {  // the continue token expired: start over
      all.clear();
      cont.clear();
      continue;
    }
    if (r->status != 200) {
      std::lock_guard<std::mutex> l(mu_);
      last_status_ = r->status;
      return Failed("list " + path_, *r);
    }
    Json page = Json::parse(r->body, nullptr, false);
    if (!At(page, "items").is_array())
      return Status::FailedPrecondition("kubernetes: list " + path_ + ": not a list");
    for (Json& item : page["items"]) {
      std::string key = KeyOf(item);
      all[key] = std::move(item);
    }
    const Json& meta = At(page, "metadata");
    if (!StrAt(meta, "resourceVersion").empty()) rv = StrAt(meta, "resourceVersion");
    cont = StrAt(meta, "continue");
    if (cont.empty()) break;
  }
  std::lock_guard<std::mutex> l(mu_);
  // Two lists at once (the watcher's first and a caller's before it synced): the one that
  // ends last may have the older snapshot, while the cache has gone on from the newer one by
  // watch events. Replacing it would lose those events (the watch goes on from where it is), so
  // a list older than one that ended while it ran is dropped.
  if (relists_ != began && Older(Json{{"metadata", {{"resourceVersion", rv}}}},
                                 Json{{"metadata", {{"resourceVersion", rv_}}}})) {
    ++relists_;
    return rv_;
  }
  // A write of ours answered while this list ran is newer than what the list saw: kept.
  for (auto& [key, obj] : all) {
    auto old = cache_.find(key);
    if (old != cache_.end() && Older(obj, old->second)) obj = old->second;
  }
  cache_ = std::move(all);
  rv_ = rv;
  synced_ = true;
  ++relists_;
  return rv;
}

Follower::Next Follower::Watch(Client& c, const std::atomic<bool>& stop) {
  std::string rv;
  {
    std::lock_guard<std::mutex> l(mu_);
    rv = rv_;
  }
  const std::string q = path_ + "?watch=1&allowWatchBookmarks=true&timeoutSeconds=60" +
                        (query_.empty() ? "" : "&" + query_) +
                        "&resourceVersion=" + QueryEscape(rv);
  bool expired = false;
  auto status = c.Stream(q, 90, [&](const std::string& line) {
    Json ev = Json::parse(line, nullptr, false);
    if (!At(ev, "object").is_object()) return true;
    const std::string type = StrAt(ev, "type");
    Json& obj = ev["object"];
    std::lock_guard<std::mutex> l(mu_);
    if (type == "ERROR") {
      expired = true;  // 410 Expired (or another error): list again
      return false;
    }
    const std::string orv = RvOf(obj);
    if (!orv.empty()) rv_ = orv;
    if (type == "BOOKMARK") return !stop;
    const std::string key = KeyOf(obj);
    if (type == "DELETED") {
      cache_.erase(key);
    } else {
      auto old = cache_.find(key);
      if (old == cache_.end() || !Older(obj, old->second)) cache_[key] = std::move(obj);
    }
    ++events_;
    return !stop;
  });
  if (!status.ok()) return Next::kPauseThenWatch;  // e.g. the server is restarting
  if (expired || *status != 200) return Next::kRelist;
  return Next::kWatch;
}

}  // namespace tessera::backends::kube
