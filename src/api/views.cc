// Read models for people (api/views.h): jobs (with the step and reason that hold a waiting one),
// queues, groups, nodes with their devices and partition layouts, the summary, events and health.
#include "api/views.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <unordered_set>

#include "model/isolation.h"
#include "model/quantity.h"

namespace tessera::api {
namespace {

Json ResJson(const Resources& r) {
  auto cap = [](int64_t v) { return v >= quota::kUnlimited ? Json(nullptr) : Json(v); };
  return Json{{"gpu_milli", cap(r.gpu_milli)},
              {"gpu_memory_mib", cap(r.gpu_memory_mib)},
              {"cpu_milli", cap(r.cpu_milli)},
              {"memory_mib", cap(r.memory_mib)}};
}

int64_t IdOrder(const std::string& id) {
  if (id.size() < 3 || id.compare(0, 2, "j-") != 0) return 0;
  auto v = ParseNonNegativeInt(id.substr(2));
  return v.ok() ? *v : 0;
}

Json GroupsNow(const Identity& who, const ReadModel& m) {
  Json out = Json::array();
  for (const quota::GroupView& g : m.quota.groups()) {
    if (who.role != Role::kAdmin &&
        std::find(who.groups.begin(), who.groups.end(), g.name) == who.groups.end())
      continue;
    const quota::GroupSpec* spec = m.config.FindGroup(g.name);
    out.push_back({{"name", g.name},
                   {"parent", spec->parent},
                   {"reservation", ResJson(g.reservation)},
                   {"limit", ResJson(g.limit)},
                   {"weight_milli", spec->weight_milli},
                   {"usage", ResJson(g.usage)},
                   {"fair_share", g.fair_share}});
    // Quota per GPU model (issue 37) and per pool: what it holds in each, reserves and may hold
    // there (a pool's name is its view's `model`).
    const auto quota_rows = [&](const char* list, const char* name,
                                const std::vector<quota::ModelQuotaView>& views) {
      for (const quota::ModelQuotaView& mq : views) {
        out.back()[list].push_back(
            {{name, mq.model},
             {"gpu_milli_usage", mq.usage},
             {"gpu_milli_reservation", mq.reservation},
             {"gpu_milli_limit", mq.limit >= quota::kUnlimited ? Json(nullptr) : Json(mq.limit)}});
      }
    };
    quota_rows("models", "model", g.models);
    quota_rows("pools", "pool", g.pools);
  }
  return Json{{"groups", out}};
}

Json NodesNow(const Identity& who, const ReadModel& m) {
  struct Holder {
    const Job* job;
    quota::GrantView grant;
  };
  std::map<std::pair<std::string, int>, std::vector<Holder>> held;  // (node, device)
  m.jobs.ForEachLive([&](const Job& j) {
    if (!Holds(j)) return;
    for (const auto& g : j.grants) held[{g.node, g.device}].push_back({&j, g});
  });
  auto holds_on = [&](const std::string& node) {  // anything held on the node, CPU-only too
    for (auto it = held.lower_bound({node, -1}); it != held.end() && it->first.first == node; ++it)
      if (!it->second.empty()) return true;
    return false;
  };
  Json out = Json::array();
  for (const auto& [name, n] : m.nodes) {
    Json devs = Json::array();
    for (const auto& d : n.devices) {
      Json holders = Json::array();
      MilliGpu used = 0;
      MiB mem_used = 0;
      for (const Holder& h : held[{name, d.index}]) {
        used += h.grant.compute;
        mem_used += h.grant.memory;
        Json hj = {{"form", h.job->form},
                   {"gpu_milli", h.grant.compute},
                   {"gpu_memory_mib", h.grant.memory}};
        if (!h.grant.slot.empty()) hj["partition"] = h.grant.slot;
        hj["idle"] = h.job->agent.activity.idle;
        if (CanSee(who, *h.job)) {  // whose, to those who may see the job alone
          hj["job"] = h.job->rec.id;
          hj["identity"] = h.job->rec.identity;
          hj["group"] = h.job->rec.group;
        }
        holders.push_back(hj);
      }
      quota::DeviceView v = m.quota.device(name, d.index);
      Json slots = Json::array();
      for (const auto& s : v.slots) {
        const Job* holder = s.holder.empty() ? nullptr : m.jobs.Find(s.holder);
        slots.push_back({{"name", s.name},
                         {"profile", s.profile},
                         {"start", s.start},
                         {"job", holder != nullptr && CanSee(who, *holder) ? s.holder : ""}});
      }
      std::string layout = v.mig ? "MIG" : v.amd_pair;
      // Why it drains names the job it drains for: to those who may see that job alone.
      const Job* drains_for = v.plan_for.empty() ? nullptr : m.jobs.Find(v.plan_for);
      if (!v.plan_for.empty() && (drains_for == nullptr || !CanSee(who, *drains_for)))
        v.plan = "for another group's job";
      devs.push_back({{"index", d.index},
                      {"model", d.model},
                      {"memory_mib", d.memory_mib},
                      {"uuid", d.uuid},
                      {"simulated", d.simulated},
                      {"gpu_milli_used", used},
                      {"gpu_memory_mib_used", mem_used},
                      {"holders", holders},
                      {"mig", v.mig},
                      {"amd_mode", v.amd_pair},
                      {"partitions", slots},
                      {"draining", v.draining},
                      {"drain_reason", v.plan},
                      {"admin_state", m.admin.StateName(name, d.index, !holders.empty())}});
      if (d.telemetry_ms > 0) {
        Json& t = devs.back()["telemetry"];
        t = {{"time_ms", d.telemetry_ms}};
        if (d.util_pct >= 0) t["util_pct"] = d.util_pct;
        if (d.memory_used_mib >= 0) t["memory_used_mib"] = d.memory_used_mib;
      }
      devs.back()["health"] = d.healthy ? "ok" : "unhealthy";
      if (!d.isolation.empty()) devs.back()["isolation"] = d.isolation;
      if (d.mps) devs.back()["mps"] = true;
      if (!d.healthy) devs.back()["health_reason"] = d.health_reason;
    }
    MilliCpu cpu_used = 0;
    MiB memory_used = 0;
    for (auto it = held.lower_bound({name, -1}); it != held.end() && it->first.first == name; ++it)
      for (const Holder& h : it->second) {
        cpu_used += h.grant.cpu;
        memory_used += h.grant.host_memory;
      }
    out.push_back({{"name", name},
                   {"pool", n.pool},
                   {"cpu_milli", n.cpu_milli},
                   {"memory_mib", n.memory_mib},
                   {"cpu_milli_used", cpu_used},
                   {"memory_mib_used", memory_used},
                   {"simulated", n.simulated},
                   {"state", n.lost ? "lost" : "ready"},
                   {"admin_state", m.admin.StateName(name, -1, holds_on(name))},
                   {"last_heartbeat_ms", n.last_heartbeat_ms},
                   {"devices", devs}});
  }
  return Json{{"nodes", out}};
}

Json SummaryNow(const Identity& who, const ReadModel& m) {
  std::vector<const Job*> live;
  m.jobs.ForEachLive([&](const Job& j) { live.push_back(&j); });
  Json groups = Json::array();
  for (const auto& g : m.config.policy.groups) {
    if (who.role != Role::kAdmin &&
        std::find(who.groups.begin(), who.groups.end(), g.name) == who.groups.end())
      continue;
    Resources held;
    int64_t gpus_idle = 0, held_idle = 0, workers = 0, pending = 0;
    for (const Job* jp : live) {
      const Job& j = *jp;
      if (j.rec.group != g.name) continue;
      if (j.state == JobState::kPending) ++pending;
      if (!Holds(j)) continue;
      const MilliGpu gpu = GpuHeld(j.grants);
      held.gpu_milli += gpu;
      for (const auto& x : j.grants) {
        held.cpu_milli += x.cpu;
        held.memory_mib += x.host_memory;
      }
      if (j.state == JobState::kRunning) {
        ++workers;
        if (j.agent.activity.idle) held_idle += gpu;  // held but idle (telemetry)
      } else {
        gpus_idle += gpu;  // held but not yet (or no longer) running
      }
    }
    auto cap = [](int64_t v) { return v >= quota::kUnlimited ? Json(nullptr) : Json(v); };
    groups.push_back({{"group", g.name},
                      {"gpu_milli_total", held.gpu_milli},
                      {"gpu_milli_idle", gpus_idle},
                      {"gpu_milli_held_idle", held_idle},
                      {"cpu_milli_total", held.cpu_milli},
                      {"memory_mib_total", held.memory_mib},
                      {"workers", workers},
                      {"pending", pending},
                      {"gpu_milli_limit", cap(g.limit.gpu_milli)},
                      {"gpu_milli_reservation", g.reservation.gpu_milli}});
  }
  MilliGpu total = 0, idle = 0, unavailable = 0;
  MilliCpu cpu_total = 0, cpu_alloc = 0;
  int nodes_ready = 0;
  std::map<std::pair<std::string, int>, MilliGpu> used;  // (node, device) -> compute granted
  for (const Job* jp : live) {
    if (!Holds(*jp)) continue;
    for (const auto& x : jp->grants) {
      used[{x.node, x.device}] += x.compute;
      cpu_alloc += x.cpu;
    }
  }
  // Idle is what the cards that take work have free (a drained card counted as idle while a job
  // waited for one, and shares overcommitting a card took from the empty ones' figure).
  for (const auto& [name, n] : m.nodes) {
    if (n.lost) continue;
    ++nodes_ready;
    cpu_total += n.cpu_milli;
    for (const auto& d : n.devices) {
      total += kWholeGpu;
      const auto u = used.find({name, d.index});
      const MilliGpu free = std::max<MilliGpu>(0, kWholeGpu - (u == used.end() ? 0 : u->second));
      const bool takes_work =
          d.healthy && m.admin.Of(name, d.index) == NodeAdminTable::State::kActive;
      (takes_work ? idle : unavailable) += free;
    }
  }
  return Json{{"cluster",
               {{"gpu_milli_total", total},
                {"gpu_milli_idle", idle},
                {"gpu_milli_unavailable", unavailable},
                {"cpu_milli_total", cpu_total},
                {"cpu_milli_idle", cpu_total - cpu_alloc},
                {"nodes", nodes_ready}}},
              {"groups", groups}};
}

}  // namespace

Result<Json> Views::RenderDurable(const std::function<Json(const ReadModel&)>& render) {
  Json out;
  Status durable = ledger_.ReadDurable([&](const ReadModel& m) {
    out = render(m);
    return Status::Ok();
  });
  if (!durable.ok()) return durable;
  return out;
}

Result<Json> Views::ViewOf(const std::string& key, const std::function<Result<Json>()>& render) {
  const int64_t version = ledger_.MemoryVersion();
  if (auto kept = cache_.Current(key, version)) return *kept;
  // The lock busy (a cycle deciding, a reload): the last rendering, with its age, rather than a
  // wait of up to a cycle. (TryRead may fail spuriously: then too.)
  if (!ledger_.TryRead([](const ReadModel&) {})) {
    if (auto last = cache_.Last(key, ledger_.NowMs())) return *last;
  }
  // The version was read before rendering: a change made meanwhile renders again next time. Only
  // a durable rendering is served and kept.
  Result<Json> fresh = render();
  if (fresh.ok()) cache_.Keep(key, version, ledger_.NowMs(), *fresh);
  return fresh;
}

Result<Json> Views::ListJobs(const Identity& who, const std::string& state_filter, int limit) {
  if (who.role == Role::kAgent) return Status::PermissionDenied("agents cannot list jobs");
  // A filter that names no state is a typo to name, not a list that happens to be empty.
  if (!state_filter.empty()) {
    if (auto parsed = ParseJobState(state_filter); !parsed.ok())
      return Status::InvalidArgument("'state': " + parsed.status().message());
  }
  // Cached per identity and filter at three sizes (100, 500: the dashboard's, and 1000 jobs), each
  // request cut from them; longer lists and long filters are rendered each time. So the cache holds
  // a few renderings per identity, not one per limit asked (512 limits near 10,000 were gigabytes).
  const int cached = limit <= 100 ? 100 : limit <= 500 ? 500 : limit <= 1000 ? 1000 : 0;
  if (cached == 0 || state_filter.size() > 32) return ListJobsNow(who, state_filter, limit);
  Result<Json> view =
      ViewOf("jobs\n" + who.name + "\n" + state_filter + "\n" + std::to_string(cached),
             [&] { return ListJobsNow(who, state_filter, cached); });
  if (!view.ok() || limit >= cached) return view;
  Json& jobs = (*view)["jobs"];
  if (jobs.is_array() && jobs.size() > static_cast<size_t>(limit)) {
    jobs.erase(jobs.begin() + limit, jobs.end());
  }
  return view;
}

Result<Json> Views::ListJobsNow(const Identity& who, const std::string& state_filter, int limit) {
  // Memory holds the live jobs and the newest ended ones; the store every durable job. The
  // newest `limit` of the union, memory's version winning (it may be ahead of the store). What
  // the store adds is ended (every live job is in memory): its newest ended ones, `limit` more
  // than memory holds ended, so that `limit` remain past those memory has. Only memory's ended
  // jobs can be in that list too (an ended job never changes again, and memory is never behind
  // the store): their ids, the job table's list of them, are skipped there. So memory's own
  // jobs are walked, newest first, only until `limit` are taken (not all 100,000 after a cycle).
  std::vector<Json> mine;
  std::unordered_set<std::string> ended_in_memory;
  std::optional<JobState> wanted;  // none: every state
  if (!state_filter.empty()) {
    auto parsed = ParseJobState(state_filter);
    if (!parsed.ok()) return Status::InvalidArgument("'state': " + parsed.status().message());
    wanted = *parsed;
  }
  const bool live_only = wanted && !IsTerminal(*wanted);
  Status durable = ledger_.ReadDurable([&](const ReadModel& m) {
    mine.clear();
    ended_in_memory.clear();
    if (!live_only) {
      const std::deque<std::string>& ended = m.jobs.EndedIds();
      ended_in_memory.reserve(ended.size());
      ended_in_memory.insert(ended.begin(), ended.end());
    }
    for (auto it = m.jobs.Order().rbegin();
         it != m.jobs.Order().rend() && static_cast<int>(mine.size()) < limit; ++it) {
      const Job* jt = m.jobs.Find(*it);
      if (jt == nullptr || !CanSee(who, *jt)) continue;
      if (wanted && jt->state != *wanted) continue;
      mine.push_back(Redacted(who, JobJson(*jt, m.quota, m.nodes)));
    }
    return Status::Ok();
  });
  if (!durable.ok()) return durable;
  std::vector<Json> older;
  if (!live_only) {  // the store's, read outside the engine's lock
    auto stored = ledger_.DurableStore().ListEndedJobs(
        state_filter, limit + static_cast<int>(ended_in_memory.size()));
    if (!stored.ok()) return stored.status();
    std::vector<Job> ended;
    for (store::JobRecord& r : *stored) {
      if (ended_in_memory.count(r.id)) continue;
      auto j = JobFromRecord(std::move(r));
      if (j.ok() && CanSee(who, *j)) ended.push_back(std::move(*j));
    }
    ledger_.Read([&](const ReadModel& m) {  // JobJson reads the node inventory
      for (const Job& j : ended) older.push_back(Redacted(who, JobJson(j, m.quota, m.nodes)));
    });
  }
  // Both lists are newest first: merge by (submit time, id).
  auto newer = [](const Json& a, const Json& b) {
    const int64_t ta = a["submit_ms"], tb = b["submit_ms"];
    if (ta != tb) return ta > tb;
    return IdOrder(a["id"].get<std::string>()) > IdOrder(b["id"].get<std::string>());
  };
  Json out = Json::array();
  size_t i = 0, k = 0;
  while (static_cast<int>(out.size()) < limit && (i < mine.size() || k < older.size())) {
    if (k >= older.size() || (i < mine.size() && newer(mine[i], older[k]))) {
      out.push_back(std::move(mine[i++]));
    } else {
      out.push_back(std::move(older[k++]));
    }
  }
  return Json{{"jobs", out}};
}

Result<Json> Views::GetJob(const Identity& who, const std::string& id) {
  if (who.role == Role::kAgent) return Status::PermissionDenied("agents cannot read jobs");
  Result<Json> found = Status::NotFound("");  // NotFound with no message: not in memory
  Status durable = ledger_.ReadDurable([&](const ReadModel& m) {
    const Job* it = m.jobs.Find(id);
    if (it == nullptr) {
      found = Status::NotFound("");
    } else if (!CanSee(who, *it)) {
      found = Status::NotFound("no job '" + id + "'");
    } else {
      found = Redacted(who, JobJson(*it, m.quota, m.nodes));
    }
    return Status::Ok();
  });
  if (!durable.ok()) return durable;
  if (found.ok() || !found.status().message().empty()) return found;
  return StoredJobJson(ledger_, who, id);
}

Result<Views::OutputRange> Views::JobOutput(const Identity& who, const std::string& id,
                                            int64_t offset, int64_t length) {
  if (who.role == Role::kAgent) return Status::PermissionDenied("agents cannot read job output");
  if (offset < 0 || length < 0)
    return Status::InvalidArgument("an output range must not be negative");
  bool in_memory = false, visible = false;
  ledger_.Read([&](const ReadModel& m) {
    const Job* it = m.jobs.Find(id);
    in_memory = it != nullptr;
    visible = in_memory && CanSee(who, *it);
  });
  if (in_memory && !visible) return Status::NotFound("no job '" + id + "'");
  if (!in_memory) {
    auto stored = StoredJobJson(ledger_, who, id);  // ended and out of memory
    if (!stored.ok()) return stored.status();
  }
  OutputRange out;
  out.offset = offset;
  int fd = ::open(JobOutputPath(data_dir_, id).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;  // nothing printed yet
  struct stat st {};
  if (::fstat(fd, &st) == 0) out.total = st.st_size;
  const int64_t n = std::max<int64_t>(0, std::min({length, kOutputRangeMax, out.total - offset}));
  out.bytes.resize(static_cast<size_t>(n));
  ssize_t got =
      n > 0 ? ::pread(fd, out.bytes.data(), static_cast<size_t>(n), static_cast<off_t>(offset)) : 0;
  ::close(fd);
  out.bytes.resize(static_cast<size_t>(std::max<ssize_t>(got, 0)));
  return out;
}

Result<Json> Views::Queues(const Identity& who) {
  if (who.role == Role::kAgent) return Status::PermissionDenied("agents cannot list queues");
  Json out = Json::array();
  for (const auto& q : config_.policy.queues) {
    bool usable = who.role == Role::kAdmin;
    for (const auto& g : who.groups)
      usable = usable || std::find(q.groups.begin(), q.groups.end(), g) != q.groups.end();
    if (!usable) continue;
    const quota::ProfileSpec* p = config_.FindProfile(q.profile);
    const QueueRoute* r = config_.FindRoute(q.name);
    Json forms = Json::array();
    auto allowed = quota::FormsFor(config_.policy, *p, q.default_class, std::nullopt);
    if (allowed.ok()) {
      for (auto f : *allowed) forms.push_back(AllocationFormName(f));
    }
    out.push_back({{"name", q.name},
                   {"profile", q.profile},
                   {"groups", q.groups},
                   {"priority", q.priority},
                   {"preemptible", q.preemptible},
                   {"class", quota::WorkloadClassName(q.default_class)},
                   {"backend", r->backend},
                   {"forms", forms},
                   {"gpus", p->gpu_count},
                   {"max_gpus", p->max_gpus > 0 ? Json(p->max_gpus) : Json(nullptr)},
                   {"gpu_milli", p->gpu_milli},
                   {"gpu_memory_mib", p->gpu_memory_mib},
                   {"max_gpu_memory_mib",
                    p->max_gpu_memory_mib > 0 ? Json(p->max_gpu_memory_mib) : Json(nullptr)},
                   {"cpu_milli", p->cpu_milli},
                   {"memory_mib", p->memory_mib},
                   {"max_runtime_s", q.max_runtime_s},
                   {"min_runtime_s", q.min_runtime_s},
                   {"preemption_delay_s", q.preemption_delay_s},
                   {"idle_timeout_s", q.idle_timeout_s},
                   {"idle_action",
                    q.idle_action == quota::QueueSpec::IdleAction::kStop ? "stop" : "requeue"}});
  }
  return Json{{"queues", out}};
}

Result<Json> Views::Groups(const Identity& who) {
  if (who.role == Role::kAgent) return Status::PermissionDenied("agents cannot list groups");
  return ViewOf("groups\n" + who.name, [&] {
    return RenderDurable([&](const ReadModel& m) { return GroupsNow(who, m); });
  });
}

Result<Json> Views::Nodes(const Identity& who) {
  if (who.role == Role::kAgent) return Status::PermissionDenied("agents cannot list nodes");
  return ViewOf("nodes\n" + who.name, [&] {
    return RenderDurable([&](const ReadModel& m) { return NodesNow(who, m); });
  });
}

Result<Json> Views::Summary(const Identity& who) {
  if (who.role == Role::kAgent) return Status::PermissionDenied("agents cannot read the summary");
  return ViewOf("summary\n" + who.name, [&] {
    return RenderDurable([&](const ReadModel& m) { return SummaryNow(who, m); });
  });
}

Result<Json> Views::Events(const Identity& who, int64_t after, int limit,
                           const store::EventFilter& f) {
  if (who.role == Role::kAgent) return Status::PermissionDenied("agents cannot read events");
  Json out = Json::array();
  int64_t cursor = after;
  // A user's "next" never names an event they may not see (the red team: a filter for another
  // group's job answered with the seq of its last event): the last one shown, or the log's last
  // as of before the scan once the scan found no more (none it may see is missed below it).
  const bool admin = who.role == Role::kAdmin;
  int64_t shown = after, head = after;
  if (!admin) {
    auto last = ledger_.DurableStore().LastSeq();
    if (!last.ok()) return last.status();
    head = std::max(after, *last);
  }
  bool exhausted = false;
  std::map<std::string, bool> seen_stored;  // job id -> visible, of jobs read from the store
  // Users see the events of the jobs they can see and of nodes; page until `limit` such events.
  for (int round = 0; round < 50 && static_cast<int>(out.size()) < limit; ++round) {
    // Pages of at least 1,000: 50 of them scan 50,000 events, past which (hidden ones in a row)
    // "next" is the last scanned (pages of `limit` made it 50 events at limit=1: the red team).
    auto evs = ledger_.DurableStore().ListEvents(cursor, std::max(limit, 1000), f);
    if (!evs.ok()) return evs.status();
    if (evs->empty()) {
      exhausted = true;
      break;
    }
    std::vector<bool> visible(evs->size(), admin);
    std::map<size_t, Json> node_data;  // a node event's data, with the jobs the user may see only
    if (who.role != Role::kAdmin) {
      std::vector<size_t> stored;  // of jobs ended and out of memory: the store says whose
      ledger_.Read([&](const ReadModel& m) {
        for (size_t i = 0; i < evs->size(); ++i) {
          const store::Event& e = (*evs)[i];
          const Job* it = m.jobs.Find(e.subject);
          visible[i] = e.kind.rfind("node.", 0) == 0 || (it != nullptr && CanSee(who, *it));
          // A drain's event lists the jobs it stopped: another group's were named to everyone.
          if (e.kind.rfind("node.", 0) == 0 && e.data.find("\"jobs\"") != std::string::npos) {
            Json data = Json::parse(e.data, nullptr, false);
            if (data.is_object() && data.contains("jobs") && data["jobs"].is_array()) {
              Json mine = Json::array();
              for (const Json& id : data["jobs"]) {
                const Job* held = id.is_string() ? m.jobs.Find(id.get<std::string>()) : nullptr;
                if (held != nullptr && CanSee(who, *held)) mine.push_back(id);
              }
              data["jobs"] = mine;
              node_data[i] = data;
            }
          }
          if (!visible[i] && it == nullptr && e.kind.rfind("job.", 0) == 0) stored.push_back(i);
        }
      });
      for (size_t i : stored) {
        const std::string& subject = (*evs)[i].subject;
        auto seen = seen_stored.find(subject);
        if (seen == seen_stored.end()) {
          auto rec = ledger_.DurableStore().GetJob(subject);
          if (!rec.ok()) return rec.status();
          bool may = false;
          if (rec->has_value()) {
            auto j = JobFromRecord(std::move(**rec));
            may = j.ok() && CanSee(who, *j);
          }
          seen = seen_stored.emplace(subject, may).first;
        }
        visible[i] = seen->second;
      }
    }
    for (size_t i = 0; i < evs->size(); ++i) {
      const store::Event& e = (*evs)[i];
      cursor = e.seq;
      if (!visible[i]) continue;
      shown = e.seq;
      auto shaped = node_data.find(i);
      Json data = shaped != node_data.end() ? shaped->second : Json::parse(e.data, nullptr, false);
      out.push_back({{"seq", e.seq},
                     {"time_ms", e.time_ms},
                     {"actor", e.actor},
                     {"kind", e.kind},
                     {"subject", e.subject},
                     {"reason", e.reason},
                     {"data", data.is_discarded() ? Json::object() : data}});
      if (static_cast<int>(out.size()) >= limit) break;
    }
  }
  // Not exhausted after 50 pages of events it may not see: the last scanned, so that a poll
  // goes on (the one seq it tells is one of 50,000 hidden in a row).
  const int64_t next = admin                                   ? cursor
                       : static_cast<int>(out.size()) >= limit ? shown
                       : exhausted                             ? std::max(shown, head)
                                                               : cursor;
  return Json{{"events", out}, {"next", next}};
}

namespace {
constexpr char kHealthKey[] = "\nhealth";  // health's last answer among the views' renderings
}  // namespace

Json Views::Health() {
  // Never behind a cycle: while the lock is busy, the last answer with its age (a cycle at
  // 10,000 nodes holds it for up to a second; health probes have 100 ms).
  Json now;
  const auto render = [&](const ReadModel& m) {
    const bool ok = m.broken.ok();
    now = {{"ok", ok},
           {"role", "leader"},
           {"store", ok ? "ok" : m.broken.message()},
           {"commits_queued", m.commits_queued},
           {"jobs_in_memory", m.jobs.size()},
           {"nodes", m.nodes.size()}};
  };
  if (!ledger_.TryRead(render)) {
    if (auto last = cache_.Last(kHealthKey, ledger_.NowMs())) return *last;
    ledger_.Read(render);  // no answer yet to serve
  }
  cache_.Keep(kHealthKey, 0, ledger_.NowMs(), now);
  return now;
}

}  // namespace tessera::api
