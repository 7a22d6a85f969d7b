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
//
// Dynamic Resource Allocation (a queue's devices: dra): the job's ResourceClaim is created after
// its suspended Job (owned by it) and before the admission patch, deleted with it on cancel; a
// third watcher follows the cluster's claims once a job with one is seen, and Poll/List report
// each claim's allocation as the job's gres. Capacity adds the GPU drivers' ResourceSlices
// (capacity.h).
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "backends/backend.h"
#include "backends/kubernetes/capacity.h"
#include "backends/kubernetes/client.h"
#include "backends/kubernetes/follower.h"
#include "backends/kubernetes/manifest.h"

namespace tessera::backends {
namespace {

using kube::Json;

std::string JobsPath(const std::string& ns) { return "/apis/batch/v1/namespaces/" + ns + "/jobs"; }
std::string ClaimsPath(const std::string& ns) {
  return "/apis/resource.k8s.io/v1/namespaces/" + ns + "/resourceclaims";
}

// "ns/name" -> {ns, name}.
std::pair<std::string, std::string> Split(const std::string& id) {
  const size_t slash = id.find('/');
  if (slash == std::string::npos) return {"default", id};
  return {id.substr(0, slash), id.substr(slash + 1)};
}

using kube::At;
using kube::Failed;
using kube::Follower;
using kube::KeyOf;
using kube::Message;
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

class KubernetesBackend : public Backend {
 public:
  explicit KubernetesBackend(BackendOptions o)
      : opt_(std::move(o)),
        selector_("labelSelector=" + kube::QueryEscape("tessera.io/cluster=" + opt_.cluster)),
        jobs_("/apis/batch/v1/jobs", selector_),
        pods_("/api/v1/pods", selector_),
        claims_("/apis/resource.k8s.io/v1/resourceclaims", selector_) {
    // The context's namespace is the queues' default (read now: rendering needs it first).
    if (opt_.kube.ns.empty()) {
      auto conn = Connect();
      if (conn.ok()) opt_.kube.ns = conn->ns;
    }
  }

  ~KubernetesBackend() override {
    {
      std::lock_guard<std::mutex> l(sleep_mu_);  // a follower about to sleep sees it
      stop_ = true;
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      for (auto* c : {calls_.get(), jobs_client_.get(), pods_client_.get(), claims_client_.get()}) {
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
    auto claim = kube::ClaimFor(job, opt_.cluster, *ns);
    if (!claim.ok()) return claim.status();
    if (claim->is_object()) {  // DRA: the claim and the Job, as one List (kubectl's form)
      return Json{{"apiVersion", "v1"}, {"kind", "List"}, {"items", Json::array({*claim, *m})}}
          .dump(2);
    }
    return m->dump(2);
  }

  Result<std::string> Submit(const JobRequest& job, const std::string& manifest) override {
    auto c = Calls();
    if (!c.ok()) return c.status();
    Json m = Json::parse(manifest, nullptr, false);
    if (!m.is_object())
      return Status::InvalidArgument("kubernetes: the rendered manifest is not JSON");
    Json claim;
    if (StrAt(m, "kind") == "List" && At(m, "items").is_array()) {  // DRA: a claim and the Job
      Json list = std::move(m);
      m = Json();
      for (Json& item : list["items"]) {
        if (StrAt(item, "kind") == "ResourceClaim") claim = std::move(item);
        if (StrAt(item, "kind") == "Job") m = std::move(item);
      }
      if (!m.is_object())
        return Status::InvalidArgument("kubernetes: the rendered manifest has no Job");
    }
    const std::string ns = StrAt(At(m, "metadata"), "namespace");
    const std::string name = StrAt(At(m, "metadata"), "name");
    const std::string id = ns + "/" + name;
    auto r = (*c)->Call("POST", JobsPath(ns), m.dump());
    if (!r.ok()) return r.status();
    std::string uid;
    if (r->status == 409) {  // AlreadyExists: ours (a retried submission) is adopted
      auto got = Get(id);
      if (!got.ok()) return got.status();
      if (StrAt(At(At(*got, "metadata"), "labels"), "tessera.io/job") != job.id) {
        return Status::FailedPrecondition("kubernetes: Job " + id +
                                          " exists and is not Tessera job " + job.id + "'s");
      }
      uid = StrAt(At(*got, "metadata"), "uid");
    } else if (r->status != 201 && r->status != 200) {
      return Failed("create Job " + id, *r);
    } else {
      Json created = Json::parse(r->body, nullptr, false);
      if (created.is_object()) jobs_.Put(created);
      uid = StrAt(At(created, "metadata"), "uid");
    }
    if (claim.is_object()) {
      Status st = CreateClaim(**c, std::move(claim), name, uid, job.id);
      if (!st.ok()) {
        (void)Cancel(id);
        return st;
      }
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
    {
      std::lock_guard<std::mutex> l(unseen_mu_);
      unseen_.erase(id);
    }
    if (Claimed(id)) {  // its claim too (a real server's garbage collector would, by owner)
      auto cr = (*c)->Call("DELETE", ClaimsPath(ns) + "/" + name);
      if (!cr.ok()) return cr.status();
      if (cr->status != 200 && cr->status != 202 && cr->status != 404)
        return Failed("delete ResourceClaim " + id, *cr);
    }
    return Status::Ok();
  }

  Status Forget(const std::string& id) override { return Cancel(id); }

  Result<std::map<std::string, ExternalJob>> Poll(const std::vector<std::string>& ids) override {
    Status st = EnsureSynced();
    if (!st.ok()) return st;
    std::map<std::string, std::vector<Json>> pods = PodsByJob();
    bool claimed = false;
    std::map<std::string, Json> unseen;  // ended Jobs whose pod the watch has not shown
    auto found = jobs_.Read([&](const std::map<std::string, Json>& jobs) {
      std::map<std::string, ExternalJob> out;
      for (const std::string& id : ids) {
        auto it = jobs.find(id);
        if (it == jobs.end()) continue;
        out[id] = Read(it->second, pods[id]);
        claimed = claimed || HasClaims(it->second);
        if (EndedUnseen(it->second, pods[id])) unseen[id] = it->second;
      }
      return out;
    });
    ReadUnseen(unseen, &found);
    if (claimed) ReadClaims(&found);
    return found;
  }

  // What the cluster lists now (nodes, others' pods, ResourceSlices and claims), read by
  // kube::ReadCapacity.
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
    // Dynamic Resource Allocation: the GPU drivers' ResourceSlices (a server without
    // resource.k8s.io/v1 answers 404: no DRA devices), and the claims that hold their devices.
    Follower slices("/apis/resource.k8s.io/v1/resourceslices", "");
    Follower claims("/apis/resource.k8s.io/v1/resourceclaims", "");
    auto listed = slices.Relist(**c);
    if (!listed.ok() && slices.last_status() != 404) return listed.status();
    if (!slices.Read(kube::GpuSliceNodes).empty()) {
      auto rv = claims.Relist(**c);
      if (!rv.ok()) return rv.status();
    }
    using Objects = std::map<std::string, Json>;
    return nodes.Read([&](const Objects& n) {
      return others.Read([&](const Objects& p) {
        return slices.Read([&](const Objects& s) {
          return claims.Read(
              [&](const Objects& cl) { return kube::ReadCapacity(n, p, s, cl, opt_.cluster); });
        });
      });
    });
  }

  Result<std::vector<ExternalJob>> List(const std::string& prefix) override {
    Status st = EnsureSynced();
    if (!st.ok()) return st;
    std::map<std::string, std::vector<Json>> pods = PodsByJob();
    bool claimed = false;
    std::map<std::string, Json> unseen;
    auto found = jobs_.Read([&](const std::map<std::string, Json>& jobs) {
      std::map<std::string, ExternalJob> out;
      for (const auto& [id, j] : jobs) {
        ExternalJob x = Read(j, pods[id]);
        if (x.name.rfind(prefix, 0) != 0) continue;
        claimed = claimed || HasClaims(j);
        if (EndedUnseen(j, pods[id])) unseen[id] = j;
        out[id] = std::move(x);
      }
      return out;
    });
    ReadUnseen(unseen, &found);
    if (claimed) ReadClaims(&found);
    std::vector<ExternalJob> out;
    for (auto& [id, x] : found) out.push_back(std::move(x));
    return out;
  }

 private:
  // Whether a Job's pods use ResourceClaims (the queue's devices: dra).
  static bool HasClaims(const Json& job) {
    const Json& rc = At(At(At(At(job, "spec"), "template"), "spec"), "resourceClaims");
    return rc.is_array() && !rc.empty();
  }
  bool Claimed(const std::string& id) const {
    return jobs_.Read([&](const std::map<std::string, Json>& jobs) {
      auto it = jobs.find(id);
      return it != jobs.end() && HasClaims(it->second);
    });
  }

  // The job's ResourceClaim (named as its Job), owned by the Job so that it goes with it; a claim
  // of that name already there is adopted when it is this job's (a retried submission).
  Status CreateClaim(kube::Client& c, Json claim, const std::string& job_name,
                     const std::string& job_uid, const std::string& tessera_id) {
    const std::string ns = StrAt(At(claim, "metadata"), "namespace");
    const std::string id = ns + "/" + StrAt(At(claim, "metadata"), "name");
    if (!job_uid.empty()) {
      claim["metadata"]["ownerReferences"] = Json::array({{{"apiVersion", "batch/v1"},
                                                           {"kind", "Job"},
                                                           {"name", job_name},
                                                           {"uid", job_uid},
                                                           {"controller", true},
                                                           {"blockOwnerDeletion", true}}});
    }
    auto r = c.Call("POST", ClaimsPath(ns), claim.dump());
    if (!r.ok()) return r.status();
    if (r->status == 404) {
      return Status::FailedPrecondition(
          "kubernetes: the cluster does not serve resource.k8s.io/v1 ResourceClaims (Dynamic "
          "Resource Allocation, Kubernetes 1.34+): HTTP 404: " +
          Message(*r) + "; set the queue's devices: extended");
    }
    if (r->status == 409) {
      auto got = c.Call("GET", ClaimsPath(ns) + "/" + StrAt(At(claim, "metadata"), "name"));
      if (!got.ok()) return got.status();
      Json j = Json::parse(got->body, nullptr, false);
      if (got->status != 200 ||
          StrAt(At(At(j, "metadata"), "labels"), "tessera.io/job") != tessera_id) {
        return Status::FailedPrecondition("kubernetes: ResourceClaim " + id +
                                          " exists and is not Tessera job " + tessera_id + "'s");
      }
      claims_.Put(j);
    } else if (r->status != 201 && r->status != 200) {
      return Failed("create ResourceClaim " + id, *r);
    } else {
      Json created = Json::parse(r->body, nullptr, false);
      if (created.is_object()) claims_.Put(created);
    }
    FollowClaims();
    return Status::Ok();
  }

  // Claims are followed (listed, then watched) once a job with one is seen.
  void FollowClaims() {
    std::lock_guard<std::mutex> l(mu_);
    if (claims_client_ || !calls_ || stop_) return;
    auto conn = Connect();
    if (!conn.ok()) return;
    auto c = kube::Client::Make(*conn);
    if (!c.ok()) return;
    claims_client_ = std::move(*c);
    threads_.emplace_back([this] { Follow(claims_, *claims_client_); });
  }

  // Each job's claim allocation ("driver/pool/device,...") into ExternalJob::gres; where no pod
  // says, the node the allocation pins. A pod can be seen Running before the claims' watch brings
  // its claim's allocation (the pod cannot run without it): a running job whose cached claim has
  // none has its claim read directly (GET), and what that read is kept in the cache (the watch's
  // late events are older and do not replace it).
  void ReadClaims(std::map<std::string, ExternalJob>* jobs) {
    FollowClaims();
    if (!claims_.synced()) {
      auto c = Calls();
      if (c.ok()) (void)claims_.Relist(**c);
    }
    std::vector<std::string> unallocated;  // running jobs whose cached claim has no allocation
    claims_.Read([&](const std::map<std::string, Json>& claims) {
      for (auto& [id, x] : *jobs) {
        auto it = claims.find(id);
        if (it != claims.end()) ApplyClaim(it->second, &x);
        if (x.state == "running" && x.gres.empty()) unallocated.push_back(id);
      }
      return 0;
    });
    for (const std::string& id : unallocated) {
      if (!Claimed(id)) continue;
      auto claim = GetClaim(id);
      if (!claim.ok()) continue;  // read from the cache this time; read again next time
      claims_.Put(*claim);
      ApplyClaim(*claim, &(*jobs)[id]);
    }
  }

  static void ApplyClaim(const Json& claim, ExternalJob* x) {
    x->gres = kube::AllocationOf(claim);
    const Json& terms =
        At(At(At(At(claim, "status"), "allocation"), "nodeSelector"), "nodeSelectorTerms");
    if (x->node.empty() && terms.is_array() && !terms.empty()) {
      const Json& fields = At(terms[0], "matchFields");
      if (fields.is_array() && !fields.empty() && At(fields[0], "values").is_array() &&
          !At(fields[0], "values").empty() && At(fields[0], "values")[0].is_string())
        x->node = At(fields[0], "values")[0].get<std::string>();
    }
  }

  // A job's ResourceClaim (named as its Job), read now from the server.
  Result<Json> GetClaim(const std::string& id) {
    auto [ns, name] = Split(id);
    return GetObject("ResourceClaim", ClaimsPath(ns) + "/" + name, id);
  }

  // Whether a Job has ended (Complete or Failed) while no pod of it in the cache has: a short Job
  // can end between two watch events (or two lists) of its pods, and the pods' watch may lag.
  static bool EndedUnseen(const Json& job, const std::vector<Json>& pods) {
    bool ended = false;
    const Json& conds = At(At(job, "status"), "conditions");
    if (conds.is_array()) {
      for (const Json& c : conds) {
        const std::string type = StrAt(c, "type");
        if ((type == "Complete" || type == "Failed") && StrAt(c, "status") == "True") ended = true;
      }
    }
    if (!ended) return false;
    for (const Json& p : pods) {
      const std::string phase = StrAt(At(p, "status"), "phase");
      if (phase == "Succeeded" || phase == "Failed") return false;
    }
    return true;
  }

  // The pods of ended Jobs the watch has not shown (EndedUnseen), listed by each Job's selector
  // (its controller-uid), Succeeded and Failed ones included: a finished Job's pods stay until the
  // Job is deleted or its TTL ends. Each Job (by uid) is listed once; what the list found is kept.
  // Where it found none, the pod went before it could be read, and the reason says so.
  void ReadUnseen(const std::map<std::string, Json>& unseen,
                  std::map<std::string, ExternalJob>* found) {
    for (const auto& [id, job] : unseen) {
      const std::string uid = StrAt(At(job, "metadata"), "uid");
      std::vector<Json> pods;
      bool known = false;
      {
        std::lock_guard<std::mutex> l(unseen_mu_);
        auto it = unseen_.find(id);
        if (it != unseen_.end() && it->second.first == uid) {
          pods = it->second.second;
          known = true;
        }
      }
      if (!known) {
        auto listed = ListPodsOf(id, job);
        if (!listed.ok()) continue;  // read from the cache this time; listed again next time
        pods = std::move(*listed);
        std::lock_guard<std::mutex> l(unseen_mu_);
        unseen_[id] = {uid, pods};
      }
      ExternalJob x = Read(job, pods);
      if (pods.empty()) {
        x.reason = (x.reason.empty() ? "" : x.reason + ": ") + "pod gone before it was read";
      }
      (*found)[id] = std::move(x);
    }
  }

  // A Job's pods, listed now by its selector (spec.selector.matchLabels; else its controller-uid).
  Result<std::vector<Json>> ListPodsOf(const std::string& id, const Json& job) {
    auto c = Calls();
    if (!c.ok()) return c.status();
    std::string sel;
    const Json& match = At(At(At(job, "spec"), "selector"), "matchLabels");
    if (match.is_object()) {
      for (const auto& [k, v] : match.items()) {
        if (v.is_string()) sel += (sel.empty() ? "" : ",") + k + "=" + v.get<std::string>();
      }
    }
    if (sel.empty()) {
      sel = "batch.kubernetes.io/controller-uid=" + StrAt(At(job, "metadata"), "uid");
    }
    const std::string ns = Split(id).first;
    auto r = (*c)->Call(
        "GET", "/api/v1/namespaces/" + ns + "/pods?labelSelector=" + kube::QueryEscape(sel));
    if (!r.ok()) return r.status();
    if (r->status != 200) return Failed("list the pods of Job " + id, *r);
    Json page = Json::parse(r->body, nullptr, false);
    if (!At(page, "items").is_array())
      return Status::FailedPrecondition("kubernetes: list the pods of Job " + id + ": not a list");
    std::vector<Json> pods;
    for (Json& p : page["items"]) {
      if (PodJob(p) == id) pods.push_back(std::move(p));
    }
    return pods;
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
    std::string ns = job.mapping.kube.ns.empty() ? opt_.kube.ns : job.mapping.kube.ns;
    if (ns.empty()) ns = "default";
    return ns;
  }

  Result<kube::Connection> Connect() const {
    if (opt_.kube.in_cluster) return kube::LoadInCluster();
    return kube::LoadKubeconfig(kube::KubeconfigFiles(opt_.kube.kubeconfig), opt_.kube.context);
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
    auto [ns, name] = Split(id);
    return GetObject("Job", JobsPath(ns) + "/" + name, id);
  }

  // The object at `path`, a `kind` named `id` (NAMESPACE/NAME) in errors, read now from the
  // server: NotFound when there is none.
  Result<Json> GetObject(const std::string& kind, const std::string& path, const std::string& id) {
    auto c = Calls();
    if (!c.ok()) return c.status();
    auto r = (*c)->Call("GET", path);
    if (!r.ok()) return r.status();
    if (r->status == 404) return Status::NotFound("kubernetes: no " + kind + " " + id);
    if (r->status != 200) return Failed("get " + kind + " " + id, *r);
    Json j = Json::parse(r->body, nullptr, false);
    if (!j.is_object())
      return Status::FailedPrecondition("kubernetes: get " + kind + " " + id + ": not JSON");
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
  Follower jobs_, pods_, claims_;
  std::mutex mu_;
  std::unique_ptr<kube::Client> calls_, jobs_client_, pods_client_, claims_client_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::mutex sleep_mu_;
  std::condition_variable wake_;
  int64_t conflicts_ = 0;
  std::mutex unseen_mu_;
  std::map<std::string, std::pair<std::string, std::vector<Json>>> unseen_;  // id -> {uid, pods}
};

}  // namespace

std::unique_ptr<Backend> MakeKubernetesBackend(const BackendOptions& options) {
  return std::make_unique<KubernetesBackend>(options);
}

}  // namespace tessera::backends
