// Recovery: memory from what is durable (api/recovery.h).
#include "api/recovery.h"

#include <algorithm>
#include <utility>

#include "common/text.h"
#include "model/quantity.h"

namespace tessera::api {
namespace {

using Json = nlohmann::json;

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

Status RestoreDrains(store::Store& store, Memory& m, int64_t now_s) {
  Json last;
  store::EventFilter f;
  f.kind_prefix = "device.drains";
  for (int64_t cursor = 0;;) {
    auto page = store.ListEvents(cursor, 1000, f);
    if (!page.ok()) return page.status();
    if (page->empty()) break;
    cursor = page->back().seq;
    last = Json::parse(page->back().data, nullptr, false);
  }
  if (!last.is_object()) return Status::Ok();
  for (const auto& x : last.value("drains", Json::array())) {
    const auto d = x.get<quota::QuotaEngine::Drain>();  // api/records.h's mapping
    Status st = m.quota->RestoreDrain(d, now_s);
    if (!st.ok()) return Status::Internal("stored drain cannot be resumed: " + st.message());
  }
  m.drains = m.quota->Drains();
  return Status::Ok();
}

Status LoadJob(store::JobRecord r, Memory& m, int64_t now_ms) {
  const int64_t now_s = now_ms / 1000;
  auto parsed = JobFromRecord(std::move(r));
  if (!parsed.ok()) return parsed.status();
  Job j = std::move(*parsed);
  const std::string id = j.rec.id;
  m.jobs.SeeId(IdNumber(id));
  if (Ended(j)) {  // not loaded from the store (LoadLiveJobs), but a caller may pass one
    m.jobs.Insert(std::move(j));
    m.jobs.NoteEnded(id);
    return Status::Ok();
  }
  quota::JobSpec qs = QuotaSpecOf(j);
  qs.restoring = true;
  qs.holds = Holds(j);
  auto h = m.quota->Submit(qs, j.rec.submit_ms / 1000);
  if (!h.ok()) {
    // The policy changed under it (its queue is gone, say): it ends, with the reason, written
    // (with its job.failed event) by the first tick, so that the store agrees and usage closes.
    if (CheckJobTransition(j.state, JobState::kFailed, JobCause::kRefused).ok()) {
      j.state = JobState::kFailed;
      j.rec.update_ms = now_ms;
      j.rec.reason = "no longer schedulable after a restart: " + h.status().message();
      m.failed_on_load.push_back(id);
    }
    m.jobs.Insert(std::move(j));
    return Status::Ok();
  }
  j.handle = *h;
  auto& sw = j.agent.swap;
  if (!sw.held_on.empty()) {
    // Held swapped out: held again on its card, its processes paused there. Should that fail (its
    // node or queue changed), it is a plain pending job and its agent stops the paused processes.
    Status st = m.quota->RestoreHold(j.handle, sw.held_on, sw.held_device, sw.held_mib,
                                     sw.held_since_s, sw.held_start_s, sw.held_paused_s);
    if (!st.ok()) {
      j.rec.reason = "Requeued: its hold swapped out on " + sw.held_on +
                     " could not be kept over a restart (" + st.message() + ")";
      sw = {};
      j.start_ms = 0;  // it runs again from its start
    }
  }
  if (Holds(j)) {
    if (!j.ext.backend.empty())
      m.quota->SetExternalPool(j.handle, j.ext.backend);  // one of several
    auto form = quota::ParseAllocationForm(j.form.empty() ? "whole" : j.form);
    Status st = m.quota->Restore(j.handle, form.ok() ? *form : AllocationForm::kWhole, j.grants,
                                 j.borrowed, j.state == JobState::kPreempting, now_s);
    if (!st.ok()) {
      // A broken invariant: two held jobs claim the same capacity. Stop loudly.
      return Status::Internal("job '" + id + "' cannot be re-reserved: " + st.message());
    }
    // Restored, it runs from its recorded start, not from now: its runtime guards count from
    // that (a 10 s walltime ran 21 s over a restart).
    if (j.start_ms > 0) m.quota->SetStartTime(j.handle, (j.start_ms + 999) / 1000);
  }
  m.jobs.Enter(m.jobs.Insert(std::move(j)));
  return Status::Ok();
}

}  // namespace

Result<NodeInfo> NodeOfInventory(const std::string& key, const std::string& inventory) {
  Json j = Json::parse(inventory, nullptr, false);
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
    node.devices.back().isolation = d.value("isolation", "");
    node.devices.back().mps = d.value("mps", false);
  }
  return node;
}

Result<Memory> Recover(store::Store& store, const EngineConfig& config, int64_t now_ms,
                       int64_t heard_mono_ms,
                       const std::function<Status(quota::QuotaEngine&)>& restore_fair_share) {
  const int64_t now_s = now_ms / 1000;
  Memory m;
  quota::EngineOptions o;
  o.await_stop = true;  // a preempted job's slot returns when its processes are gone
  auto qe = quota::QuotaEngine::Create(config.policy, {}, o);
  if (!qe.ok()) return Status::InvalidArgument("config: " + qe.status().message());
  m.quota = std::move(*qe);
  if (Status st = restore_fair_share(*m.quota); !st.ok()) return st;
  // The nodes, with their cordons and drains, before the jobs held there.
  auto admin = store.ListSettings(NodeAdminTable::kSettingPrefix);
  if (!admin.ok()) return admin.status();
  if (Status st = m.admin.Load(*admin); !st.ok()) return st;
  auto inventories = store.ListSettings("node/");
  if (!inventories.ok()) return inventories.status();
  for (const auto& [key, value] : *inventories) {
    Result<NodeInfo> node = NodeOfInventory(key, value);
    if (!node.ok()) return node.status();
    // On probation: each node gets a fresh heartbeat window from the load.
    node->last_heartbeat_ms = now_ms;
    node->heard_mono_ms = heard_mono_ms;
    auto added = m.quota->AddNode(SpecOf(*node), now_s);
    if (!added.ok()) {
      return Status::Internal("stored node '" + node->name +
                              "' cannot be scheduled: " + added.status().message());
    }
    ApplyIsolation(*m.quota, *node);
    const std::string name = node->name;
    ApplySchedulable(*m.quota, m.nodes[name] = std::move(*node), m.admin);
  }
  // Only what has not ended: ended jobs are read from the store when asked for (views), so
  // memory and start-up follow the live jobs, not the history.
  auto top = store.MaxJobNumber();
  if (!top.ok()) return top.status();
  m.jobs.SeeId(*top);
  auto recs = store.LoadLiveJobs();
  if (!recs.ok()) return recs.status();
  for (store::JobRecord& r : *recs) {
    if (Status st = LoadJob(std::move(r), m, now_ms); !st.ok()) return st;
  }
  if (Status st = RestoreDrains(store, m, now_s); !st.ok()) return st;
  if (Status st = m.quota->CheckInvariants(); !st.ok()) return st;
  return m;
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
      j.agent.parts_done.insert(n.get<std::string>());
    j.agent.preempted_unstarted = p.value("unstarted", false);
  }
  if (p.contains("held") && j.state == JobState::kPending) {  // held swapped out on a card
    const Json& h = p["held"];
    auto& sw = j.agent.swap;
    sw.held_on = h.value("node", "");
    sw.held_device = h.value("device", -1);
    sw.held_mib = h.value("memory_mib", MiB{0});
    sw.held_since_s = h.value("since_s", int64_t{-1});
    sw.held_start_s = h.value("start_s", int64_t{-1});
    sw.held_paused_s = h.value("paused_s", int64_t{0});
    sw.order = "out";
  }
  j.ext.backend = p.value("backend", "");
  j.ext.dispatch = p.value("dispatch", Json());
  j.ext.id = p.value("external_id", "");
  j.ext.node = p.value("external_node", "");
  j.ext.gres = p.value("gres", "");
  j.ext.submit_attempts = p.value("attempts", 0);
  // Placed but with no id recorded: a submission may have happened just before a crash.
  j.ext.lookup_first = !j.ext.backend.empty() && j.ext.id.empty();
  return j;
}

}  // namespace tessera::api
