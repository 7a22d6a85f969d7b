// The engine's core: open and reload from the store, the scheduling cycle and the translation of
// its decisions into job records, commits that fall back to a reload, invariants.
#include "api/engine.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "api/json_text.h"
#include "common/log.h"
#include "common/text.h"
#include "model/quantity.h"

namespace tessera::api {
namespace {

int64_t IdNumber(const std::string& id) {
  if (id.size() < 3 || id.rfind("j-", 0) != 0) return 0;
  auto v = ParseNonNegativeInt(id.substr(2));
  return v.ok() ? *v : 0;
}

void WriteGrants(JsonText& w, const std::vector<quota::GrantView>& grants) {
  w.BeginArray();
  for (const auto& g : grants) {
    w.BeginObject()
        .Key("node")
        .Str(g.node)
        .Key("device")
        .Int(g.device)
        .Key("slot")
        .Str(g.slot)
        .Key("compute")
        .Int(g.compute)
        .Key("memory")
        .Int(g.memory)
        .Key("cpu")
        .Int(g.cpu)
        .Key("host_memory")
        .Int(g.host_memory)
        .EndObject();
  }
  w.EndArray();
}

quota::GrantView GrantFrom(const Json& j) {
  quota::GrantView g;
  g.node = j.value("node", "");
  g.device = j.value("device", -1);
  g.slot = j.value("slot", "");
  g.compute = j.value("compute", int64_t{0});
  g.memory = j.value("memory", int64_t{0});
  g.cpu = j.value("cpu", int64_t{0});
  g.host_memory = j.value("host_memory", int64_t{0});
  return g;
}

}  // namespace

Engine::Engine(EngineConfig config, std::unique_ptr<store::Store> store, std::string data_dir,
               Clock clock)
    : config_(std::move(config)),
      store_(std::move(store)),
      data_dir_(std::move(data_dir)),
      clock_(std::move(clock)) {
  writer_ = std::thread([this] { WriterLoop(); });
}

Engine::~Engine() {
  if (broken_.ok()) (void)SaveFairShare(true);  // a clean stop loses no fair-share history
  {
    std::lock_guard<std::mutex> w(wmu_);
    stop_writer_ = true;
  }
  work_cv_.notify_all();
  writer_.join();
}

Result<std::unique_ptr<Engine>> Engine::Open(EngineConfig config,
                                             std::unique_ptr<store::Store> store,
                                             std::string data_dir, Clock clock) {
  std::error_code ec;
  std::filesystem::create_directories(data_dir + "/output", ec);
  if (ec)
    return Status::FailedPrecondition("cannot create '" + data_dir + "/output': " + ec.message());
  std::unique_ptr<Engine> e(
      new Engine(std::move(config), std::move(store), std::move(data_dir), std::move(clock)));
  for (const QueueRoute& q : e->config_.routes) {
    if (!q.external() || e->backends_.count(q.backend)) continue;
    backends::BackendOptions options;
    options.command_nice = e->config_.backend_nice;
    options.cluster = e->config_.cluster;
    options.kubeconfig = e->config_.kubernetes.kubeconfig;
    options.kube_context = e->config_.kubernetes.context;
    options.kube_in_cluster = e->config_.kubernetes.in_cluster;
    options.kube_namespace = e->config_.kubernetes.ns;
    auto b = backends::BuiltinRegistry().Make(q.backend, options);
    if (!b.ok()) return b.status();
    e->backends_[q.backend] = std::move(*b);
    e->lanes_[q.backend] = std::make_unique<BackendLane>();
  }
  std::lock_guard<std::mutex> lock(e->mu_);
  Status st = e->Load();
  if (!st.ok()) return st;
  return e;
}

const std::vector<std::string>& Engine::LiveIdsLocked() {
  // Pruned when about half of it has ended, so that a walk costs what the live jobs do, amortized;
  // walkers still skip what ended since.
  if (ended_since_prune_ > 64 && 2 * ended_since_prune_ > live_.size()) {
    live_.erase(std::remove_if(live_.begin(), live_.end(),
                               [&](const std::string& id) { return Ended(jobs_[id]); }),
                live_.end());
    ended_since_prune_ = 0;
  }
  return live_;
}

bool Engine::TransitionLocked(Job& j, JobState to, JobCause cause) {
  if (Status st = CheckJobTransition(j.state, to, cause); !st.ok()) {
    // A broken invariant of the control plane, not an outside failure: the job keeps its state
    // (its record and the cycle's view stay as they were) and the line says which change it was.
    static const log::Logger kLog("engine");
    kLog.Error("refused a job state change", {{"job", j.rec.id},
                                              {"from", JobStateName(j.state)},
                                              {"to", JobStateName(to)},
                                              {"cause", JobCauseName(cause)},
                                              {"error", st.message()}});
    return false;
  }
  j.state = to;
  j.rec.update_ms = clock_();
  return true;
}

std::vector<std::string> Engine::NodesOf(const Job& j) const {
  std::vector<std::string> out;
  for (const auto& g : j.grants) {
    if (std::find(out.begin(), out.end(), g.node) == out.end()) out.push_back(g.node);
  }
  return out;
}

store::Event Engine::MakeEvent(const std::string& actor, const std::string& kind,
                               const std::string& subject, const std::string& reason,
                               Json data) const {
  JsonText text;
  text.Raw(data.dump(-1, ' ', false, Json::error_handler_t::replace));
  return MakeEvent(actor, kind, subject, reason, std::move(text));
}

store::Event Engine::MakeEvent(const std::string& actor, const std::string& kind,
                               const std::string& subject, const std::string& reason,
                               JsonText data) const {
  store::Event ev;
  ev.time_ms = clock_();
  // What is stored is valid UTF-8 whatever reached us (an event once made every page of the
  // log that held it fail to render).
  ev.actor = ToValidUtf8(actor);
  ev.kind = ToValidUtf8(kind);
  ev.subject = ToValidUtf8(subject);
  ev.reason = ToValidUtf8(reason);
  ev.data = data.Take();
  return ev;
}

store::JobRecord Engine::RecordOf(const Job& j) const {
  store::JobRecord r = j.rec;
  r.state = JobStateName(j.state);
  r.spec = j.stored ? "" : j.spec_text.empty() ? j.spec.dump() : j.spec_text;  // "": unchanged
  JsonText p;
  p.BeginObject().Key("preemptions").Int(j.preemptions);
  if (!j.node.empty()) {  // held, or where it ran once ended
    p.Key("node")
        .Str(j.node)
        .Key("form")
        .Str(j.form)
        .Key("borrowed")
        .Bool(j.borrowed)
        .Key("grants");
    WriteGrants(p, j.grants);
    p.Key("parts_done").BeginArray();
    for (const std::string& n : j.parts_done) p.Str(n);
    p.EndArray();
  }
  if (!j.backend.empty()) {  // also while pending again (a suspended Kubernetes Job keeps its id)
    p.Key("backend")
        .Str(j.backend)
        .Key("external_id")
        .Str(j.external_id)
        .Key("external_node")
        .Str(j.external_node)
        .Key("gres")
        .Str(j.gres)
        .Key("attempts")
        .Int(j.submit_attempts);
  }
  r.placement = p.EndObject().Take();
  return r;
}

Status Engine::ReloadLocked(const Status& cause) {
  view_version_.fetch_add(1);
  // Memory ran ahead of a commit that failed: drop it and rebuild from what is durable. Batches
  // queued from now on rest on the reloaded state (a new epoch). Counts of written batches stay;
  // those of the dropped ones go with their decisions.
  SettleCountsLocked();
  uncounted_.clear();
  ++epoch_;
  Status st = Load();
  broken_ = st;
  if (st.ok()) {
    for (const std::string& id : LiveIdsLocked()) {
      Job& j = jobs_[id];
      if (j.state == JobState::kPending) {
        j.rec.reason = "Queued: the last scheduling decision could not be recorded (" +
                       cause.message() + "); the next cycle decides again";
      }
    }
  }
  if (!st.ok()) {
    return Status::Internal("a commit failed (" + cause.message() +
                            ") and the reload failed too: " + st.message());
  }
  return cause;
}

Status Engine::NewQuotaEngine() {
  quota::EngineOptions o;
  o.await_stop = true;  // a preempted job's slot returns when its processes are gone
  auto qe = quota::QuotaEngine::Create(config_.policy, {}, o);
  if (!qe.ok()) return Status::InvalidArgument("config: " + qe.status().message());
  qe_ = std::move(*qe);
  return Status::Ok();
}

quota::NodeSpec Engine::SpecOf(const NodeInfo& n) {
  quota::NodeSpec spec;
  spec.name = n.name;
  spec.pool = n.pool;
  spec.cpu_milli = n.cpu_milli;
  spec.memory_mib = n.memory_mib;
  spec.swap_mib = n.swap_mib;
  spec.gpu_count = static_cast<int>(n.devices.size());
  if (!n.devices.empty()) {  // one model per node (registration refuses mixed ones)
    spec.gpu_model = n.devices[0].model;
    spec.gpu_memory_mib = n.devices[0].memory_mib;
  }
  return spec;
}

Status Engine::LoadNodes() {
  auto stored = store_->ListSettings("node/");
  if (!stored.ok()) return stored.status();
  for (const auto& [key, value] : *stored) {
    Json j = Json::parse(value, nullptr, false);
    if (j.is_discarded()) return Status::Internal("stored inventory '" + key + "' is corrupt");
    NodeInfo node;
    node.name = j.value("node", "");
    node.pool = j.value("pool", "default");
    node.cpu_milli = j.value("cpu_milli", int64_t{0});
    node.memory_mib = j.value("memory_mib", int64_t{0});
    node.swap_mib = j.value("swap_mib", int64_t{0});
    node.simulated = j.value("simulated", false);
    for (const auto& d : j.value("devices", Json::array())) {
      node.devices.push_back({d.value("index", 0), d.value("model", ""),
                              d.value("memory_mib", int64_t{0}), d.value("uuid", ""),
                              d.value("simulated", false)});
    }
    node.last_heartbeat_ms = clock_();
    auto added = qe_->AddNode(SpecOf(node), NowS());
    if (!added.ok()) {
      return Status::Internal("stored node '" + node.name +
                              "' cannot be scheduled: " + added.status().message());
    }
    nodes_[node.name] = node;
  }
  return Status::Ok();
}

Status Engine::LoadDrains() {
  drains_.clear();
  Json last;
  store::EventFilter f;
  f.kind_prefix = "device.drains";
  for (int64_t cursor = 0;;) {
    auto page = store_->ListEvents(cursor, 1000, f);
    if (!page.ok()) return page.status();
    if (page->empty()) break;
    cursor = page->back().seq;
    last = Json::parse(page->back().data, nullptr, false);
  }
  if (!last.is_object()) return Status::Ok();
  for (const auto& x : last.value("drains", Json::array())) {
    quota::QuotaEngine::Drain d;
    d.node = x.value("node", "");
    d.device = x.value("device", 0);
    d.job = x.value("job", "");
    d.evict = x.value("evict", std::vector<std::string>{});
    d.add = x.value("add", std::vector<std::string>{});
    d.enable_mig = x.value("enable_mig", false);
    d.amd_pair = x.value("amd_pair", "");
    d.node_wide = x.value("node_wide", false);
    d.why = x.value("why", "");
    Status st = qe_->RestoreDrain(d, NowS());
    if (!st.ok()) return Status::Internal("stored drain cannot be resumed: " + st.message());
  }
  drains_ = qe_->Drains();
  return Status::Ok();
}

quota::JobSpec Engine::QuotaSpecOf(const Job& j) const {
  const Json& s = j.spec;
  quota::JobSpec q;
  q.id = j.rec.id;
  q.identity = j.rec.identity;
  q.group = j.rec.group;
  q.queue = j.rec.queue;
  if (s.contains("class")) {
    auto c = quota::ParseWorkloadClass(s.value("class", "batch"));
    if (c.ok()) q.cls = *c;
  }
  if (s.contains("form") && s["form"].is_string() && !s["form"].get<std::string>().empty()) {
    auto f = quota::ParseAllocationForm(s["form"].get<std::string>());
    if (f.ok()) q.form = *f;
  }
  if (s.contains("gpus")) q.gpu_count = s["gpus"].get<int>();
  if (s.contains("gpu_milli")) q.gpu_milli = s["gpu_milli"].get<int64_t>();
  if (s.contains("gpu_memory_mib")) q.gpu_memory_mib = s["gpu_memory_mib"].get<int64_t>();
  if (s.contains("cpu_milli")) q.cpu_milli = s["cpu_milli"].get<int64_t>();
  if (s.contains("memory_mib")) q.memory_mib = s["memory_mib"].get<int64_t>();
  q.walltime_s = s.value("walltime_s", int64_t{0});
  return q;
}

Result<Engine::Job> Engine::JobFromRecord(store::JobRecord r) const {
  Job j;
  j.spec = Json::parse(r.spec, nullptr, false);
  if (j.spec.is_discarded())
    return Status::Internal("stored spec of job '" + r.id + "' is corrupt");
  j.spec_text = r.spec;
  j.stored = true;
  Json p = r.placement.empty() ? Json::object() : Json::parse(r.placement, nullptr, false);
  if (p.is_discarded())
    return Status::Internal("stored placement of job '" + r.id + "' is corrupt");
  j.preemptions = p.value("preemptions", 0);
  j.cancel_requested = r.reason == "cancel requested";
  auto state = ParseJobState(r.state);
  if (!state.ok())
    return Status::Internal("stored state of job '" + r.id + "': " + state.status().message());
  j.state = *state;
  j.rec = std::move(r);
  j.rec.state.clear();  // `state` is the job's state in memory
  if (p.contains("node")) {
    j.node = p.value("node", "");
    j.form = p.value("form", "");
    j.borrowed = p.value("borrowed", false);
    for (const auto& g : p.value("grants", Json::array())) j.grants.push_back(GrantFrom(g));
    for (const auto& n : p.value("parts_done", Json::array()))
      j.parts_done.insert(n.get<std::string>());
  }
  j.backend = p.value("backend", "");
  j.external_id = p.value("external_id", "");
  j.external_node = p.value("external_node", "");
  j.gres = p.value("gres", "");
  j.submit_attempts = p.value("attempts", 0);
  // Placed but with no id recorded: a submission may have happened just before a crash.
  j.lookup_first = !j.backend.empty() && j.external_id.empty();
  return j;
}

Status Engine::LoadJob(store::JobRecord r) {
  auto parsed = JobFromRecord(std::move(r));
  if (!parsed.ok()) return parsed.status();
  Job j = std::move(*parsed);
  const std::string id = j.rec.id;
  next_job_ = std::max(next_job_, IdNumber(id) + 1);
  order_.push_back(id);
  if (!j.rec.idempotency_key.empty()) idem_[j.rec.idempotency_key] = id;
  if (Ended(j)) {  // not loaded from the store (LoadLiveJobs), but a caller may pass one
    ended_.push_back(id);
    jobs_[id] = std::move(j);
    return Status::Ok();
  }
  quota::JobSpec qs = QuotaSpecOf(j);
  qs.restoring = true;
  auto h = qe_->Submit(qs, j.rec.submit_ms / 1000);
  if (!h.ok()) {
    // The policy changed under it (its queue is gone, say): it ends, with the reason, written
    // (with its job.failed event) by the first tick, so that the store agrees and usage closes.
    if (TransitionLocked(j, JobState::kFailed, JobCause::kRefused)) {
      j.rec.reason = "no longer schedulable after a restart: " + h.status().message();
      failed_on_load_.push_back(id);
    }
    jobs_[id] = std::move(j);
    return Status::Ok();
  }
  j.handle = *h;
  if (Holds(j)) {
    auto form = quota::ParseAllocationForm(j.form.empty() ? "whole" : j.form);
    Status st = qe_->Restore(j.handle, form.ok() ? *form : AllocationForm::kWhole, j.grants,
                             j.borrowed, j.state == JobState::kPreempting, NowS());
    if (!st.ok()) {
      // A broken invariant: two held jobs claim the same capacity. Stop loudly.
      return Status::Internal("job '" + id + "' cannot be re-reserved: " + st.message());
    }
  }
  live_.push_back(id);
  j.counted_live = true;
  ++live_by_identity_[j.rec.identity];
  Job& stored = jobs_[id] = std::move(j);
  Index(stored);
  if (Holds(stored)) NoteNodesLocked(stored);
  return Status::Ok();
}

void Engine::NoteNodesLocked(const Job& j) {
  if (!j.backend.empty()) return;
  for (const std::string& node : NodesOf(j)) {
    std::vector<std::string>& ids = node_jobs_[node];
    if (std::find(ids.begin(), ids.end(), j.rec.id) == ids.end()) ids.push_back(j.rec.id);
  }
}

const std::vector<std::string>& Engine::NodeJobsLocked(const std::string& node) {
  std::vector<std::string>& ids = node_jobs_[node];
  ids.erase(std::remove_if(ids.begin(), ids.end(),
                           [&](const std::string& id) {
                             const Job& j = jobs_[id];
                             const auto nodes = NodesOf(j);
                             return !Holds(j) || !j.backend.empty() ||
                                    std::find(nodes.begin(), nodes.end(), node) == nodes.end();
                           }),
            ids.end());
  return ids;
}

Status Engine::Load() {
  capacity_.clear();  // a new quota engine knows no external capacity: ask the backends again
  for (auto& [name, lane] : lanes_) {
    lane->last_capacity_ms = -1;
    lane->reconciled = false;
  }
  jobs_.clear();
  idem_.clear();
  order_.clear();
  live_.clear();
  live_by_identity_.clear();
  node_jobs_.clear();
  by_handle_.clear();
  ended_since_prune_ = 0;
  ended_.clear();
  failed_on_load_.clear();
  nodes_.clear();
  Status st = NewQuotaEngine();
  if (!st.ok()) return st;
  st = LoadFairShare();
  if (!st.ok()) return st;
  st = LoadNodes();
  if (!st.ok()) return st;
  // Only what has not ended: ended jobs are read from the store when asked for (views), so
  // memory and start-up follow the live jobs, not the history.
  auto top = store_->MaxJobNumber();
  if (!top.ok()) return top.status();
  next_job_ = *top + 1;
  auto recs = store_->LoadLiveJobs();
  if (!recs.ok()) return recs.status();
  for (store::JobRecord& r : *recs) {
    st = LoadJob(std::move(r));
    if (!st.ok()) return st;
  }
  st = LoadDrains();
  if (!st.ok()) return st;
  // Nodes are back on probation: each gets a fresh heartbeat window (set in LoadNodes).
  cycle_wanted_ = true;
  broken_ = Status::Ok();
  return qe_->CheckInvariants();
}

void Engine::FillGrantsLocked(Job& j) {
  std::optional<AllocationForm> form;
  qe_->HeldOf(j.handle, &j.grants, &form, &j.borrowed);
  j.form = form ? AllocationFormName(*form) : "";
  j.parts_done.clear();
  const QueueRoute* route = config_.FindRoute(j.rec.queue);
  if (route != nullptr && route->external()) {
    j.backend = route->backend;
    j.node = route->backend + ":" + (route->partition.empty() ? route->queue : route->partition);
    j.next_submit_ms = 0;
  } else {
    j.node = j.grants.empty() ? "" : j.grants.front().node;
  }
}

bool Engine::EndLocked(Job& j, JobState state, JobCause cause, const std::string& reason) {
  if (!TransitionLocked(j, state, cause)) return false;
  ++ended_since_prune_;
  ended_.push_back(j.rec.id);
  if (j.handle >= 0) {
    qe_->Cancel(j.handle, NowS(),
                JobStateName(state) + (reason.empty() ? std::string() : ": " + reason));
  }
  j.rec.reason = reason;
  return true;
}

void Engine::TranslateLocked(size_t from, Batch& b) {
  const auto& evs = qe_->events();
  std::string admission;  // the admission of the placement that follows it
  for (size_t i = from; i < evs.size(); ++i) {
    const quota::Event& e = evs[i];
    if (e.kind == quota::EventKind::kRepartitioned) {
      CountEventLocked(e, nullptr);
      b.Add(MakeEvent("engine", "device.repartitioned", e.detail.substr(0, e.detail.find(':')),
                      e.detail),
            nullptr);
      continue;
    }
    auto it = jobs_.find(e.job);
    if (it == jobs_.end()) continue;
    Job& j = it->second;
    switch (e.kind) {
      case quota::EventKind::kAdmitted:
        admission = e.detail;  // recorded with the placement: one event per decision
        break;
      case quota::EventKind::kPlaced: {
        if (!TransitionLocked(j, JobState::kPlaced, JobCause::kPlaced)) break;
        FillGrantsLocked(j);
        NoteNodesLocked(j);
        j.rec.reason = j.backend.empty() ? "" : "admitted; to be submitted to " + j.backend;
        JsonText data;
        data.BeginObject().Key("node").Str(j.node).Key("form").Str(j.form).Key("grants");
        WriteGrants(data, j.grants);
        data.Key("borrowed").Bool(j.borrowed).Key("admission").Str(admission).EndObject();
        CountEventLocked(e, &j);
        b.Add(MakeEvent("engine", "job.placed", j.rec.id, e.detail, std::move(data)), &j);
        break;
      }
      case quota::EventKind::kPreempted:
        if (!TransitionLocked(j, JobState::kPreempting, JobCause::kPreempted)) break;
        CountEventLocked(e, &j);
        j.rec.reason = "preempted: " + e.detail;
        b.Add(MakeEvent("engine", "job.preempted", j.rec.id, e.detail, {{"group", e.group}}), &j);
        break;
      case quota::EventKind::kRequeued:
        if (!TransitionLocked(j, JobState::kPending, JobCause::kRequeued)) break;
        j.rec.reason = e.detail;
        j.preemptions = qe_->job(j.handle).preemptions;
        b.Touch(NodesOf(j));  // its nodes' orders change: it may no longer run there
        j.grants.clear();
        j.node.clear();
        j.form.clear();
        j.parts_done.clear();
        j.pid = 0;
        j.last_active_ms = 0;
        j.idle = false;
        j.gpu_memory_used_mib = -1;
        j.swap_state.clear();
        j.swapped_mib = 0;
        b.Add(MakeEvent("engine", "job.requeued", j.rec.id, e.detail,
                        {{"preemptions", j.preemptions}}),
              &j);
        break;
      default:
        break;  // submitted, rejected, completed: the server records those itself
    }
  }
  qe_->ClearEvents();  // recorded (or the server's own): marks start again from 0
}

void Engine::RefreshWaitReasonsLocked() {
  std::string step, reason;
  for (int h : qe_->waiting()) {  // what the cycle left waiting, and what arrived since
    if (h < 0 || h >= static_cast<int>(by_handle_.size()) || by_handle_[h] == nullptr) continue;
    Job& j = *by_handle_[h];
    if (j.state != JobState::kPending) continue;
    qe_->WaitOf(j.handle, &step, &reason);
    if (step.empty()) continue;
    // Only rebuilt when it changed: most waiting jobs keep theirs from cycle to cycle.
    const std::string& cur = j.rec.reason;
    if (cur.size() == step.size() + 2 + reason.size() && cur.compare(0, step.size(), step) == 0 &&
        cur.compare(step.size() + 2, std::string::npos, reason) == 0) {
      continue;
    }
    j.rec.reason = step + ": " + reason;
  }
}

void Engine::CycleLocked(Batch& b) {
  // A large cycle's decisions are queued for the writer in chunks while it goes on (after
  // whatever `b` held before it), so that writing them overlaps deciding the rest; nobody acts
  // on them before the caller's commit, which waits for all of them.
  constexpr size_t kChunk = 4096;
  const auto started = std::chrono::steady_clock::now();  // for tessera_scheduling_cycle_seconds
  cycled_submissions_ = submissions_;
  size_t mark = qe_->events().size();
  const quota::CycleStats stats = qe_->RunCycle(NowS(), [&] {
    if (qe_->events().size() - mark < kChunk) return;
    TranslateLocked(mark, b);
    mark = qe_->events().size();
    QueueLocked(b);
  });
  TranslateLocked(mark, b);
  RefreshWaitReasonsLocked();
  const int64_t took_us = std::chrono::duration_cast<std::chrono::microseconds>(
                              std::chrono::steady_clock::now() - started)
                              .count();
  cycle_latency_.Observe(took_us);
  submit_cycles_.Ran(CycleBudget::NowUs(), took_us, stats.pending_at_start - stats.admitted);
  last_cycle_ms_ = clock_();
  cycle_wanted_ = false;
}

Status Engine::RunCycle() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!broken_.ok()) return broken_;
  Batch b;
  CycleLocked(b);
  return CommitLocked(b, lock);
}

Status Engine::Tick() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    CatchUpLocked();  // a failed write nobody waited for
    if (!broken_.ok()) {
      Status st = ReloadLocked(broken_);  // try again to come back
      if (!broken_.ok()) return st;
    }
    Batch b;
    for (const std::string& id : failed_on_load_) {
      auto it = jobs_.find(id);
      if (it == jobs_.end()) continue;
      ended_.push_back(id);
      ++ended_since_prune_;
      b.Add(MakeEvent("engine", "job.failed", id, it->second.rec.reason), &it->second);
    }
    failed_on_load_.clear();
    Status st = MarkLostLocked(b);
    if (st.ok() && (cycle_wanted_ || clock_() - last_cycle_ms_ >= config_.cycle_ms)) {
      CycleLocked(b);
    }
    if (st.ok()) st = CommitLocked(b, lock);
    if (!st.ok()) return st;
  }
  if (Status st = HistoryTick(); !st.ok()) return st;
  if (Status st = RetentionTick(); !st.ok()) return st;
  return SaveFairShare(false);
}

// Fair-share history survives restarts: saved every minute (and when asked), outside the
// engine's mutex, as {"as_of": s, "groups": {name: [gpu, gpu_memory, cpu, memory]}}.
Status Engine::SaveFairShare(bool now) {
  Json saved;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!now && clock_() - last_fair_share_save_ms_ < kFairShareSaveMs) return Status::Ok();
    last_fair_share_save_ms_ = clock_();
    int64_t as_of = 0;
    Json groups = Json::object();
    for (const auto& h : qe_->FairShare(&as_of))
      groups[h.group] = {h.decayed[0], h.decayed[1], h.decayed[2], h.decayed[3]};
    if (as_of < 0) return Status::Ok();  // no cycle yet: nothing to say
    saved = {{"as_of", as_of}, {"groups", groups}};
  }
  return store_->PutSetting(kFairShareKey, saved.dump());
}

Status Engine::LoadFairShare() {
  auto text = store_->GetSetting(kFairShareKey);
  if (!text.ok()) return text.status();
  if (!text->has_value()) return Status::Ok();
  const Json j = Json::parse(**text, nullptr, false);
  if (!j.is_object() || !j.contains("as_of") || !j["as_of"].is_number_integer() ||
      !j.contains("groups") || !j["groups"].is_object()) {
    return Status::Ok();  // unreadable history: start afresh rather than refuse to start
  }
  std::vector<quota::QuotaEngine::FairShareHistory> history;
  for (const auto& [name, v] : j["groups"].items()) {
    quota::QuotaEngine::FairShareHistory h;
    h.group = name;
    for (size_t r = 0; r < 4 && v.is_array() && r < v.size(); ++r)
      h.decayed[r] = v[r].is_number() ? v[r].get<double>() : 0.0;
    history.push_back(h);
  }
  qe_->RestoreFairShare(history, j["as_of"].get<int64_t>(), NowS());
  return Status::Ok();
}

Status Engine::RetentionTick() {
  // Hourly, outside the engine's mutex: the store deletes what ended before the cut (a job in
  // memory is live or ended recently, so nothing memory holds is older than a day of it).
  const int64_t now = clock_();
  const bool audit = config_.auth_failed_retention_ms > 0;
  if ((config_.retention_ms <= 0 && !audit) || now - last_prune_ms_ < kPruneEveryMs)
    return Status::Ok();
  last_prune_ms_ = now;
  if (audit) {
    auto gone = store_->PruneEventsOfKind("auth.failed", now - config_.auth_failed_retention_ms);
    if (!gone.ok()) return gone.status();
  }
  if (config_.retention_ms <= 0) return Status::Ok();
  auto rows = store_->Prune(now - config_.retention_ms);
  return rows.ok() ? Status::Ok() : rows.status();
}

Status Engine::CheckInvariants() {
  std::unique_lock<std::mutex> lock(mu_);
  Status st = qe_->CheckInvariants();
  if (!st.ok()) return st;
  // The records agree with the quota engine: what a job holds there is what its record says.
  for (const std::string& id : LiveIdsLocked()) {
    const Job& j = jobs_[id];
    if (j.handle < 0) continue;
    quota::JobView v = qe_->job(j.handle);
    const bool held =
        v.state == quota::JobState::kRunning || v.state == quota::JobState::kTerminating;
    if (held != Holds(j)) {
      return Status::Internal("job '" + id + "' is " + JobStateName(j.state) + " but " +
                              quota::JobStateName(v.state) + " in the scheduler");
    }
    if (!held) continue;
    if (v.grants.size() != j.grants.size())
      return Status::Internal("job '" + id + "' grants disagree");
    for (size_t k = 0; k < v.grants.size(); ++k) {
      const auto &a = v.grants[k], &g = j.grants[k];
      if (a.node != g.node || a.device != g.device || a.slot != g.slot || a.memory != g.memory) {
        return Status::Internal("job '" + id + "' grant " + std::to_string(k) +
                                " disagrees with the scheduler");
      }
    }
  }
  return Status::Ok();
}

}  // namespace tessera::api
