// Read models for people: jobs (with the step and reason that hold a waiting one), queues,
// groups, nodes with their devices and partition layouts, the summary and events.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <sstream>

#include "api/engine.h"
#include "model/isolation.h"
#include "model/quantity.h"

namespace tessera::api {
namespace {

// A waiting job's forecast: its place in the cycle's order and, when the scheduler keeps devices
// for it, when they are expected free (the reason's "expected free at t=SECONDS s", written by
// the quota engine from the running jobs' declared ends).
Json ForecastOf(int position, const std::string& reason) {
  Json f = {{"position", position}};
  static const std::string kAt = "expected free at t=";
  const size_t at = reason.find(kAt);
  if (at == std::string::npos) return f;
  int64_t s = 0;
  size_t i = at + kAt.size();
  for (; i < reason.size() && reason[i] >= '0' && reason[i] <= '9' && s < (INT64_MAX - 9) / 10; ++i)
    s = s * 10 + (reason[i] - '0');
  if (i < reason.size() && reason[i] == 's' && i > at + kAt.size())
    f["expected_start_ms"] = s * 1000;
  return f;
}

Json ResJson(const Resources& r) {
  auto cap = [](int64_t v) { return v >= quota::kUnlimited ? Json(nullptr) : Json(v); };
  return Json{{"gpu_milli", cap(r.gpu_milli)},
              {"gpu_memory_mib", cap(r.gpu_memory_mib)},
              {"cpu_milli", cap(r.cpu_milli)},
              {"memory_mib", cap(r.memory_mib)}};
}

MilliGpu GpuHeld(const std::vector<quota::GrantView>& grants) {
  MilliGpu g = 0;
  for (const auto& x : grants) g += x.compute;
  return g;
}

int64_t IdOrder(const std::string& id) {
  if (id.size() < 3 || id.compare(0, 2, "j-") != 0) return 0;
  auto v = ParseNonNegativeInt(id.substr(2));
  return v.ok() ? *v : 0;
}

}  // namespace

Json Engine::Redacted(const Identity& who, Json job) {
  // Group members see each other's jobs, not their environment (it may hold secrets).
  if (who.role == Role::kAdmin || job.value("identity", "") == who.name) return job;
  if (job.contains("spec") && job["spec"].contains("env") && job["spec"]["env"].is_object()) {
    for (auto& [k, v] : job["spec"]["env"].items()) v = "(hidden)";
  }
  // Command arguments the submitter marked secret ("secret_args": their indices).
  if (job.contains("spec") && job["spec"].contains("secret_args") &&
      job["spec"].contains("command")) {
    Json& cmd = job["spec"]["command"];
    for (const Json& i : job["spec"]["secret_args"]) {
      if (i.is_number_integer() && i.get<int64_t>() >= 0 &&
          i.get<int64_t>() < static_cast<int64_t>(cmd.size())) {
        cmd[static_cast<size_t>(i.get<int64_t>())] = "(hidden)";
      }
    }
  }
  return job;
}

bool Engine::CanSee(const Identity& who, const Job& j) const {
  if (who.role == Role::kAdmin) return true;
  if (who.role != Role::kUser && who.role != Role::kViewer) return false;
  return std::find(who.groups.begin(), who.groups.end(), j.rec.group) != who.groups.end();
}

std::string Engine::OutputPath(const std::string& job) const {
  return data_dir_ + "/output/" + job + ".log";
}

Json Engine::JobJson(const Job& j) const {
  Json o = {{"id", j.rec.id},
            {"queue", j.rec.queue},
            {"identity", j.rec.identity},
            {"group", j.rec.group},
            {"state", JobStateName(j.state)},
            {"reason", j.rec.reason},
            {"submit_ms", j.rec.submit_ms},
            {"update_ms", j.rec.update_ms},
            {"spec", j.spec},
            {"preemptions", j.preemptions}};
  if (j.state == JobState::kPending) {
    const size_t colon = j.rec.reason.find(": ");
    o["wait"] = {
        {"step", colon == std::string::npos ? "" : j.rec.reason.substr(0, colon)},
        {"reason", colon == std::string::npos ? j.rec.reason : j.rec.reason.substr(colon + 2)}};
  }
  if (j.rec.exit_code) o["exit_code"] = *j.rec.exit_code;
  // Times (node_admin.cc's neighbours read them too): its current run's start, its end.
  if (j.start_ms > 0) o["start_ms"] = j.start_ms;
  if (Ended(j)) o["end_ms"] = j.rec.update_ms;
  if (j.state == JobState::kPending && j.wait_position > 0) {
    o["forecast"] = ForecastOf(j.wait_position, j.rec.reason);
  }
  // Running under its queue's max_runtime: when that guard stops it. Idle under its queue's
  // idle_timeout: when, and how, that guard gives the holding back (swap, requeue or stop).
  if (j.handle >= 0 && !Ended(j)) {
    const quota::JobView v = qe_->job(j.handle);
    if (v.stop_at >= 0) o["stop_at_ms"] = v.stop_at * 1000;
    if (v.idle_action_at >= 0) {
      o["idle_action_at_ms"] = v.idle_action_at * 1000;
      o["idle_action"] = v.idle_action;
    }
  }
  if (!j.node.empty()) {  // what it holds, or held when it ended
    Json devs = Json::array();
    MilliCpu cpu = 0;
    MiB mem = 0;
    int isolation = kIsolationHardware;  // the weakest grade so far; -1: one is not known
    for (const auto& g : j.grants) {
      cpu += g.cpu;
      mem += g.host_memory;
      if (g.device < 0) continue;
      Json dj = {{"node", g.node},
                 {"index", g.device},
                 {"gpu_milli", g.compute},
                 {"gpu_memory_mib", g.memory}};
      if (!g.slot.empty()) dj["partition"] = g.slot;
      if (j.form == "share") {
        dj["compute"] = g.sm_percent > 0 ? Json{{"mode", "sm-sharing"}, {"percent", g.sm_percent}}
                                         : Json{{"mode", "time-slicing"}};
      }
      auto n = nodes_.find(g.node);
      // The grant's isolation grade: a whole device or a partition of its own is hardware; a
      // share gets what its device's agent enforces there (unknown from an older agent).
      // An sm-sharing share runs under MPS: grade mps, or its device's if higher (issue 38).
      std::string grade = j.form == "share" ? "" : "hardware";
      if (n != nodes_.end() && g.device < static_cast<int>(n->second.devices.size())) {
        if (grade.empty()) grade = n->second.devices[g.device].isolation;
        if (j.form == "share" && g.sm_percent > 0 && IsolationRank(grade) < 2) grade = "mps";
        dj["uuid"] = n->second.devices[g.device].uuid;
        dj["model"] = n->second.devices[g.device].model;
        dj["simulated"] = n->second.devices[g.device].simulated;
      }
      if (!grade.empty()) dj["isolation"] = grade;
      if (isolation >= 0)
        isolation = grade.empty() ? -1 : std::min(isolation, IsolationRank(grade));
      devs.push_back(dj);
    }
    const bool one = devs.size() == 1;
    o["placement"] = {{"node", j.node},
                      {"form", j.form},
                      {"borrowed", j.borrowed},
                      {"devices", devs},
                      {"gpu_milli", one ? devs[0]["gpu_milli"] : Json(GpuHeld(j.grants))},
                      {"gpu_memory_mib", one ? devs[0]["gpu_memory_mib"] : Json(nullptr)},
                      {"cpu_milli", cpu},
                      {"memory_mib", mem}};
    // The weakest of its grants' grades (absent when one is not known).
    if (isolation >= 0 && !devs.empty()) o["placement"]["isolation"] = IsolationName(isolation);
  }
  if (!j.held_on.empty() && j.state == JobState::kPending) o["held_swapped_on"] = j.held_on;
  if (j.last_active_ms > 0 && (Holds(j) || (!j.held_on.empty() && j.state == JobState::kPending))) {
    o["activity"] = {{"idle", j.idle}, {"last_active_ms", j.last_active_ms}};
    if (j.gpu_memory_used_mib >= 0) o["activity"]["gpu_memory_used_mib"] = j.gpu_memory_used_mib;
    if (!j.swap_state.empty()) {
      o["activity"]["swap"] = j.swap_state;
      o["activity"]["swapped_mib"] = j.swapped_mib;
    }
  }
  if (!j.backend.empty()) {
    o["backend"] = {{"name", j.backend},       {"external_id", j.external_id},
                    {"node", j.external_node}, {"gres", j.gres},
                    {"state", j.native_state}, {"submit_attempts", j.submit_attempts}};
    if (!j.dispatch.is_null()) {  // several backends: where it went, why, and the actual start
      o["dispatch"] = j.dispatch;
      o["dispatch"]["started_ms"] = j.start_ms > 0 ? Json(j.start_ms) : Json(nullptr);
    }
  }
  return o;
}

Result<Json> Engine::ViewOf(const std::string& key, const std::function<Result<Json>()>& render) {
  const int64_t version = views_.Version();
  if (auto kept = views_.Current(key, version)) return *kept;
  // The lock busy (a cycle deciding, a reload): the last rendering, with its age, rather than a
  // wait of up to a cycle. (try_lock may fail spuriously: then too.)
  if (!mu_.try_lock()) {
    if (auto last = views_.Last(key, clock_())) return *last;
  } else {
    mu_.unlock();
  }
  // The version was read before rendering: a change made meanwhile renders again next time. Only
  // a durable rendering is served and kept (RenderDurable).
  Result<Json> fresh = Status::Ok();
  Status durable = RenderDurable([&] {
    fresh = render();
    return fresh.ok() ? Status::Ok() : fresh.status();
  });
  if (!durable.ok()) return durable;
  views_.Keep(key, version, clock_(), *fresh);
  return fresh;
}

Result<Json> Engine::ListJobs(const Identity& who, const std::string& state_filter, int limit) {
  if (who.role == Role::kAgent) return Status::PermissionDenied("agents cannot list jobs");
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

Result<Json> Engine::ListJobsNow(const Identity& who, const std::string& state_filter, int limit) {
  // Memory holds the live jobs and the newest ended ones; the store every durable job. The
  // newest `limit` of the union, memory's version winning (it may be ahead of the store).
  std::vector<Json> mine;
  std::set<std::string> in_memory;
  std::optional<JobState> wanted;  // none: every state
  if (!state_filter.empty()) {
    auto parsed = ParseJobState(state_filter);
    if (!parsed.ok()) return Json{{"jobs", Json::array()}};  // no job is in a state that is none
    wanted = *parsed;
  }
  const bool live_only = wanted && !IsTerminal(*wanted);
  {
    std::unique_lock<std::mutex> lock(mu_);
    for (auto it = jobs_.Order().rbegin(); it != jobs_.Order().rend(); ++it) {
      const Job* jt = jobs_.Find(*it);
      if (jt == nullptr) continue;
      in_memory.insert(*it);
      const Job& j = *jt;
      if (static_cast<int>(mine.size()) >= limit || !CanSee(who, j)) continue;
      if (wanted && j.state != *wanted) continue;
      mine.push_back(Redacted(who, JobJson(j)));
    }
  }
  std::vector<Json> older;
  if (!live_only) {
    auto stored = store_->ListJobs(state_filter, limit + static_cast<int>(in_memory.size()));
    if (!stored.ok()) return stored.status();
    for (store::JobRecord& r : *stored) {
      if (in_memory.count(r.id)) continue;
      auto j = JobFromRecord(std::move(r));
      if (!j.ok() || !CanSee(who, *j)) continue;
      std::unique_lock<std::mutex> lock(mu_);  // JobJson reads the node inventory
      older.push_back(Redacted(who, JobJson(*j)));
    }
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

Result<Json> Engine::GetJob(const Identity& who, const std::string& id) {
  if (who.role == Role::kAgent) return Status::PermissionDenied("agents cannot read jobs");
  Result<Json> found = Status::NotFound("");  // NotFound with no message: not in memory
  Status durable = RenderDurable([&] {
    std::unique_lock<std::mutex> lock(mu_);
    Job* it = jobs_.Find(id);
    if (it == nullptr) {
      found = Status::NotFound("");
    } else if (!CanSee(who, *it)) {
      found = Status::NotFound("no job '" + id + "'");
    } else {
      found = Redacted(who, JobJson(*it));
    }
    return Status::Ok();
  });
  if (!durable.ok()) return durable;
  if (found.ok() || !found.status().message().empty()) return found;
  return StoredJobJson(who, id);
}

Result<Json> Engine::StoredJobJson(const Identity& who, const std::string& id) {
  auto rec = store_->GetJob(id);
  if (!rec.ok()) return rec.status();
  if (!rec->has_value()) return Status::NotFound("no job '" + id + "'");
  auto j = JobFromRecord(std::move(**rec));
  if (!j.ok()) return j.status();
  if (!CanSee(who, *j)) return Status::NotFound("no job '" + id + "'");
  std::unique_lock<std::mutex> lock(mu_);
  return Redacted(who, JobJson(*j));
}

Result<Engine::OutputRange> Engine::JobOutput(const Identity& who, const std::string& id,
                                              int64_t offset, int64_t length) {
  if (who.role == Role::kAgent) return Status::PermissionDenied("agents cannot read job output");
  if (offset < 0 || length < 0)
    return Status::InvalidArgument("an output range must not be negative");
  {
    std::unique_lock<std::mutex> lock(mu_);
    Job* it = jobs_.Find(id);
    if (it != nullptr && !CanSee(who, *it)) return Status::NotFound("no job '" + id + "'");
    if (it == nullptr) {
      lock.unlock();
      auto stored = StoredJobJson(who, id);  // ended and out of memory
      if (!stored.ok()) return stored.status();
    }
  }
  OutputRange out;
  out.offset = offset;
  int fd = ::open(OutputPath(id).c_str(), O_RDONLY | O_CLOEXEC);
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

Result<Json> Engine::Queues(const Identity& who) {
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
                   {"memory_mib", p->memory_mib}});
  }
  return Json{{"queues", out}};
}

Result<Json> Engine::Groups(const Identity& who) {
  if (who.role == Role::kAgent) return Status::PermissionDenied("agents cannot list groups");
  return ViewOf("groups\n" + who.name, [&] { return GroupsNow(who); });
}

Result<Json> Engine::GroupsNow(const Identity& who) {
  std::unique_lock<std::mutex> lock(mu_);
  Json out = Json::array();
  for (const quota::GroupView& g : qe_->groups()) {
    if (who.role != Role::kAdmin &&
        std::find(who.groups.begin(), who.groups.end(), g.name) == who.groups.end())
      continue;
    const quota::GroupSpec* spec = config_.FindGroup(g.name);
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
      for (const quota::ModelQuotaView& m : views) {
        out.back()[list].push_back(
            {{name, m.model},
             {"gpu_milli_usage", m.usage},
             {"gpu_milli_reservation", m.reservation},
             {"gpu_milli_limit", m.limit >= quota::kUnlimited ? Json(nullptr) : Json(m.limit)}});
      }
    };
    quota_rows("models", "model", g.models);
    quota_rows("pools", "pool", g.pools);
  }
  return Json{{"groups", out}};
}

Result<Json> Engine::Nodes(const Identity& who) {
  if (who.role == Role::kAgent) return Status::PermissionDenied("agents cannot list nodes");
  return ViewOf("nodes\n" + who.name, [&] { return NodesNow(who); });
}

Result<Json> Engine::NodesNow(const Identity& who) {
  std::unique_lock<std::mutex> lock(mu_);
  struct Holder {
    const Job* job;
    quota::GrantView grant;
  };
  std::map<std::pair<std::string, int>, std::vector<Holder>> held;  // (node, device)
  for (const std::string& id : jobs_.LiveIds()) {
    const Job& j = jobs_.Get(id);
    if (!Holds(j)) continue;
    for (const auto& g : j.grants) held[{g.node, g.device}].push_back({&j, g});
  }
  auto holds_on = [&](const std::string& node) {  // anything held on the node, CPU-only too
    for (auto it = held.lower_bound({node, -1}); it != held.end() && it->first.first == node; ++it)
      if (!it->second.empty()) return true;
    return false;
  };
  Json out = Json::array();
  for (const auto& [name, n] : nodes_) {
    Json devs = Json::array();
    for (const auto& d : n.devices) {
      Json holders = Json::array();
      MilliGpu used = 0;
      MiB mem_used = 0;
      for (const Holder& h : held[{name, d.index}]) {
        used += h.grant.compute;
        mem_used += h.grant.memory;
        Json hj = {{"job", h.job->rec.id},
                   {"form", h.job->form},
                   {"gpu_milli", h.grant.compute},
                   {"gpu_memory_mib", h.grant.memory}};
        if (!h.grant.slot.empty()) hj["partition"] = h.grant.slot;
        hj["idle"] = h.job->idle;
        if (CanSee(who, *h.job)) {
          hj["identity"] = h.job->rec.identity;
          hj["group"] = h.job->rec.group;
        }
        holders.push_back(hj);
      }
      quota::DeviceView v = qe_->device(name, d.index);
      Json slots = Json::array();
      for (const auto& s : v.slots)
        slots.push_back(
            {{"name", s.name}, {"profile", s.profile}, {"start", s.start}, {"job", s.holder}});
      std::string layout = v.mig ? "MIG" : v.amd_pair;
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
                      {"admin_state", admin_.StateName(name, d.index, !holders.empty())}});
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
    out.push_back({{"name", name},
                   {"pool", n.pool},
                   {"cpu_milli", n.cpu_milli},
                   {"memory_mib", n.memory_mib},
                   {"simulated", n.simulated},
                   {"state", n.lost ? "lost" : "ready"},
                   {"admin_state", admin_.StateName(name, -1, holds_on(name))},
                   {"last_heartbeat_ms", n.last_heartbeat_ms},
                   {"devices", devs}});
  }
  return Json{{"nodes", out}};
}

Result<Json> Engine::Summary(const Identity& who) {
  if (who.role == Role::kAgent) return Status::PermissionDenied("agents cannot read the summary");
  return ViewOf("summary\n" + who.name, [&] { return SummaryNow(who); });
}

Result<Json> Engine::SummaryNow(const Identity& who) {
  std::unique_lock<std::mutex> lock(mu_);
  std::vector<const Job*> live;
  for (const std::string& id : jobs_.LiveIds()) live.push_back(&jobs_.Get(id));
  Json groups = Json::array();
  for (const auto& g : config_.policy.groups) {
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
        if (j.idle) held_idle += gpu;  // held but idle (telemetry)
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
  MilliGpu total = 0, allocated = 0;
  MilliCpu cpu_total = 0, cpu_alloc = 0;
  int nodes_ready = 0;
  for (const auto& [name, n] : nodes_) {
    if (n.lost) continue;
    ++nodes_ready;
    total += static_cast<int64_t>(n.devices.size()) * kWholeGpu;
    cpu_total += n.cpu_milli;
  }
  for (const Job* jp : live) {
    if (!Holds(*jp)) continue;
    for (const auto& x : jp->grants) {
      allocated += x.compute;
      cpu_alloc += x.cpu;
    }
  }
  return Json{{"cluster",
               {{"gpu_milli_total", total},
                {"gpu_milli_idle", total - allocated},
                {"cpu_milli_total", cpu_total},
                {"cpu_milli_idle", cpu_total - cpu_alloc},
                {"nodes", nodes_ready}}},
              {"groups", groups}};
}

Result<Json> Engine::Events(const Identity& who, int64_t after, int limit,
                            const store::EventFilter& f) {
  if (who.role == Role::kAgent) return Status::PermissionDenied("agents cannot read events");
  Json out = Json::array();
  int64_t cursor = after;
  // Users see the events of the jobs they can see and of nodes; page until `limit` such events.
  for (int round = 0; round < 50 && static_cast<int>(out.size()) < limit; ++round) {
    auto evs = store_->ListEvents(cursor, limit, f);
    if (!evs.ok()) return evs.status();
    if (evs->empty()) break;
    std::unique_lock<std::mutex> lock(mu_);
    for (const auto& e : *evs) {
      cursor = e.seq;
      bool visible = who.role == Role::kAdmin;
      if (!visible) {
        if (e.kind.rfind("node.", 0) == 0) {
          visible = true;
        } else {
          Job* it = jobs_.Find(e.subject);
          visible = it != nullptr && CanSee(who, *it);
        }
      }
      if (!visible) continue;
      Json data = Json::parse(e.data, nullptr, false);
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
  return Json{{"events", out}, {"next", cursor}};
}

namespace {
constexpr char kHealthKey[] = "\nhealth";  // health's last answer among the views' renderings
}  // namespace

Json Engine::Health() {
  // Never behind a cycle: while the lock is busy, the last answer with its age (a cycle at
  // 10,000 nodes holds it for up to a second; health probes have 100 ms).
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) {
    if (auto last = views_.Last(kHealthKey, clock_())) return *last;
    lock.lock();  // no answer yet to serve
  }
  const bool ok = broken_.ok();
  const int64_t written = writer_.Written();
  Json now = {{"ok", ok},
              {"role", "leader"},
              {"store", ok ? "ok" : broken_.message()},
              {"commits_queued", seq_.last() - written},
              {"jobs_in_memory", jobs_.size()},
              {"nodes", nodes_.size()}};
  views_.Keep(kHealthKey, 0, clock_(), now);
  return now;
}

}  // namespace tessera::api
