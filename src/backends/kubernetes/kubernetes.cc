// The Kubernetes backend, Kueue's way: Tessera keeps the queues and the quota ledger, Kubernetes
// places the pods. Each Tessera job is one batch/v1 Job created suspended; admission unsuspends
// it with one merge patch (carrying metadata.resourceVersion, so a concurrent writer makes it
// 409 and it is re-read and retried); reclaim and preemption suspend it again; cancel deletes it
// (propagationPolicy Background); an ended job's Job is deleted once its end is recorded.
//
// Following ("API concepts: Efficient detection of changes"): two watcher threads, one for Jobs
// and one for pods, each list (in chunks of 500, "Retrieving large results sets in chunks";
// an expired continue token restarts the list) and then watch from the list's resourceVersion
// with bookmarks. A 410 Expired ERROR event (it arrives inside a 200 stream) or a watch that
// cannot resume makes them list again; a dropped connection resumes from the last
// resourceVersion seen. Poll and List read their caches (a synchronous list before the first
// sync).
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "backends/backend.h"
#include "backends/kubernetes/client.h"
#include "backends/kubernetes/manifest.h"

namespace tessera::backends {
namespace {

using kube::Json;

std::string JobsPath(const std::string& ns) { return "/apis/batch/v1/namespaces/" + ns + "/jobs"; }

// "ns/name" -> {ns, name}.
std::pair<std::string, std::string> Split(const std::string& id) {
  const size_t slash = id.find('/');
  if (slash == std::string::npos) return {"default", id};
  return {id.substr(0, slash), id.substr(slash + 1)};
}

using kube::At;
using kube::KeyOf;
using kube::RvOf;
using kube::StrAt;

// The Job a pod belongs to ("ns/job"), from its controller reference or job-name label.
std::string PodJob(const Json& pod) {
  const Json& m = At(pod, "metadata");
  const Json& refs = At(m, "ownerReferences");
  if (refs.is_array()) {
    for (const Json& ref : refs) {
      if (StrAt(ref, "kind") == "Job") return StrAt(m, "namespace") + "/" + StrAt(ref, "name");
    }
  }
  const Json& labels = At(m, "labels");
  std::string job = StrAt(labels, "batch.kubernetes.io/job-name");
  return StrAt(m, "namespace") + "/" + (job.empty() ? StrAt(labels, "job-name") : job);
}

// A Status body's message (or the body itself, cut).
std::string Message(const kube::Response& r) {
  Json j = Json::parse(r.body, nullptr, false);
  if (j.is_object() && j.contains("message") && j["message"].is_string())
    return j["message"].get<std::string>();
  return r.body.substr(0, 200);
}

Status Failed(const std::string& what, const kube::Response& r) {
  return Status::FailedPrecondition("kubernetes: " + what + ": HTTP " + std::to_string(r.status) +
                                    ": " + Message(r));
}

// One kind of object, listed then watched, kept in a cache by "ns/name".
class Follower {
 public:
  // Whether `a` is an older version of the object than `b`. resourceVersions are opaque to
  // clients ("API concepts: Resource versions"); where both are decimal (etcd revisions, as every
  // API server backed by etcd gives) they are compared, else `a` is taken as newer.
  static bool Older(const Json& a, const Json& b) {
    const std::string ra = RvOf(a), rb = RvOf(b);
    auto decimal = [](const std::string& v) {
      return !v.empty() && v.size() < 19 && v.find_first_not_of("0123456789") == std::string::npos;
    };
    if (!decimal(ra) || !decimal(rb)) return false;
    return std::stoll(ra) < std::stoll(rb);
  }

  // `query`: the selectors of every list and watch, e.g.
  // "labelSelector=tessera.io%2Fcluster%3Dlab".
  Follower(std::string path, std::string query)
      : path_(std::move(path)), query_(std::move(query)) {}

  // Lists everything (in chunks); the cache is replaced. Returns the list's resourceVersion.
  Result<std::string> Relist(kube::Client& c) {
    std::map<std::string, Json> all;
    std::string cont, rv;
    for (int restarts = 0;;) {
      std::string q = path_ + "?limit=500" + (query_.empty() ? "" : "&" + query_);
      if (!cont.empty()) q += "&continue=" + kube::QueryEscape(cont);
      auto r = c.Call("GET", q);
      if (!r.ok()) return r.status();
      if (r->status == 410 && !cont.empty() &&
          ++restarts < 5) {  // the continue token expired: start over
        all.clear();
        cont.clear();
        continue;
      }
      if (r->status != 200) return Failed("list " + path_, *r);
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

  // What a watch's end asks for: watch again at once (the server ended the stream), after a
  // pause (no connection), or list again first (410 Expired, another error status).
  enum class Next { kWatch, kPauseThenWatch, kRelist };

  // Watches from the last resourceVersion until the stream ends.
  Next Watch(kube::Client& c, const std::atomic<bool>& stop) {
    std::string rv;
    {
      std::lock_guard<std::mutex> l(mu_);
      rv = rv_;
    }
    const std::string q = path_ + "?watch=1&allowWatchBookmarks=true&timeoutSeconds=60" +
                          (query_.empty() ? "" : "&" + query_) +
                          "&resourceVersion=" + kube::QueryEscape(rv);
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
  int64_t relists_ = 0, events_ = 0;
};

class KubernetesBackend : public Backend {
 public:
  explicit KubernetesBackend(BackendOptions o)
      : opt_(std::move(o)),
        selector_("labelSelector=" + kube::QueryEscape("tessera.io/cluster=" + opt_.cluster)),
        jobs_("/apis/batch/v1/jobs", selector_),
        pods_("/api/v1/pods", selector_) {
    // The context's namespace is the queues' default (read now: rendering needs it first).
    if (opt_.kube_namespace.empty()) {
      auto conn = Connect();
      if (conn.ok()) opt_.kube_namespace = conn->ns;
    }
  }

  ~KubernetesBackend() override {
    {
      std::lock_guard<std::mutex> l(sleep_mu_);  // a follower about to sleep sees it
      stop_ = true;
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      for (auto* c : {calls_.get(), jobs_client_.get(), pods_client_.get()}) {
        if (c) c->Stop();
      }
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }

  std::string Name() const override { return "kubernetes"; }
  bool Suspends() const override { return true; }

  Result<std::string> Render(const JobRequest& job) const override {
    auto ns = Namespace(job);
    if (!ns.ok()) return ns.status();
    for (const auto& [k, v] : job.env) {
      (void)v;
      if (k.empty()) return Status::InvalidArgument("an environment variable has no name");
    }
    auto m = kube::RenderJob(job, opt_.cluster, *ns);
    if (!m.ok()) return m.status();
    (*m)["metadata"]["annotations"]["tessera.io/name"] = job.name;
    return m->dump(2);
  }

  Result<std::string> Submit(const JobRequest& job, const std::string& manifest) override {
    auto c = Calls();
    if (!c.ok()) return c.status();
    Json m = Json::parse(manifest, nullptr, false);
    if (!m.is_object())
      return Status::InvalidArgument("kubernetes: the rendered manifest is not JSON");
    const std::string ns = StrAt(At(m, "metadata"), "namespace");
    const std::string name = StrAt(At(m, "metadata"), "name");
    const std::string id = ns + "/" + name;
    auto r = (*c)->Call("POST", JobsPath(ns), manifest);
    if (!r.ok()) return r.status();
    if (r->status == 409) {  // AlreadyExists: ours (a retried submission) is adopted
      auto got = Get(id);
      if (!got.ok()) return got.status();
      if (StrAt(At(At(*got, "metadata"), "labels"), "tessera.io/job") != job.id) {
        return Status::FailedPrecondition("kubernetes: Job " + id +
                                          " exists and is not Tessera job " + job.id + "'s");
      }
    } else if (r->status != 201 && r->status != 200) {
      return Failed("create Job " + id, *r);
    } else {
      Json created = Json::parse(r->body, nullptr, false);
      if (created.is_object()) jobs_.Put(created);
    }
    Status st = Resume(id, job);  // admitted: unsuspend it with the pool's directives
    if (!st.ok()) {
      (void)Cancel(id);  // not left behind suspended: the retry creates it again (or adopts it)
      return st;
    }
    return id;
  }

  Status Resume(const std::string& id, const JobRequest& job) override {
    auto ns = Namespace(job);
    auto m = kube::RenderJob(job, opt_.cluster,
                             *ns);  // the directives as the Job has them, with the pool's
    if (!m.ok()) return m.status();
    Json sched = Json::object();
    const Json& spec = At(At(At(*m, "spec"), "template"), "spec");
    for (const char* key : {"nodeSelector", "tolerations"}) {
      if (!At(spec, key).is_null()) sched[key] = At(spec, key);
    }
    return PatchWithVersion(
        id, Json{{"spec", {{"suspend", false}, {"template", {{"spec", sched}}}}}}, "resume");
  }

  Status Suspend(const std::string& id) override {
    return PatchWithVersion(id, Json{{"spec", {{"suspend", true}}}}, "suspend");
  }

  Status Cancel(const std::string& id) override {
    auto c = Calls();
    if (!c.ok()) return c.status();
    auto [ns, name] = Split(id);
    auto r = (*c)->Call(
        "DELETE", JobsPath(ns) + "/" + name + "?propagationPolicy=Background",
        R"({"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Background"})");
    if (!r.ok()) return r.status();
    if (r->status != 200 && r->status != 202 && r->status != 404)
      return Failed("delete Job " + id, *r);
    return Status::Ok();
  }

  Status Forget(const std::string& id) override { return Cancel(id); }

  Result<std::map<std::string, ExternalJob>> Poll(const std::vector<std::string>& ids) override {
    Status st = EnsureSynced();
    if (!st.ok()) return st;
    std::map<std::string, std::vector<Json>> pods = PodsByJob();
    return jobs_.Read([&](const std::map<std::string, Json>& jobs) {
      std::map<std::string, ExternalJob> out;
      for (const std::string& id : ids) {
        auto it = jobs.find(id);
        if (it != jobs.end()) out[id] = Read(it->second, pods[id]);
      }
      return out;
    });
  }

  // Whole cards (nvidia.com/gpu, amd.com/gpu) allocatable on ready, schedulable nodes, less what
  // running or pending pods of others request there ("Managing Resources for Containers":
  // extended resources are integers; limits stand for requests when requests are absent).
  Result<Capacity> GpuCapacity() override {
    auto c = Calls();
    if (!c.ok()) return c.status();
    Follower nodes("/api/v1/nodes", "");
    Follower others(
        "/api/v1/pods",
        "fieldSelector=" + kube::QueryEscape("status.phase!=Succeeded,status.phase!=Failed"));
    for (Follower* f : {&nodes, &others}) {
      auto rv = f->Relist(**c);
      if (!rv.ok()) return rv.status();
    }
    static const char* kWhole[] = {"nvidia.com/gpu", "amd.com/gpu"};
    std::map<std::string, int64_t> free;    // ready node -> cards
    std::map<std::string, int64_t> models;  // nvidia.com/gpu.product -> cards
    int64_t total = 0, foreign = 0;
    nodes.Read([&](const std::map<std::string, Json>& all) {
      for (const auto& [key, n] : all) {
        (void)key;
        if (At(At(n, "spec"), "unschedulable") == true) continue;
        bool ready = true;
        const Json& conds = At(At(n, "status"), "conditions");
        if (conds.is_array()) {
          for (const Json& cd : conds) {
            if (StrAt(cd, "type") == "Ready") ready = StrAt(cd, "status") == "True";
          }
        }
        if (!ready) continue;
        int64_t cards = 0;
        for (const char* r : kWhole) cards += Count(At(At(n, "status"), "allocatable"), r);
        free[StrAt(At(n, "metadata"), "name")] = cards;
        total += cards;
        // GPU feature discovery's labels, for people: which models the capacity is made of.
        const Json& labels = At(At(n, "metadata"), "labels");
        std::string product = StrAt(labels, "nvidia.com/gpu.product");
        if (product.empty()) product = StrAt(labels, "amd.com/gpu.product-name");
        if (cards > 0) models[product.empty() ? "unlabelled" : product] += cards;
      }
      return 0;
    });
    others.Read([&](const std::map<std::string, Json>& all) {
      for (const auto& [key, p] : all) {
        (void)key;
        if (StrAt(At(At(p, "metadata"), "labels"), "tessera.io/cluster") == opt_.cluster)
          continue;  // ours: in the ledger
        auto node = free.find(StrAt(At(p, "spec"), "nodeName"));
        if (node == free.end()) continue;
        const Json& containers = At(At(p, "spec"), "containers");
        if (!containers.is_array()) continue;
        for (const Json& ct : containers) {
          const Json& res = At(ct, "resources");
          for (const char* r : kWhole) {
            int64_t n = Count(At(res, "requests"), r);
            if (n == 0) n = Count(At(res, "limits"), r);
            n = std::min(n, node->second);
            node->second -= n;
            foreign += n;
          }
        }
      }
      return 0;
    });
    Capacity cap;
    cap.gpu_milli = (total - foreign) * 1000;
    cap.detail = std::to_string(total - foreign) + " of " + std::to_string(total) + " GPUs on " +
                 std::to_string(free.size()) + " ready nodes (" + std::to_string(foreign) +
                 " held by pods Tessera does not manage)";
    std::string list;
    for (const auto& [m, n] : models)
      list += (list.empty() ? "" : ", ") + std::to_string(n) + "x " + m;
    if (!list.empty()) cap.detail += "; " + list;
    return cap;
  }

  Result<std::vector<ExternalJob>> List(const std::string& prefix) override {
    Status st = EnsureSynced();
    if (!st.ok()) return st;
    std::map<std::string, std::vector<Json>> pods = PodsByJob();
    return jobs_.Read([&](const std::map<std::string, Json>& jobs) {
      std::vector<ExternalJob> out;
      for (const auto& [id, j] : jobs) {
        ExternalJob x = Read(j, pods[id]);
        if (x.name.rfind(prefix, 0) == 0) out.push_back(std::move(x));
      }
      return out;
    });
  }

 private:
  // An extended resource's integer count in a resource map ("8"; anything else counts 0).
  static int64_t Count(const Json& resources, const char* name) {
    const Json& v = At(resources, name);
    if (v.is_number_integer()) return std::max<int64_t>(0, v.get<int64_t>());
    const std::string s = v.is_string() ? v.get<std::string>() : "";
    if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos)
      return 0;
    return std::stoll(s);
  }

  ExternalJob Read(const Json& job, const std::vector<Json>& pods) const {
    std::vector<const Json*> ptrs;
    for (const Json& p : pods) ptrs.push_back(&p);
    ExternalJob x = kube::ReadJob(job, ptrs);
    const std::string name = StrAt(At(At(job, "metadata"), "annotations"), "tessera.io/name");
    if (!name.empty()) x.name = name;
    return x;
  }

  std::map<std::string, std::vector<Json>> PodsByJob() const {
    return pods_.Read([](const std::map<std::string, Json>& pods) {
      std::map<std::string, std::vector<Json>> out;
      for (const auto& [k, p] : pods) {
        (void)k;
        out[PodJob(p)].push_back(p);
      }
      return out;
    });
  }

  Result<std::string> Namespace(const JobRequest& job) const {
    std::string ns = job.mapping.kube.ns.empty() ? opt_.kube_namespace : job.mapping.kube.ns;
    if (ns.empty()) ns = "default";
    return ns;
  }

  Result<kube::Connection> Connect() const {
    if (opt_.kube_in_cluster) return kube::LoadInCluster();
    return kube::LoadKubeconfig(kube::KubeconfigFiles(opt_.kubeconfig), opt_.kube_context);
  }

  // The client for calls, made on first use; the watchers start with it.
  Result<kube::Client*> Calls() {
    std::lock_guard<std::mutex> l(mu_);
    if (calls_) return calls_.get();
    auto conn = Connect();
    if (!conn.ok()) return conn.status();
    auto c = kube::Client::Make(*conn);
    if (!c.ok()) return c.status();
    auto jc = kube::Client::Make(*conn);
    auto pc = kube::Client::Make(*conn);
    if (!jc.ok() || !pc.ok()) return Status::Internal("kubernetes: cannot make the watch clients");
    calls_ = std::move(*c);
    jobs_client_ = std::move(*jc);
    pods_client_ = std::move(*pc);
    threads_.emplace_back([this] { Follow(jobs_, *jobs_client_); });
    threads_.emplace_back([this] { Follow(pods_, *pods_client_); });
    return calls_.get();
  }

  void Follow(Follower& f, kube::Client& c) {
    int64_t pause = 200;
    int relists_in_row = 0;
    while (!stop_) {
      if (!f.Relist(c).ok()) {
        Sleep(pause);
        pause = std::min<int64_t>(pause * 2, 10000);
        continue;
      }
      pause = 200;
      bool watched = false;  // a stream worked since the last list
      for (int failures = 0; !stop_;) {
        const auto began = std::chrono::steady_clock::now();
        const Follower::Next next = f.Watch(c, stop_);
        if (next == Follower::Next::kRelist) break;
        watched = watched || next == Follower::Next::kWatch;
        const bool brief =
            std::chrono::steady_clock::now() - began < std::chrono::milliseconds(200);
        if (next == Follower::Next::kPauseThenWatch ||
            brief) {  // no connection, or a stream that ends at once
          Sleep(std::min<int64_t>(int64_t{200} << std::min(failures++, 5), 5000));
        } else {
          failures = 0;
        }
      }
      // A 410 or an error status: list again, not in a tight loop; repeated ones back off.
      relists_in_row = watched ? 0 : relists_in_row + 1;
      if (!stop_) Sleep(std::min<int64_t>(int64_t{100} << std::min(relists_in_row, 6), 5000));
    }
  }

  void Sleep(int64_t ms) {
    std::unique_lock<std::mutex> l(sleep_mu_);
    wake_.wait_for(l, std::chrono::milliseconds(ms), [&] { return stop_.load(); });
  }

  Status EnsureSynced() {
    auto c = Calls();
    if (!c.ok()) return c.status();
    if (jobs_.synced() && pods_.synced()) return Status::Ok();
    // Before the watchers' first list: list here (the same caches).
    for (Follower* f : {&jobs_, &pods_}) {
      if (f->synced()) continue;
      auto rv = f->Relist(**c);
      if (!rv.ok()) return rv.status();
    }
    return Status::Ok();
  }

  Result<Json> Get(const std::string& id) {
    auto c = Calls();
    if (!c.ok()) return c.status();
    auto [ns, name] = Split(id);
    auto r = (*c)->Call("GET", JobsPath(ns) + "/" + name);
    if (!r.ok()) return r.status();
    if (r->status == 404) return Status::NotFound("kubernetes: no Job " + id);
    if (r->status != 200) return Failed("get Job " + id, *r);
    Json j = Json::parse(r->body, nullptr, false);
    if (!j.is_object())
      return Status::FailedPrecondition("kubernetes: get Job " + id + ": not JSON");
    return j;
  }

  // A merge patch carrying the Job's current resourceVersion; a 409 (someone wrote first) is
  // re-read and retried.
  Status PatchWithVersion(const std::string& id, Json patch, const std::string& what) {
    auto c = Calls();
    if (!c.ok()) return c.status();
    auto [ns, name] = Split(id);
    for (int attempt = 1;; ++attempt) {
      auto cur = Get(id);
      if (!cur.ok()) return cur.status();
      patch["metadata"]["resourceVersion"] = RvOf(*cur);
      auto r = (*c)->Call("PATCH", JobsPath(ns) + "/" + name, patch.dump(),
                          "application/merge-patch+json");
      if (!r.ok()) return r.status();
      if (r->status == 200) {
        Json j = Json::parse(r->body, nullptr, false);
        if (j.is_object()) jobs_.Put(j);
        return Status::Ok();
      }
      if (r->status != 409 || attempt >= 8) return Failed(what + " Job " + id, *r);
      ++conflicts_;
    }
  }

  BackendOptions opt_;
  const std::string selector_;
  Follower jobs_, pods_;
  std::mutex mu_;
  std::unique_ptr<kube::Client> calls_, jobs_client_, pods_client_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::mutex sleep_mu_;
  std::condition_variable wake_;
  int64_t conflicts_ = 0;
};

}  // namespace

std::unique_ptr<Backend> MakeKubernetesBackend(const BackendOptions& options) {
  return std::make_unique<KubernetesBackend>(options);
}

}  // namespace tessera::backends
