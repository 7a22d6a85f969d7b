// The engine's memory from the store: on open and after a failed write (ReloadLocked), the
// quota engine made anew, nodes, drains in progress and jobs re-entered (held ones with their
// grants, pending ones in submit order).
#include <algorithm>

#include "api/engine.h"
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

quota::GrantView GrantFrom(const Json& j) {
  quota::GrantView g;
  g.node = j.value("node", "");
  g.device = j.value("device", -1);
  g.slot = j.value("slot", "");
  g.compute = j.value("compute", int64_t{0});
  g.memory = j.value("memory", int64_t{0});
  g.cpu = j.value("cpu", int64_t{0});
  g.host_memory = j.value("host_memory", int64_t{0});
  g.sm_percent = j.value("sm_percent", 0);
  return g;
}

}  // namespace

Status Engine::ReloadLocked(const Status& cause) {
  version_.fetch_add(1);
  // Memory ran ahead of a commit that failed: drop it and rebuild from what is durable. Batches
  // queued from now on rest on the reloaded state (a new epoch). Counts of written batches stay;
  // those of the dropped ones go with their decisions.
  SettleCountsLocked();
  counters_.DropUnsettled();
  seq_.NewEpoch();
  Status st = Load();
  broken_ = st;
  if (st.ok()) {
    for (const std::string& id : jobs_.LiveIds()) {
      Job& j = jobs_.Get(id);
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

quota::NodeSpec SpecOf(const NodeInfo& n) {
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
  if (Status st = LoadNodeAdminLocked(); !st.ok()) return st;  // cordons and drains
  auto stored = store_->ListSettings("node/");
  if (!stored.ok()) return stored.status();
  for (const auto& [key, value] : *stored) {
    if (Status st = agents_.RestoreNodeLocked(key, value); !st.ok()) return st;
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

quota::JobSpec QuotaSpecOf(const Job& j) {
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

Result<Job> JobFromRecord(store::JobRecord r) {
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
  j.start_ms = p.value("start_ms", int64_t{0});
  j.cancel_requested = r.reason == "cancel requested";
  auto state = ParseJobState(r.state);
  if (!state.ok())
    return Status::Internal("stored state of job '" + r.id + "': " + state.status().message());
  j.state = *state;
  j.rec = std::move(r);
  j.rec.state.clear();  // `state` is the job's state in memory
  // Stopped by its runtime guard before the restart: it still ends when its processes are gone.
  j.guard_stopped = j.state == JobState::kPreempting && j.rec.reason.rfind(kGuardStopping, 0) == 0;
  if (p.contains("node")) {
    j.node = p.value("node", "");
    j.form = p.value("form", "");
    j.borrowed = p.value("borrowed", false);
    for (const auto& g : p.value("grants", Json::array())) j.grants.push_back(GrantFrom(g));
    for (const auto& n : p.value("parts_done", Json::array()))
      j.parts_done.insert(n.get<std::string>());
  }
  j.backend = p.value("backend", "");
  j.dispatch = p.value("dispatch", Json());
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
  jobs_.SeeId(IdNumber(id));
  if (Ended(j)) {  // not loaded from the store (LoadLiveJobs), but a caller may pass one
    jobs_.Insert(std::move(j));
    jobs_.NoteEnded(id);
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
    jobs_.Insert(std::move(j));
    return Status::Ok();
  }
  j.handle = *h;
  if (Holds(j)) {
    if (!j.backend.empty()) qe_->SetExternalPool(j.handle, j.backend);  // one of several
    auto form = quota::ParseAllocationForm(j.form.empty() ? "whole" : j.form);
    Status st = qe_->Restore(j.handle, form.ok() ? *form : AllocationForm::kWhole, j.grants,
                             j.borrowed, j.state == JobState::kPreempting, NowS());
    if (!st.ok()) {
      // A broken invariant: two held jobs claim the same capacity. Stop loudly.
      return Status::Internal("job '" + id + "' cannot be re-reserved: " + st.message());
    }
  }
  jobs_.Enter(jobs_.Insert(std::move(j)));
  return Status::Ok();
}

Status Engine::Load() {
  backends_.ResetLocked();
  jobs_.Clear();
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
  jobs_.SeeId(*top);
  auto recs = store_->LoadLiveJobs();
  if (!recs.ok()) return recs.status();
  for (store::JobRecord& r : *recs) {
    st = LoadJob(std::move(r));
    if (!st.ok()) return st;
  }
  st = LoadDrains();
  if (!st.ok()) return st;
  // Nodes are back on probation: each gets a fresh heartbeat window (set in LoadNodes).
  cycle_.pacer().Want();
  broken_ = Status::Ok();
  return qe_->CheckInvariants();
}

}  // namespace tessera::api
