// History for people: the utilization samples kept in the store (fine for a day, 5-minute
// averages for 90 days; see EngineConfig) and the attribution of GPU time to groups,
// identities, queues and forms, computed exactly from the event log.
//
// A sample is one JSON object of integer gauges, taken every utilization_sample:
//   {"gpu_milli_total", "gpu_memory_mib_total", "cpu_milli_total", "gpu_milli_allocated",
//    "gpu_memory_mib_allocated", "cpu_milli_allocated", "gpu_milli_held_idle", "workers",
//    "pending", "by": {"group": {NAME: {...}}, "queue": {...}, "pool": {...}}}
// A group's row also has "form": {"whole"|"partition"|"share": {"gpu_milli",
// "gpu_milli_held_idle"}}: what it holds in each form and how much of that is held but idle.
// An average (a 5-minute row, or a step of a query) is the integer mean of each gauge over the
// samples it covers (a name missing from a sample counts 0 there), with "samples": how many.
#include <algorithm>
#include <map>
#include <set>

#include "api/job_events.h"
#include "api/views.h"
#include "model/quantity.h"

namespace tessera::api {
namespace {

__extension__ typedef __int128 Int128;
constexpr int64_t kCoarseMs = kCoarseSampleMs;

// acc += x for every integer leaf (objects recursively).
void AddInto(Json& acc, const Json& x) {
  for (const auto& [k, v] : x.items()) {
    if (v.is_object()) {
      AddInto(acc[k], v);
    } else if (v.is_number_integer()) {
      acc[k] = (acc.contains(k) && acc[k].is_number_integer() ? acc[k].get<int64_t>() : 0) +
               v.get<int64_t>();
    }
  }
}

void DivideBy(Json& acc, int64_t n) {
  for (auto& [k, v] : acc.items()) {
    if (v.is_object()) {
      DivideBy(v, n);
    } else if (v.is_number_integer()) {
      v = v.get<int64_t>() / n;
    }
  }
}

void Bump(Json& o, const char* k, int64_t v) {
  o[k] = (o.contains(k) ? o[k].get<int64_t>() : 0) + v;
}

}  // namespace

// The mean of `samples` (each parsed from its text; unreadable ones skipped).
Json AverageSamples(const std::vector<Json>& samples) {
  Json acc = Json::object();
  for (const Json& s : samples) AddInto(acc, s);
  if (!samples.empty()) DivideBy(acc, static_cast<int64_t>(samples.size()));
  acc["samples"] = static_cast<int64_t>(samples.size());
  return acc;
}

std::string UtilizationSample(const ReadModel& m) {
  Json s = {{"gpu_milli_total", 0},
            {"gpu_memory_mib_total", 0},
            {"cpu_milli_total", 0},
            {"gpu_milli_allocated", 0},
            {"gpu_memory_mib_allocated", 0},
            {"cpu_milli_allocated", 0},
            {"gpu_milli_held_idle", 0},
            {"workers", 0},
            {"pending", 0}};
  Json by = {{"group", Json::object()}, {"queue", Json::object()}, {"pool", Json::object()}};
  for (const auto& [name, n] : m.nodes) {
    if (n.lost) continue;
    const std::string pool = n.pool.empty() ? "default" : n.pool;
    MiB mem = 0;
    for (const auto& d : n.devices) mem += d.memory_mib;
    const int64_t gpus = static_cast<int64_t>(n.devices.size()) * kWholeGpu;
    Bump(s, "gpu_milli_total", gpus);
    Bump(s, "gpu_memory_mib_total", mem);
    Bump(s, "cpu_milli_total", n.cpu_milli);
    Json& p = by["pool"][pool];
    Bump(p, "gpu_milli_total", gpus);
    Bump(p, "gpu_memory_mib_total", mem);
    Bump(p, "cpu_milli_total", n.cpu_milli);
  }
  m.jobs.ForEachLive([&](const Job& j) {
    Json* rows[2] = {&by["group"][j.rec.group], &by["queue"][j.rec.queue]};
    if (j.state == JobState::kPending) {
      Bump(s, "pending", 1);
      for (Json* r : rows) Bump(*r, "pending", 1);
    }
    if (!Holds(j)) return;
    const bool running = j.state == JobState::kRunning;
    if (running) {
      Bump(s, "workers", 1);
      for (Json* r : rows) Bump(*r, "workers", 1);
    }
    for (const auto& g : j.grants) {  // external backends' jobs hold no grants here
      auto n = m.nodes.find(g.node);
      Json* pool = n == m.nodes.end()
                       ? nullptr
                       : &by["pool"][n->second.pool.empty() ? "default" : n->second.pool];
      for (Json* r : {rows[0], rows[1], pool, &s}) {
        if (r == nullptr) continue;
        Bump(*r, r == &s ? "gpu_milli_allocated" : "gpu_milli", g.compute);
        Bump(*r, r == &s ? "gpu_memory_mib_allocated" : "gpu_memory_mib", g.memory);
        Bump(*r, r == &s ? "cpu_milli_allocated" : "cpu_milli", g.cpu);
        if (running && j.agent.activity.idle) Bump(*r, "gpu_milli_held_idle", g.compute);
      }
      // The group's holding by form, so that idle is seen where it is: a whole card held but
      // idle, an idle share, an idle partition.
      Json& f = (*rows[0])["form"][j.form.empty() ? "other" : j.form];
      Bump(f, "gpu_milli", g.compute);
      Bump(f, "gpu_milli_held_idle", running && j.agent.activity.idle ? g.compute : 0);
    }
  });
  s["by"] = std::move(by);
  return s.dump();
}

// ---- Utilization history ------------------------------------------------------------------------

Result<Json> Views::Utilization(const Identity& who, const HistoryQuery& q) {
  if (who.role == Role::kAgent) return Status::PermissionDenied("agents cannot read utilization");
  if (!q.by.empty() && q.by != "group" && q.by != "queue" && q.by != "pool") {
    return Status::InvalidArgument("'by' must be group, queue or pool, not '" + q.by.substr(0, 32) +
                                   "'");
  }
  const int64_t now = ledger_.NowMs();
  const int64_t until = q.until_ms > 0 ? q.until_ms : now + 1;
  const int64_t since = q.since_ms > 0 ? q.since_ms : until - 3600 * 1000;
  if (since >= until) return Status::InvalidArgument("'since' must be before 'until'");
  // Fine samples while the range lies within what they keep and the step asks for no coarser;
  // 5-minute averages otherwise.
  const bool fine = since >= now - config_.history.utilization_fine_keep_ms &&
                    (q.step_ms == 0 || q.step_ms < kCoarseMs);
  const int64_t resolution =
      fine ? std::max<int64_t>(1000, config_.history.utilization_sample_ms / 1000 * 1000)
           : kCoarseMs;
  int64_t step = std::max(q.step_ms, resolution);
  if ((until - since) / step > 5000) step = (until - since) / 5000 + 1;  // at most ~5000 points
  auto rows = ledger_.DurableStore().ListSamples(static_cast<int>(resolution / 1000), since, until);
  if (!rows.ok()) return rows.status();
  std::map<int64_t, std::vector<Json>> buckets;
  for (const auto& r : *rows) {
    Json j = Json::parse(r.data, nullptr, false);
    if (j.is_object()) buckets[since + (r.time_ms - since) / step * step].push_back(std::move(j));
  }
  Json samples = Json::array();
  for (auto& [t, list] : buckets) {
    Json a = list.size() == 1 && step == resolution ? list[0] : AverageSamples(list);
    Json by = a.contains("by") ? a["by"] : Json::object();
    a.erase("by");
    if (!q.by.empty()) {
      Json part = by.value(q.by, Json::object());
      // Users see their groups' rows, and the rows of queues only their groups use (a queue's
      // total on a queue shared with another group would show that group's use).
      const auto mine = [&who](const std::string& group) {
        return std::find(who.groups.begin(), who.groups.end(), group) != who.groups.end();
      };
      if (who.role != Role::kAdmin && (q.by == "group" || q.by == "queue")) {
        for (auto it = part.begin(); it != part.end();) {
          bool shown = false;
          if (q.by == "group") {
            shown = mine(it.key());
          } else if (const quota::QueueSpec* qs = config_.FindQueue(it.key()); qs != nullptr) {
            shown = !qs->groups.empty() && std::all_of(qs->groups.begin(), qs->groups.end(), mine);
          }
          it = shown ? std::next(it) : part.erase(it);
        }
      }
      a["by"] = std::move(part);
    }
    a["time_ms"] = t;
    samples.push_back(std::move(a));
  }
  return Json{{"interval_ms", config_.history.utilization_sample_ms},
              {"resolution_ms", resolution},
              {"step_ms", step},
              {"since_ms", since},
              {"until_ms", until},
              {"by", q.by},
              {"samples", samples}};
}

// ---- Attribution --------------------------------------------------------------------------------

namespace {

struct Held {
  std::string job, key, slice;
  int64_t start = 0;
  int64_t idle_since = -1;  // held but idle since (-1: active)
  MilliGpu gpu = 0;
  MiB gpu_memory = 0;
  MilliCpu cpu = 0;
};

struct Totals {
  int64_t jobs = 0;
  Int128 gpu_milli_ms = 0, gpu_memory_mib_ms = 0, cpu_milli_ms = 0;  // held
  Int128 idle_gpu_milli_ms = 0, idle_gpu_memory_mib_ms = 0;          // of which idle
};

std::string Decimal(Int128 v, int64_t unit, int places) {
  // v / unit rounded down to `places` decimals, exactly.
  Int128 scale = 1;
  for (int i = 0; i < places; ++i) scale *= 10;
  const Int128 scaled = v * scale / unit;
  auto str = [](Int128 x) {
    std::string s;
    do {
      s.insert(s.begin(), static_cast<char>('0' + static_cast<int>(x % 10)));
      x /= 10;
    } while (x > 0);
    return s;
  };
  std::string frac = str(scaled % scale);
  while (static_cast<int>(frac.size()) < places) frac.insert(frac.begin(), '0');
  return str(scaled / scale) + (places > 0 ? "." + frac : "");
}

// Exact, whatever the size: an integer while it fits 64 bits (signed, else unsigned), else its
// decimal digits as a string (a year of 2,000 H200s passes 2^63 MiB-ms of GPU memory).
Json Int(Int128 v) {
  if (v >= INT64_MIN && v <= INT64_MAX) return Json(static_cast<int64_t>(v));
  if (v > 0 && v <= static_cast<Int128>(UINT64_MAX)) return Json(static_cast<uint64_t>(v));
  std::string digits;
  const bool negative = v < 0;
  Int128 x = negative ? -v : v;
  do {
    digits.insert(digits.begin(), static_cast<char>('0' + static_cast<int>(x % 10)));
    x /= 10;
  } while (x > 0);
  return Json(negative ? "-" + digits : digits);
}

// A row's (or the total's) figures: held and idle time, exactly, and in hours.
Json TotalsJson(const Totals& t) {
  return Json{
      {"jobs", t.jobs},
      {"gpu_milli_ms", Int(t.gpu_milli_ms)},
      {"gpu_memory_mib_ms", Int(t.gpu_memory_mib_ms)},
      {"cpu_milli_ms", Int(t.cpu_milli_ms)},
      {"idle_gpu_milli_ms", Int(t.idle_gpu_milli_ms)},
      {"idle_gpu_memory_mib_ms", Int(t.idle_gpu_memory_mib_ms)},
      {"gpu_hours", Decimal(t.gpu_milli_ms, int64_t{1000} * 3600 * 1000, 3)},
      {"gpu_hours_used",
       Decimal(t.gpu_milli_ms - t.idle_gpu_milli_ms, int64_t{1000} * 3600 * 1000, 3)},
      {"gpu_memory_gib_hours", Decimal(t.gpu_memory_mib_ms, int64_t{1024} * 3600 * 1000, 3)}};
}

// The attribution of held time in [since, until) to rows (key, slice) as the event log shows it
// (oldest event first): each hold from its job.placed to the event that ends it, its idle part
// from job.idle's since_ms to job.active or the end. Only jobs `who` may see are counted.
class UsageLedger {
 public:
  UsageLedger(const Identity& who, const std::string& by, int64_t since, int64_t until,
              store::StoreReader* store)
      : who_(who), by_(by), since_(since), until_(until), store_(store) {}

  // One job.* event; `closes`: it ends the job's hold on its grants.
  Status Observe(const store::Event& e, bool closes) {
    if (e.kind == "job.submitted") {
      Json d = Json::parse(e.data, nullptr, false);
      owners_[e.subject] = {e.actor, d.is_object() ? d.value("group", "") : "",
                            d.is_object() ? d.value("queue", "") : ""};
      return Status::Ok();
    }
    auto it = open_.find(e.subject);
    if (closes || e.kind == "job.placed") {
      if (it != open_.end()) {
        Account(it->second, e.time_ms);
        open_.erase(it);
      }
      return closes ? Status::Ok() : Placed(e);
    }
    if (it == open_.end()) return Status::Ok();
    Json d = Json::parse(e.data, nullptr, false);
    if (e.kind == "job.idle" && d.is_object()) {
      it->second.idle_since = d.value("since_ms", e.time_ms);
    } else if (e.kind == "job.active" && it->second.idle_since >= 0) {
      // The idle stretch ends here: account it as its own piece, then go on active.
      Held idle = it->second;
      Account(idle, e.time_ms);
      it->second.start = e.time_ms;
      it->second.idle_since = -1;
    }
    return Status::Ok();
  }

  // Accounts the holds still open up to the window's end.
  void CloseAll() {
    for (const auto& [id, h] : open_) Account(h, until_);
  }

  const std::map<std::pair<std::string, std::string>, Totals>& totals() const { return totals_; }

 private:
  struct Owner {
    std::string identity, group, queue;
  };

  bool Visible(const Owner& o) const {
    return who_.role == Role::kAdmin ||
           std::find(who_.groups.begin(), who_.groups.end(), o.group) != who_.groups.end();
  }

  // A job.placed: a hold opened on its grants, under its row.
  Status Placed(const store::Event& e) {
    Json d = Json::parse(e.data, nullptr, false);
    if (!d.is_object() || !d.contains("grants") || !d["grants"].is_array()) return Status::Ok();
    auto o = owners_.find(e.subject);
    if (o == owners_.end()) {  // submitted before the log's retained part: the record knows
      auto rec = store_->GetJob(e.subject);
      if (!rec.ok()) return rec.status();
      if (!*rec) return Status::Ok();
      o = owners_.emplace(e.subject, Owner{(*rec)->identity, (*rec)->group, (*rec)->queue}).first;
    }
    if (!Visible(o->second)) return Status::Ok();
    Held h;
    h.job = e.subject;
    h.start = e.time_ms;
    const std::string form = d.value("form", "");
    for (const auto& g : d["grants"]) {
      h.gpu += g.value("compute", int64_t{0});
      h.gpu_memory += g.value("memory", int64_t{0});
      h.cpu += g.value("cpu", int64_t{0});
    }
    h.key = by_ == "group"      ? o->second.group
            : by_ == "identity" ? o->second.identity
            : by_ == "queue"    ? o->second.queue
                                : form;
    if (by_ == "form") {
      const std::string slot = d["grants"].empty() ? "" : d["grants"][0].value("slot", "");
      h.slice = form == "partition" ? slot.substr(0, slot.find_first_of("@#"))
                : form == "share"   ? FormatMiB(h.gpu_memory)
                                    : std::to_string(h.gpu / kWholeGpu) + "x";
    }
    open_[e.subject] = h;
    return Status::Ok();
  }

  // Adds [from, to) of h, clipped to [since, until), to its row; the idle part from idle_since.
  void Account(const Held& h, int64_t to) {
    const int64_t a = std::max(h.start, since_), b = std::min(to, until_);
    if (b <= a) return;
    Totals& t = totals_[{h.key, h.slice}];
    if (counted_.insert(h.job + "\n" + h.key + "\n" + h.slice).second) ++t.jobs;
    t.gpu_milli_ms += Int128(h.gpu) * (b - a);
    t.gpu_memory_mib_ms += Int128(h.gpu_memory) * (b - a);
    t.cpu_milli_ms += Int128(h.cpu) * (b - a);
    if (h.idle_since >= 0) {
      const int64_t ia = std::max(h.idle_since, a);
      if (b > ia) {
        t.idle_gpu_milli_ms += Int128(h.gpu) * (b - ia);
        t.idle_gpu_memory_mib_ms += Int128(h.gpu_memory) * (b - ia);
      }
    }
  }

  const Identity& who_;
  const std::string& by_;
  const int64_t since_, until_;
  store::StoreReader* store_;
  std::map<std::string, Owner> owners_;
  std::map<std::string, Held> open_;                              // by job
  std::map<std::pair<std::string, std::string>, Totals> totals_;  // (key, slice)
  std::set<std::string> counted_;  // job, key, slice: each job counted once per row
};

}  // namespace

bool EndsHold(const std::string& kind) {
  return kind == "job.requeued" || kind == "job.succeeded" || kind == "job.failed" ||
         kind == "job.cancelled" || kind == "job.lost";
}

Status ForEachJobEvent(store::StoreReader& store,
                       const std::function<Status(const store::Event&)>& fn) {
  constexpr int kPage = 5000;
  for (int64_t after = 0;;) {
    auto page = store.ListEvents(after, kPage, store::EventFilter{"job.", "", ""});
    if (!page.ok()) return page.status();
    for (const store::Event& e : *page) {
      after = e.seq;
      if (Status st = fn(e); !st.ok()) return st;
    }
    if (page->size() < static_cast<size_t>(kPage)) return Status::Ok();
  }
}

Result<Json> Views::Usage(const Identity& who, const UsageQuery& q) {
  if (who.role == Role::kAgent) return Status::PermissionDenied("agents cannot read usage");
  if (q.by != "group" && q.by != "identity" && q.by != "queue" && q.by != "form") {
    return Status::InvalidArgument("'by' must be group, identity, queue or form, not '" +
                                   q.by.substr(0, 32) + "'");
  }
  const int64_t now = ledger_.NowMs();
  const int64_t until = q.until_ms > 0 ? std::min(q.until_ms, now) : now;
  const int64_t since = q.since_ms;
  if (since >= until)
    return Status::InvalidArgument("'since' must be before 'until' (and before now)");
  UsageLedger ledger(who, q.by, since, until, &ledger_.DurableStore());
  Status walked = ForEachJobEvent(ledger_.DurableStore(), [&](const store::Event& e) -> Status {
    return ledger.Observe(e, EndsHold(e.kind));
  });
  if (!walked.ok()) return walked;
  ledger.CloseAll();  // still held
  Json rows = Json::array();
  Totals all;
  for (const auto& [key, t] : ledger.totals()) {
    Json r = TotalsJson(t);
    r[q.by] = key.first;
    if (q.by == "form") r["slice"] = key.second;
    rows.push_back(std::move(r));
    all.jobs += t.jobs;
    all.gpu_milli_ms += t.gpu_milli_ms;
    all.gpu_memory_mib_ms += t.gpu_memory_mib_ms;
    all.cpu_milli_ms += t.cpu_milli_ms;
    all.idle_gpu_milli_ms += t.idle_gpu_milli_ms;
    all.idle_gpu_memory_mib_ms += t.idle_gpu_memory_mib_ms;
  }
  return Json{{"since_ms", since},
              {"until_ms", until},
              {"by", q.by},
              {"rows", rows},
              {"total", TotalsJson(all)}};
}

}  // namespace tessera::api
