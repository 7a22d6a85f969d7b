// The records' helpers every part uses: events as stored, a job as its store record, a node and a
// job as the quota engine is told of them, where a job's output goes. Pure functions of their
// arguments, in the parts' library (the ledger's and the executors' alike).
#include "api/records.h"

#include <charconv>
#include <cstring>

#include "api/json_text.h"
#include "api/read_model.h"
#include "common/text.h"

namespace tessera::api {

namespace {

void WriteGrantFields(JsonText& w, const quota::GrantView& g) {
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
      .Int(g.host_memory);
  if (g.sm_percent > 0) w.Key("sm_percent").Int(g.sm_percent);  // sm-sharing (issue 38)
  w.EndObject();
}

// Appends to a buffer that has room (WriteGrants sizes it).
char* Put(char* at, std::string_view s) {
  std::memcpy(at, s.data(), s.size());
  return at + s.size();
}
char* Put(char* at, int64_t v) { return std::to_chars(at, at + 20, v).ptr; }

}  // namespace

void WriteGrants(JsonText& w, const std::vector<quota::GrantView>& grants) {
  // Every placement writes its grants twice (its event and its record), eight for a whole 8-card
  // job: each grant's object is made in a buffer on the stack and appended at once, the text
  // WriteGrantFields writes field by field, which names that need escaping or checking take.
  constexpr size_t kNames = 256;  // the rest of the object is at most 232 bytes
  w.BeginArray();
  for (const auto& g : grants) {
    if (g.node.size() + g.slot.size() > kNames || !JsonText::Plain(g.node) ||
        !JsonText::Plain(g.slot)) {
      WriteGrantFields(w, g);
      continue;
    }
    char buf[kNames + 256];
    char* at = Put(buf, "{\"node\":\"");
    at = Put(at, g.node);
    at = Put(Put(at, "\",\"device\":"), g.device);
    at = Put(Put(at, ",\"slot\":\""), g.slot);
    at = Put(Put(at, "\",\"compute\":"), g.compute);
    at = Put(Put(at, ",\"memory\":"), g.memory);
    at = Put(Put(at, ",\"cpu\":"), g.cpu);
    at = Put(Put(at, ",\"host_memory\":"), g.host_memory);
    if (g.sm_percent > 0) at = Put(Put(at, ",\"sm_percent\":"), g.sm_percent);
    *at++ = '}';
    w.Raw(std::string_view(buf, static_cast<size_t>(at - buf)));
  }
  w.EndArray();
}

store::Event EventAt(int64_t time_ms, std::string actor, std::string kind, std::string subject,
                     std::string reason, const Json& data) {
  JsonText text;
  text.Raw(data.dump(-1, ' ', false, Json::error_handler_t::replace));
  return EventAt(time_ms, std::move(actor), std::move(kind), std::move(subject), std::move(reason),
                 std::move(text));
}

namespace {

// `s` as valid UTF-8: itself when it is already (most are), else ToValidUtf8's copy.
std::string ValidUtf8(std::string s) {
  if (IsValidUtf8(s)) return s;
  return ToValidUtf8(s);
}

}  // namespace

store::Event EventAt(int64_t time_ms, std::string actor, std::string kind, std::string subject,
                     std::string reason, JsonText data) {
  store::Event ev;
  ev.time_ms = time_ms;
  // What is stored is valid UTF-8 whatever reached us (an event once made every page of the
  // log that held it fail to render).
  ev.actor = ValidUtf8(std::move(actor));
  ev.kind = ValidUtf8(std::move(kind));
  ev.subject = ValidUtf8(std::move(subject));
  ev.reason = ValidUtf8(std::move(reason));
  ev.data = data.Take();
  return ev;
}

store::JobRecord RecordOf(const Job& j) {
  store::JobRecord r;
  if (j.stored) {
    // An update (spec ""): the store changes only the columns that move after submission
    // (store::JobRecord), so the rest of the record is not copied.
    r.id = j.rec.id;
    r.submit_ms = j.rec.submit_ms;
    r.update_ms = j.rec.update_ms;
    r.exit_code = j.rec.exit_code;
    r.reason = j.rec.reason;
  } else {
    r = j.rec;
    r.spec = j.spec_text.empty() ? j.spec.dump() : j.spec_text;
  }
  r.state = JobStateName(j.state);
  JsonText p(256);
  p.BeginObject().Key("preemptions").Int(j.preemptions);
  if (j.start_ms > 0) p.Key("start_ms").Int(j.start_ms);
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
    for (const std::string& n : j.agent.parts_done) p.Str(n);
    p.EndArray();
    // Preempted before its start went out: a restart must still requeue it (no exit will come).
    if (j.agent.preempted_unstarted) p.Key("unstarted").Bool(true);
  }
  if (j.state == JobState::kPending && !j.agent.swap.held_on.empty()) {  // held swapped out
    const auto& h = j.agent.swap;
    p.Key("held")
        .BeginObject()
        .Key("node")
        .Str(h.held_on)
        .Key("device")
        .Int(h.held_device)
        .Key("memory_mib")
        .Int(h.held_mib)
        .Key("since_s")
        .Int(h.held_since_s)
        .Key("start_s")
        .Int(h.held_start_s)
        .Key("paused_s")
        .Int(h.held_paused_s)
        .EndObject();
  }
  if (!j.ext.backend
           .empty()) {  // also while pending again (a suspended Kubernetes Job keeps its id)
    p.Key("backend")
        .Str(j.ext.backend)
        .Key("external_id")
        .Str(j.ext.id)
        .Key("external_node")
        .Str(j.ext.node)
        .Key("gres")
        .Str(j.ext.gres)
        .Key("attempts")
        .Int(j.ext.submit_attempts);
    if (!j.ext.dispatch.is_null()) p.Key("dispatch").Raw(j.ext.dispatch.dump());
  }
  r.placement = p.EndObject().Take();
  return r;
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

std::string JobOutputPath(const std::string& data_dir, const std::string& job) {
  return data_dir + "/output/" + job + ".log";
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

}  // namespace tessera::api
