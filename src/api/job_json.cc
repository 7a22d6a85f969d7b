// A job as people see it (api/read_model.h): the views, and the replies to submit and cancel.
#include <algorithm>

#include "api/read_model.h"
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

}  // namespace

Json Redacted(const Identity& who, Json job) {
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

bool CanSee(const Identity& who, const Job& j) {
  if (who.role == Role::kAdmin) return true;
  if (who.role != Role::kUser && who.role != Role::kViewer) return false;
  return std::find(who.groups.begin(), who.groups.end(), j.rec.group) != who.groups.end();
}

Json JobJson(const Job& j, const quota::QuotaEngine& quota,
             const std::map<std::string, NodeInfo>& nodes) {
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
    const quota::JobView v = quota.job(j.handle);
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
      auto n = nodes.find(g.node);
      // The grant's isolation grade: a whole device or a partition of its own is hardware; a
      // share gets what its device's agent enforces there (unknown from an older agent).
      // An sm-sharing share runs under MPS: grade mps, or its device's if higher (issue 38).
      std::string grade = j.form == "share" ? "" : "hardware";
      if (n != nodes.end() && g.device < static_cast<int>(n->second.devices.size())) {
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
  if (!j.agent.swap.held_on.empty() && j.state == JobState::kPending)
    o["held_swapped_on"] = j.agent.swap.held_on;
  if (j.agent.activity.last_active_ms > 0 &&
      (Holds(j) || (!j.agent.swap.held_on.empty() && j.state == JobState::kPending))) {
    o["activity"] = {{"idle", j.agent.activity.idle},
                     {"last_active_ms", j.agent.activity.last_active_ms}};
    if (j.agent.activity.gpu_memory_used_mib >= 0)
      o["activity"]["gpu_memory_used_mib"] = j.agent.activity.gpu_memory_used_mib;
    if (!j.agent.swap.state.empty()) {
      o["activity"]["swap"] = j.agent.swap.state;
      o["activity"]["swapped_mib"] = j.agent.swap.swapped_mib;
    }
  }
  if (!j.ext.backend.empty()) {
    o["backend"] = {{"name", j.ext.backend},       {"external_id", j.ext.id},
                    {"node", j.ext.node},          {"gres", j.ext.gres},
                    {"state", j.ext.native_state}, {"submit_attempts", j.ext.submit_attempts}};
    if (!j.ext.dispatch.is_null()) {  // several backends: where it went, why, and the actual start
      o["dispatch"] = j.ext.dispatch;
      o["dispatch"]["started_ms"] = j.start_ms > 0 ? Json(j.start_ms) : Json(nullptr);
    }
  }
  return o;
}

Result<Job> StoredJob(store::StoreReader& store, const Identity& who, const std::string& id) {
  auto rec = store.GetJob(id);
  if (!rec.ok()) return rec.status();
  if (!rec->has_value()) return Status::NotFound("no job '" + id + "'");
  auto j = JobFromRecord(std::move(**rec));
  if (!j.ok()) return j.status();
  if (!CanSee(who, *j)) return Status::NotFound("no job '" + id + "'");
  return j;
}

Result<Json> StoredJobJson(LedgerReads& ledger, const Identity& who, const std::string& id) {
  auto j = StoredJob(ledger.DurableStore(), who, id);
  if (!j.ok()) return j.status();
  Json out;
  ledger.Read([&](const ReadModel& m) { out = JobJson(*j, m.quota, m.nodes); });
  return Redacted(who, std::move(out));
}

}  // namespace tessera::api
