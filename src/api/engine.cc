#include "api/engine.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include "model/quantity.h"
#include "partition/catalog.h"

namespace tessera::api {
namespace {

bool Terminal(const std::string& s) {
  return s == "succeeded" || s == "failed" || s == "cancelled" || s == "lost";
}

Result<std::vector<std::string>> StringList(const Json& j, const std::string& what) {
  std::vector<std::string> out;
  if (!j.is_array()) return Status::InvalidArgument(what + " must be a list of strings");
  for (const auto& e : j) {
    if (!e.is_string()) return Status::InvalidArgument(what + " must be a list of strings");
    out.push_back(e.get<std::string>());
  }
  return out;
}

// A quantity given as a string ("8GiB", "0.5") or a plain number.
Result<int64_t> Quantity(const Json& j, bool memory, const std::string& what) {
  std::string text;
  if (j.is_string()) {
    text = j.get<std::string>();
  } else if (j.is_number_integer() && j.get<int64_t>() >= 0) {
    if (memory) return Status::InvalidArgument(what + " needs a unit, e.g. \"8GiB\"");
    text = std::to_string(j.get<int64_t>());
  } else if (j.is_number_float() && !memory) {
    std::ostringstream ss;
    ss << j.get<double>();
    text = ss.str();
  } else {
    return Status::InvalidArgument(what + " must be a quantity string");
  }
  Result<int64_t> v = memory ? ParseMemoryMiB(text) : ParseMilli(text);
  if (!v.ok()) return Status::InvalidArgument(what + ": " + v.status().message());
  return v;
}

int64_t IdNumber(const std::string& id) {
  if (id.size() < 3 || id.rfind("j-", 0) != 0) return 0;
  auto v = ParseNonNegativeInt(id.substr(2));
  return v.ok() ? *v : 0;
}

}  // namespace

Engine::Engine(EngineConfig config, std::unique_ptr<store::Store> store, std::string data_dir,
               Clock clock)
    : config_(std::move(config)), store_(std::move(store)), data_dir_(std::move(data_dir)),
      clock_(std::move(clock)) {}

Result<std::unique_ptr<Engine>> Engine::Open(EngineConfig config, std::unique_ptr<store::Store> store,
                                             std::string data_dir, Clock clock) {
  std::error_code ec;
  std::filesystem::create_directories(data_dir + "/output", ec);
  if (ec) return Status::FailedPrecondition("cannot create '" + data_dir + "/output': " + ec.message());
  std::unique_ptr<Engine> e(new Engine(std::move(config), std::move(store), std::move(data_dir), std::move(clock)));
  for (const QueueConfig& q : e->config_.queues) {
    if (q.backend == "local" || e->backends_.count(q.backend)) continue;
    backends::BackendOptions options;
    options.command_nice = e->config_.backend_nice;
    auto b = backends::BuiltinRegistry().Make(q.backend, options);
    if (!b.ok()) return b.status();
    e->backends_[q.backend] = std::move(*b);
  }
  Status st = e->Load();
  if (!st.ok()) return st;
  return e;
}

store::Event Engine::MakeEvent(const std::string& actor, const std::string& kind,
                               const std::string& subject, const std::string& reason, Json data) const {
  store::Event ev;
  ev.time_ms = clock_();
  ev.actor = actor;
  ev.kind = kind;
  ev.subject = subject;
  ev.reason = reason;
  ev.data = data.dump();
  return ev;
}

Status Engine::Commit(std::vector<store::Event> events, const std::vector<const Job*>& jobs) {
  std::vector<store::JobRecord> recs;
  for (const Job* j : jobs) {
    store::JobRecord r = j->rec;
    r.spec = j->spec.dump();
    if (Holds(*j)) {
      Json p = {{"node", j->node},        {"devices", j->devices},   {"gpu_milli", j->gpu_milli},
                {"gpu_memory_mib", j->gpu_memory_mib}, {"cpu_milli", j->cpu_milli},
                {"memory_mib", j->memory_mib}, {"form", j->form}};
      if (!j->backend.empty()) {
        p["backend"] = j->backend;
        p["external_id"] = j->external_id;
        p["external_node"] = j->external_node;
        p["gres"] = j->gres;
        p["attempts"] = j->submit_attempts;
      }
      r.placement = p.dump();
    } else {
      r.placement = "";
    }
    recs.push_back(std::move(r));
  }
  return store_->Commit(events, recs, nullptr);
}

sched::Placement Engine::PlacementOf(const Job& j, int node_index) {
  sched::Placement p;
  p.node = node_index;
  p.cpu_milli = j.cpu_milli;
  p.memory_mib = j.memory_mib;
  p.gpu_milli = j.gpu_milli;
  p.gpu_memory_mib = j.gpu_memory_mib;
  p.device_count = static_cast<int>(j.devices.size());
  for (size_t k = 0; k < j.devices.size(); ++k) p.devices[k] = static_cast<int8_t>(j.devices[k]);
  return p;
}

bool Engine::Holds(const Job& j) const {
  return !j.node.empty() && (j.rec.state == "placed" || j.rec.state == "starting" || j.rec.state == "running");
}

Status Engine::Load() {
  std::lock_guard<std::mutex> lock(mu_);
  // Nodes the engine knew; each gets a fresh heartbeat window.
  auto names = store_->GetSetting("nodes");
  if (!names.ok()) return names.status();
  if (names->has_value()) {
    Json list = Json::parse(**names, nullptr, false);
    for (const auto& n : list) {
      auto inv = store_->GetSetting("node/" + n.get<std::string>());
      if (!inv.ok()) return inv.status();
      if (!inv->has_value()) continue;
      Json j = Json::parse(**inv, nullptr, false);
      if (j.is_discarded()) return Status::Internal("stored inventory of node '" + n.get<std::string>() + "' is corrupt");
      NodeInfo node;
      node.name = j.value("node", "");
      node.cpu_milli = j.value("cpu_milli", int64_t{0});
      node.memory_mib = j.value("memory_mib", int64_t{0});
      node.simulated = j.value("simulated", false);
      for (const auto& d : j.value("devices", Json::array())) {
        node.devices.push_back({d.value("index", 0), d.value("model", ""), d.value("memory_mib", int64_t{0}),
                                d.value("uuid", ""), d.value("simulated", false)});
      }
      node.last_heartbeat_ms = clock_();
      nodes_[node.name] = node;
    }
  }
  auto recs = store_->LoadJobs();
  if (!recs.ok()) return recs.status();
  for (store::JobRecord& r : *recs) {
    Job j;
    j.spec = Json::parse(r.spec, nullptr, false);
    if (j.spec.is_discarded()) return Status::Internal("stored spec of job '" + r.id + "' is corrupt");
    if (!r.placement.empty()) {
      Json p = Json::parse(r.placement, nullptr, false);
      if (p.is_discarded()) return Status::Internal("stored placement of job '" + r.id + "' is corrupt");
      j.node = p.value("node", "");
      j.devices = p.value("devices", std::vector<int>{});
      j.gpu_milli = p.value("gpu_milli", int64_t{0});
      j.gpu_memory_mib = p.value("gpu_memory_mib", int64_t{0});
      j.cpu_milli = p.value("cpu_milli", int64_t{0});
      j.memory_mib = p.value("memory_mib", int64_t{0});
      j.form = p.value("form", "");
      j.backend = p.value("backend", "");
      j.external_id = p.value("external_id", "");
      j.external_node = p.value("external_node", "");
      j.gres = p.value("gres", "");
      j.submit_attempts = p.value("attempts", 0);
      // Placed but with no id recorded: a submission may have happened just before a crash.
      j.lookup_first = !j.backend.empty() && j.external_id.empty();
    }
    j.cancel_requested = r.reason == "cancel requested";
    next_job_ = std::max(next_job_, IdNumber(r.id) + 1);
    order_.push_back(r.id);
    j.rec = std::move(r);
    if (!Ended(j)) live_.push_back(j.rec.id);
    jobs_[j.rec.id] = std::move(j);
  }
  sched_dirty_ = true;
  return RebuildScheduler();
}

Status Engine::RebuildScheduler() {
  std::vector<Node> nodes;
  sched_nodes_.clear();
  for (const auto& [name, n] : nodes_) {
    if (n.lost) continue;
    Node m;
    m.name = name;
    m.cpu_milli = n.cpu_milli;
    m.memory_mib = n.memory_mib;
    for (const auto& d : n.devices) m.devices.push_back(Device{d.index, d.model, d.memory_mib});
    nodes.push_back(std::move(m));
    sched_nodes_.push_back(name);
  }
  auto state = sched::ClusterState::FromNodes(nodes);
  if (!state.ok()) return state.status();
  auto policy = sched::MakePolicy(sched::kDefaultPolicy, {});
  if (!policy.ok()) return policy.status();
  sched_ = std::make_unique<sched::Scheduler>(std::move(*state), std::move(*policy), 42);
  group_usage_.clear();
  std::vector<Job*> held;
  ForLiveLocked([&](Job& j) {
    if (Holds(j)) held.push_back(&j);
  });
  // Submissions not yet landed (queued or being committed) count too: an external backend's job
  // admitted in its own submission holds its group's quota from then on.
  for (const auto* q : {&submit_batch_, &committing_batch_}) {
    for (const auto& b : *q) {
      if (b->job.rec.state == "placed") AddUsageLocked(b->job, +1);
    }
  }
  for (Job* jp : held) {
    Job& j = *jp;
    AddUsageLocked(j, +1);
    auto it = std::find(sched_nodes_.begin(), sched_nodes_.end(), j.node);
    if (it == sched_nodes_.end()) continue;  // on a lost node: handled by MarkLost
    const sched::Placement p = PlacementOf(j, static_cast<int>(it - sched_nodes_.begin()));
    Status st = sched_->Adopt(p);
    if (!st.ok()) {
      // A broken invariant: two held jobs claim the same capacity. Stop loudly.
      return Status::Internal("job '" + j.rec.id + "' cannot be re-reserved: " + st.message());
    }
  }
  sched_dirty_ = false;
  return Status::Ok();
}

bool Engine::CanSee(const Identity& who, const Job& j) const {
  if (who.role == Role::kAdmin) return true;
  if (who.role != Role::kUser) return false;
  return std::find(who.groups.begin(), who.groups.end(), j.rec.group) != who.groups.end();
}

std::string Engine::OutputPath(const std::string& job) const { return data_dir_ + "/output/" + job + ".log"; }

Json Engine::JobJson(const Job& j) const {
  Json o = {{"id", j.rec.id},         {"queue", j.rec.queue},   {"identity", j.rec.identity},
            {"group", j.rec.group},   {"state", j.rec.state},   {"reason", j.rec.reason},
            {"submit_ms", j.rec.submit_ms}, {"update_ms", j.rec.update_ms}, {"spec", j.spec}};
  if (j.rec.exit_code) o["exit_code"] = *j.rec.exit_code;
  if (!j.node.empty()) {
    Json devs = Json::array();
    auto n = nodes_.find(j.node);
    for (int d : j.devices) {
      Json dj = {{"index", d}};
      if (n != nodes_.end() && d < static_cast<int>(n->second.devices.size())) {
        dj["uuid"] = n->second.devices[d].uuid;
        dj["model"] = n->second.devices[d].model;
        dj["simulated"] = n->second.devices[d].simulated;
      }
      devs.push_back(dj);
    }
    o["placement"] = {{"node", j.node}, {"form", j.form}, {"devices", devs}, {"gpu_milli", j.gpu_milli},
                      {"gpu_memory_mib", j.gpu_memory_mib}, {"cpu_milli", j.cpu_milli},
                      {"memory_mib", j.memory_mib}};
  }
  if (!j.backend.empty()) {
    o["backend"] = {{"name", j.backend}, {"external_id", j.external_id}, {"node", j.external_node},
                    {"gres", j.gres}, {"state", j.native_state}, {"submit_attempts", j.submit_attempts}};
  }
  return o;
}

Result<Json> Engine::Submit(const Identity& who, const Json& body) {
  if (who.role == Role::kAgent) return Status::PermissionDenied("agents cannot submit jobs");
  if (!body.is_object()) return Status::InvalidArgument("the body must be a JSON object");
  static const std::set<std::string> kFields = {"queue", "command", "env", "name", "class", "form", "gpus",
                                                "gpu_memory", "gpu_fraction", "cpu", "memory", "group"};
  for (const auto& [k, v] : body.items()) {
    if (!kFields.count(k)) return Status::InvalidArgument("unknown field '" + k + "'");
  }
  if (!body.contains("queue") || !body["queue"].is_string()) return Status::InvalidArgument("'queue' is required");
  const std::string qname = body["queue"].get<std::string>();
  const QueueConfig* q = config_.FindQueue(qname);
  if (!q) return Status::InvalidArgument("unknown queue '" + qname + "'");
  const ProfileConfig* prof = config_.FindProfile(q->profile);
  // The group the job counts against: one of the caller's groups that the queue allows.
  std::string group;
  auto allowed = [&](const std::string& g) {
    bool in_queue = q->groups.empty() || std::find(q->groups.begin(), q->groups.end(), g) != q->groups.end();
    bool mine = who.role == Role::kAdmin || std::find(who.groups.begin(), who.groups.end(), g) != who.groups.end();
    return in_queue && mine && config_.FindGroup(g) != nullptr;
  };
  if (body.contains("group")) {
    if (!body["group"].is_string()) return Status::InvalidArgument("'group' must be a string");
    group = body["group"].get<std::string>();
    if (!allowed(group)) {
      return Status::PermissionDenied("'" + who.name + "' may not submit to queue '" + qname + "' as group '" + group + "'");
    }
  } else {
    for (const auto& g : who.role == Role::kAdmin ? q->groups : who.groups) {
      if (allowed(g)) {
        group = g;
        break;
      }
    }
    if (group.empty()) return Status::PermissionDenied("'" + who.name + "' may not submit to queue '" + qname + "'");
  }
  if (!body.contains("command")) return Status::InvalidArgument("'command' is required");
  auto cmd = StringList(body["command"], "'command'");
  if (!cmd.ok()) return cmd.status();
  if (cmd->empty() || (*cmd)[0].empty()) return Status::InvalidArgument("'command' must not be empty");
  Json env = Json::object();
  if (body.contains("env")) {
    if (!body["env"].is_object()) return Status::InvalidArgument("'env' must be an object of strings");
    for (const auto& [k, v] : body["env"].items()) {
      if (!v.is_string() || k.empty() || k.find('=') != std::string::npos) {
        return Status::InvalidArgument("'env' must map names to strings");
      }
      env[k] = v;
    }
  }
  std::string job_class = body.contains("class") && body["class"].is_string() ? body["class"].get<std::string>()
                                                                             : q->default_class;
  static const std::set<std::string> kClasses = {"training", "inference", "interactive", "ci", "batch"};
  if (!kClasses.count(job_class)) return Status::InvalidArgument("unknown class '" + job_class + "'");

  int gpus = prof->gpus;
  if (body.contains("gpus")) {
    if (!body["gpus"].is_number_integer() || body["gpus"].get<int64_t>() < 0) {
      return Status::InvalidArgument("'gpus' must be a non-negative integer");
    }
    gpus = static_cast<int>(body["gpus"].get<int64_t>());
  }
  // Quantities the body may override, each defaulting to the queue's profile.
  auto quantity = [&](const char* field, bool memory_unit, int64_t profile_value) -> Result<int64_t> {
    if (!body.contains(field)) return profile_value;
    return Quantity(body[field], memory_unit, std::string("'") + field + "'");
  };
  auto gpu_memory_r = quantity("gpu_memory", true, prof->gpu_memory_mib);
  if (!gpu_memory_r.ok()) return gpu_memory_r.status();
  auto cpu_r = quantity("cpu", false, prof->cpu_milli);
  if (!cpu_r.ok()) return cpu_r.status();
  auto memory_r = quantity("memory", true, prof->memory_mib);
  if (!memory_r.ok()) return memory_r.status();
  auto fraction_r = quantity("gpu_fraction", false, prof->gpu_milli);
  if (!fraction_r.ok()) return fraction_r.status();
  MiB gpu_memory = *gpu_memory_r;
  MilliCpu cpu = *cpu_r;
  MiB memory = *memory_r;
  MilliGpu fraction = *fraction_r;
  // Hardware partitions are granted only where a backend maps them (MIG GRES for Slurm/PBS).
  const bool mapped_partition = q->backend != "local" && (!q->gres_partition.empty() || !q->mig_model.empty());
  // The form: the one asked for if the profile allows it, else by class, in profile order.
  std::string form;
  auto profile_allows = [&](AllocationForm f) {
    return std::find(prof->forms.begin(), prof->forms.end(), f) != prof->forms.end();
  };
  if (body.contains("form")) {
    std::string f = body["form"].is_string() ? body["form"].get<std::string>() : "";
    AllocationForm af;
    if (f == "whole") {
      af = AllocationForm::kWhole;
    } else if (f == "share") {
      af = AllocationForm::kShare;
    } else if (f == "partition") {
      af = AllocationForm::kPartition;
    } else {
      return Status::InvalidArgument("unknown form '" + f + "' (whole, partition, share)");
    }
    if (!profile_allows(af)) {
      return Status::InvalidArgument("queue '" + qname + "' does not grant the form '" + f + "'");
    }
    form = f;
  } else if (gpus > 0) {
    std::vector<AllocationForm> pref = job_class == "training" ? std::vector<AllocationForm>{AllocationForm::kWhole}
                                       : job_class == "inference"
                                           ? std::vector<AllocationForm>{AllocationForm::kPartition, AllocationForm::kShare,
                                                                         AllocationForm::kWhole}
                                           : std::vector<AllocationForm>{AllocationForm::kShare, AllocationForm::kWhole};
    for (AllocationForm f : pref) {
      if (profile_allows(f) && (f != AllocationForm::kPartition || mapped_partition)) {
        form = AllocationFormName(f);
        break;
      }
    }
    if (form.empty()) {
      for (AllocationForm f : prof->forms) {
        if (f != AllocationForm::kPartition || mapped_partition) {
          form = AllocationFormName(f);
          break;
        }
      }
    }
    if (form.empty()) {
      return Status::InvalidArgument("queue '" + qname + "' grants only hardware partitions, which this engine "
                                     "does not place yet");
    }
  }
  if (form == "partition" && mapped_partition) {
    if (gpus != 1) return Status::InvalidArgument("a MIG instance is one slice of one device: 'gpus' must be 1");
  } else if (form == "partition") {
    return Status::InvalidArgument("hardware partitions are not placed by this engine yet; ask for a share or whole devices");
  }
  // The need must fit the profile.
  if (gpus > prof->max_gpus) {
    return Status::InvalidArgument("no profile allows " + std::to_string(gpus) + " GPUs on queue '" + qname +
                                   "' (at most " + std::to_string(prof->max_gpus) + ")");
  }
  if (form == "share") {
    if (gpus != 1) return Status::InvalidArgument("a share is a slice of one device: 'gpus' must be 1");
    if (gpu_memory <= 0) return Status::InvalidArgument("a share needs 'gpu_memory' (its cap)");
    if (gpu_memory > prof->max_gpu_memory_mib) {
      return Status::InvalidArgument("no profile allows " + FormatMiB(gpu_memory) + " of GPU memory on queue '" +
                                     qname + "' (at most " + FormatMiB(prof->max_gpu_memory_mib) + ")");
    }
    if (fraction == 0) fraction = 100;  // a statistical compute weight under time slicing
    if (fraction > kWholeGpu) return Status::InvalidArgument("'gpu_fraction' above 1");
  }
  if (cpu <= 0) return Status::InvalidArgument("'cpu' must be positive");

  // A MIG instance from the queue's model: the smallest profile with the memory and compute asked.
  const partition::MigProfile* mig = nullptr;
  int mig_compute_total = 0;
  if (form == "partition" && !q->mig_model.empty()) {
    const partition::GpuModel* model = partition::Catalog::BuiltIn().Find(q->mig_model);
    mig_compute_total = model->mig.compute_slices;
    // Asked by the body, or by the queue's profile.
    const bool memory_asked = gpu_memory > 0;
    const bool compute_asked = fraction > 0;
    for (const partition::MigProfile& p : model->mig.profiles) {
      if (p.media_extension) continue;
      if (memory_asked && p.memory_mib < gpu_memory) continue;
      if (compute_asked && int64_t{p.compute_slices} * kWholeGpu < fraction * mig_compute_total) continue;
      if (mig == nullptr || std::tie(p.memory_slices, p.compute_slices) < std::tie(mig->memory_slices, mig->compute_slices)) {
        mig = &p;
      }
    }
    if (mig == nullptr) {
      return Status::InvalidArgument("no MIG profile of " + model->name + " gives " +
                                     (memory_asked ? FormatMiB(gpu_memory) + " of GPU memory" : "") +
                                     (memory_asked && compute_asked ? " and " : "") +
                                     (compute_asked ? FormatMilli(fraction) + " of its compute" : "") + " (profiles: " +
                                     model->mig.ProfileNames() + ")");
    }
    // What the instance holds, for the group's limits: its compute share (rounded up) and memory.
    fraction = (int64_t{mig->compute_slices} * kWholeGpu + mig_compute_total - 1) / mig_compute_total;
    gpu_memory = mig->memory_mib;
  }
  if (form == "partition" && fraction == 0) fraction = 100;
  Json spec = {{"command", *cmd}, {"env", env}, {"class", job_class}, {"form", form}, {"gpus", gpus},
               {"gpu_memory_mib", form == "share" || mig != nullptr ? gpu_memory : 0},
               {"gpu_milli", form == "share" || form == "partition" ? fraction : 0},
               {"cpu_milli", cpu}, {"memory_mib", memory},
               {"name", body.contains("name") && body["name"].is_string() ? body["name"].get<std::string>() : ""}};
  if (mig != nullptr) spec["mig_profile"] = mig->name;

  std::unique_lock<std::mutex> lock(mu_);
  auto pending = std::make_shared<PendingSubmit>();
  Job& j = pending->job;
  j.rec.id = "j-" + std::to_string(next_job_++);
  j.rec.queue = qname;
  j.rec.identity = who.name;
  j.rec.group = group;
  j.rec.state = "pending";
  j.rec.submit_ms = j.rec.update_ms = clock_();
  j.spec = spec;
  pending->events = {MakeEvent(who.name, "job.submitted", j.rec.id, "", {{"queue", qname}, {"group", group}})};
  if (q->backend != "local") {
    // An external backend's job is admitted in the same commit when its group has room (one
    // durable write per submission); otherwise it waits as pending like any other. Its usage is
    // counted now, so later submissions in the same batch see it.
    sched::PlacementRequest r = RequestOf(j);
    if (OverLimitLocked(j, r).empty()) {
      AdmitExternalLocked(j, *q, r);
      pending->events.push_back(MakeEvent("engine", "job.placed", j.rec.id, j.rec.reason,
                                          {{"backend", j.backend}, {"node", j.node}, {"form", j.form}}));
      AddUsageLocked(j, +1);
    }
  }
  submit_batch_.push_back(pending);
  while (!pending->done) {
    if (committing_) {
      commit_cv_.wait(lock);
      continue;
    }
    // Lead: commit everything queued so far in one transaction, outside the mutex.
    committing_ = true;
    committing_batch_.swap(submit_batch_);
    const std::vector<std::shared_ptr<PendingSubmit>> batch = committing_batch_;
    std::vector<store::Event> events;
    std::vector<const Job*> recs;
    for (const auto& b : batch) {
      events.insert(events.end(), b->events.begin(), b->events.end());
      recs.push_back(&b->job);
    }
    lock.unlock();
    const Status st = Commit(std::move(events), recs);
    lock.lock();
    committing_ = false;
    committing_batch_.clear();
    std::vector<Job*> landed;
    for (const auto& b : batch) {
      b->done = true;
      b->status = st;
      if (!st.ok()) {
        if (b->job.rec.state == "placed") AddUsageLocked(b->job, -1);
        continue;
      }
      const std::string id = b->job.rec.id;
      order_.push_back(id);
      live_.push_back(id);
      landed.push_back(&(jobs_[id] = std::move(b->job)));
    }
    // The batch's local jobs are placed in one more transaction (acknowledged either way: a job
    // that could not be placed now waits as pending).
    (void)ScheduleLocked(&landed);
    for (size_t k = 0; k < landed.size(); ++k) batch[k]->reply = JobJson(*landed[k]);
    commit_cv_.notify_all();
  }
  if (!pending->status.ok()) return pending->status;
  return std::move(pending->reply);
}

Resources Engine::GroupUsageLocked(const std::string& group) const {
  auto it = group_usage_.find(group);
  return it == group_usage_.end() ? Resources{} : it->second;
}

void Engine::AddUsageLocked(const Job& j, int sign) {
  const int64_t devs = static_cast<int64_t>(j.devices.size());
  Resources r{j.gpu_milli * devs, j.gpu_memory_mib * devs, j.cpu_milli, j.memory_mib};
  Resources& u = group_usage_[j.rec.group];
  if (sign > 0) {
    u += r;
  } else {
    u -= r;
  }
}

sched::PlacementRequest Engine::RequestOf(const Job& j) const {
  const Json& s = j.spec;
  sched::PlacementRequest r;
  r.cpu_milli = s.value("cpu_milli", int64_t{0});
  r.memory_mib = s.value("memory_mib", int64_t{0});
  r.gpu_count = s.value("gpus", 0);
  const bool share = s.value("form", "") == "share";
  const bool slice = share || s.value("form", "") == "partition";
  r.gpu_milli = r.gpu_count == 0 ? 0 : slice ? s.value("gpu_milli", int64_t{100}) : kWholeGpu;
  r.gpu_memory_mib = slice ? s.value("gpu_memory_mib", int64_t{0}) : 0;
  return r;
}

std::string Engine::OverLimitLocked(const Job& j, const sched::PlacementRequest& r) const {
  const GroupConfig* g = config_.FindGroup(j.rec.group);
  if (!g) return "";
  Resources use = GroupUsageLocked(j.rec.group);
  Resources need{r.total_gpu_milli(), r.gpu_memory_mib * r.gpu_count, r.cpu_milli, r.memory_mib};
  std::string over;
  auto check = [&](int64_t used, int64_t add, int64_t limit, const char* what, bool mem) {
    if (limit != 0 && used + add > limit && over.empty()) {
      over = std::string(what) + " " + (mem ? FormatMiB(used) + "+" + FormatMiB(add) + " > " + FormatMiB(limit)
                                            : FormatMilli(used) + "+" + FormatMilli(add) + " > " + FormatMilli(limit));
    }
  };
  check(use.gpu_milli, need.gpu_milli, g->limit.gpu_milli, "gpu", false);
  check(use.gpu_memory_mib, need.gpu_memory_mib, g->limit.gpu_memory_mib, "gpu_memory", true);
  check(use.cpu_milli, need.cpu_milli, g->limit.cpu_milli, "cpu", false);
  check(use.memory_mib, need.memory_mib, g->limit.memory_mib, "memory", true);
  return over;
}

void Engine::AdmitExternalLocked(Job& j, const QueueConfig& q, const sched::PlacementRequest& r) {
  // Admitted: the external scheduler places it. It holds its group's quota from now on.
  j.backend = q.backend;
  j.node = q.backend + ":" + (q.partition.empty() ? q.name : q.partition);
  j.devices.clear();
  for (int k = 0; k < r.gpu_count; ++k) j.devices.push_back(k);
  j.gpu_milli = r.gpu_milli;
  j.gpu_memory_mib = r.gpu_memory_mib;
  j.cpu_milli = r.cpu_milli;
  j.memory_mib = r.memory_mib;
  j.form = j.spec.value("form", "");
  j.rec.state = "placed";
  j.rec.reason = "admitted; to be submitted to " + q.backend;
  j.rec.update_ms = clock_();
  j.next_submit_ms = 0;
}

Status Engine::ScheduleLocked(const std::vector<Job*>* only) {
  if (sched_dirty_) {
    Status st = RebuildScheduler();
    if (!st.ok()) return st;
    capacity_changed_ = true;
  }
  // A new submission adds demand and frees nothing: only it needs trying. A full pass runs when
  // capacity changed (a release, a node joining or returning).
  std::vector<Job*> pending;
  if (only != nullptr) {
    for (Job* j : *only) {
      if (j->rec.state == "pending") pending.push_back(j);
    }
  } else {
    if (!capacity_changed_) return Status::Ok();
    capacity_changed_ = false;
    ForLiveLocked([&](Job& j) {
      if (j.rec.state == "pending") pending.push_back(&j);
    });
  }
  // Order: queue priority, then submit order.
  std::stable_sort(pending.begin(), pending.end(), [&](const Job* a, const Job* b) {
    return config_.FindQueue(a->rec.queue)->priority > config_.FindQueue(b->rec.queue)->priority;
  });
  // Every placement of this pass is committed in one transaction at its end (before the lock is
  // released, so before any agent hears of it); its usage counts at once, so later jobs in the
  // pass see it. If the commit fails, every placement of the pass is undone.
  struct Placed {
    Job* job;
    std::optional<sched::Placement> local;  // what to release in the placement core
  };
  std::vector<Placed> placed;
  std::vector<store::Event> events;
  std::vector<const Job*> changed;
  for (Job* j : pending) {
    const Json& s = j->spec;
    sched::PlacementRequest r = RequestOf(*j);
    // Admission against the group's limit.
    std::string over = OverLimitLocked(*j, r);
    if (!over.empty()) {
      j->rec.reason = "waiting: group '" + j->rec.group + "' at its limit (" + over + ")";
      continue;
    }
    const QueueConfig* q = config_.FindQueue(j->rec.queue);
    if (q->backend != "local") {
      AdmitExternalLocked(*j, *q, r);
      events.push_back(MakeEvent("engine", "job.placed", j->rec.id, j->rec.reason,
                                 {{"backend", j->backend}, {"node", j->node}, {"form", j->form}}));
      changed.push_back(j);
      placed.push_back({j, std::nullopt});
      AddUsageLocked(*j, +1);
      continue;
    }
    sched::PlacementResult res = sched_->Place(r);
    if (!res.placed()) {
      j->rec.reason = std::string("waiting: ") + sched::OutcomeName(res.outcome) + " (" + res.step + "): " + res.reason;
      continue;
    }
    j->node = sched_nodes_[res.placement.node];
    j->devices.clear();
    for (int k = 0; k < res.placement.device_count; ++k) j->devices.push_back(res.placement.devices[k]);
    j->gpu_milli = res.placement.gpu_milli;
    j->gpu_memory_mib = res.placement.gpu_memory_mib;
    j->cpu_milli = res.placement.cpu_milli;
    j->memory_mib = res.placement.memory_mib;
    j->form = s.value("form", "");
    j->rec.state = "placed";
    j->rec.reason = "";
    j->rec.update_ms = clock_();
    events.push_back(MakeEvent("engine", "job.placed", j->rec.id, "",
                               {{"node", j->node}, {"devices", j->devices}, {"form", j->form}}));
    changed.push_back(j);
    placed.push_back({j, res.placement});
    AddUsageLocked(*j, +1);
  }
  if (placed.empty()) return Status::Ok();
  Status st = Commit(std::move(events), changed);
  if (!st.ok()) {
    for (Placed& p : placed) {
      Job& j = *p.job;
      AddUsageLocked(j, -1);
      if (p.local) sched_->Release(*p.local);
      j.node.clear();
      j.devices.clear();
      j.backend.clear();
      j.rec.state = "pending";
      j.rec.reason = "waiting: the placement could not be recorded: " + st.message();
    }
    capacity_changed_ = true;  // try again next pass
  }
  return st;
}

void Engine::ReleaseLocked(Job& j) {
  if (!Holds(j)) return;
  capacity_changed_ = true;
  AddUsageLocked(j, -1);
  auto it = std::find(sched_nodes_.begin(), sched_nodes_.end(), j.node);
  if (it != sched_nodes_.end() && sched_) {
    const sched::Placement p = PlacementOf(j, static_cast<int>(it - sched_nodes_.begin()));
    sched_->Release(p);
  }
}

Result<Json> Engine::ListJobs(const Identity& who, const std::string& state_filter, int limit) {
  if (who.role == Role::kAgent) return Status::PermissionDenied("agents cannot list jobs");
  std::lock_guard<std::mutex> lock(mu_);
  Json out = Json::array();
  for (auto it = order_.rbegin(); it != order_.rend() && static_cast<int>(out.size()) < limit; ++it) {
    const Job& j = jobs_[*it];
    if (!CanSee(who, j)) continue;
    if (!state_filter.empty() && j.rec.state != state_filter) continue;
    out.push_back(JobJson(j));
  }
  return Json{{"jobs", out}};
}

Result<Json> Engine::GetJob(const Identity& who, const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end() || !CanSee(who, it->second)) return Status::NotFound("no job '" + id + "'");
  return JobJson(it->second);
}

Result<Json> Engine::Cancel(const Identity& who, const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end() || !CanSee(who, it->second)) return Status::NotFound("no job '" + id + "'");
  Job& j = it->second;
  if (Terminal(j.rec.state)) return Status::FailedPrecondition("job '" + id + "' has already ended (" + j.rec.state + ")");
  if (j.rec.state == "pending" || j.rec.state == "placed") {
    ReleaseLocked(j);
    j.rec.state = "cancelled";
    j.rec.reason = "cancelled by " + who.name;
    j.node.clear();
    j.devices.clear();
  } else {
    j.cancel_requested = true;
    j.rec.reason = "cancel requested";
  }
  j.rec.update_ms = clock_();
  Status st = Commit({MakeEvent(who.name, j.rec.state == "cancelled" ? "job.cancelled" : "job.cancel_requested", id,
                                "by " + who.name)},
                     {&j});
  if (!st.ok()) return st;
  if (j.rec.state == "cancelled") (void)ScheduleLocked();
  return JobJson(j);
}

Result<std::string> Engine::JobOutput(const Identity& who, const std::string& id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end() || !CanSee(who, it->second)) return Status::NotFound("no job '" + id + "'");
  }
  std::ifstream in(OutputPath(id), std::ios::binary);
  std::stringstream ss;
  if (in) ss << in.rdbuf();
  return ss.str();
}

Result<Json> Engine::Queues(const Identity& who) {
  if (who.role == Role::kAgent) return Status::PermissionDenied("agents cannot list queues");
  Json out = Json::array();
  for (const auto& q : config_.queues) {
    bool usable = who.role == Role::kAdmin || q.groups.empty();
    for (const auto& g : who.groups) usable = usable || std::find(q.groups.begin(), q.groups.end(), g) != q.groups.end();
    if (!usable) continue;
    const ProfileConfig* p = config_.FindProfile(q.profile);
    Json forms = Json::array();
    for (auto f : p->forms) forms.push_back(AllocationFormName(f));
    out.push_back({{"name", q.name}, {"profile", q.profile}, {"groups", q.groups}, {"priority", q.priority},
                   {"preemptible", q.preemptible}, {"class", q.default_class}, {"backend", q.backend},
                   {"forms", forms}, {"gpus", p->gpus}, {"max_gpus", p->max_gpus},
                   {"gpu_memory_mib", p->gpu_memory_mib}, {"max_gpu_memory_mib", p->max_gpu_memory_mib},
                   {"cpu_milli", p->cpu_milli}, {"memory_mib", p->memory_mib}});
  }
  return Json{{"queues", out}};
}

Result<Json> Engine::Groups(const Identity& who) {
  if (who.role == Role::kAgent) return Status::PermissionDenied("agents cannot list groups");
  std::lock_guard<std::mutex> lock(mu_);
  Json out = Json::array();
  auto res = [](const Resources& r) {
    return Json{{"gpu_milli", r.gpu_milli}, {"gpu_memory_mib", r.gpu_memory_mib}, {"cpu_milli", r.cpu_milli},
                {"memory_mib", r.memory_mib}};
  };
  for (const auto& g : config_.groups) {
    if (who.role != Role::kAdmin && std::find(who.groups.begin(), who.groups.end(), g.name) == who.groups.end()) continue;
    out.push_back({{"name", g.name}, {"reservation", res(g.reservation)}, {"limit", res(g.limit)},
                   {"weight", g.weight}, {"usage", res(GroupUsageLocked(g.name))}});
  }
  return Json{{"groups", out}};
}

Result<Json> Engine::Nodes(const Identity& who) {
  if (who.role == Role::kAgent) return Status::PermissionDenied("agents cannot list nodes");
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, std::vector<const Job*>> held;  // by node
  ForLiveLocked([&](Job& j) {
    if (Holds(j)) held[j.node].push_back(&j);
  });
  Json out = Json::array();
  for (const auto& [name, n] : nodes_) {
    Json devs = Json::array();
    for (const auto& d : n.devices) {
      Json holders = Json::array();
      MilliGpu used = 0;
      MiB mem_used = 0;
      for (const Job* jp : held[name]) {
        const Job& j = *jp;
        if (std::find(j.devices.begin(), j.devices.end(), d.index) == j.devices.end()) continue;
        used += j.gpu_milli;
        mem_used += j.form == "share" ? j.gpu_memory_mib : d.memory_mib;
        Json h = {{"job", j.rec.id}, {"form", j.form}, {"gpu_milli", j.gpu_milli}};
        if (who.role == Role::kAdmin || CanSee(who, j)) {
          h["identity"] = j.rec.identity;
          h["group"] = j.rec.group;
        }
        if (j.form == "share") h["gpu_memory_mib"] = j.gpu_memory_mib;
        holders.push_back(h);
      }
      devs.push_back({{"index", d.index}, {"model", d.model}, {"memory_mib", d.memory_mib}, {"uuid", d.uuid},
                      {"simulated", d.simulated}, {"gpu_milli_used", used}, {"gpu_memory_mib_used", mem_used},
                      {"holders", holders}});
    }
    out.push_back({{"name", name}, {"cpu_milli", n.cpu_milli}, {"memory_mib", n.memory_mib},
                   {"simulated", n.simulated}, {"state", n.lost ? "lost" : "ready"},
                   {"last_heartbeat_ms", n.last_heartbeat_ms}, {"devices", devs}});
  }
  return Json{{"nodes", out}};
}

void Engine::SampleUtilizationLocked() {
  UtilizationSample s;
  s.time_ms = last_sample_ms_ = clock_();
  for (const auto& [name, n] : nodes_) {
    if (n.lost) continue;
    s.gpu_total += static_cast<int64_t>(n.devices.size()) * kWholeGpu;
    s.cpu_total += n.cpu_milli;
  }
  ForLiveLocked([&](Job& j) {
    if (j.rec.state == "pending") ++s.pending;
    if (j.rec.state == "running") ++s.workers;
    if (!Holds(j) || !j.backend.empty()) return;  // external backends' jobs use other clusters
    s.gpu_allocated += j.gpu_milli * static_cast<int64_t>(j.devices.size());
    s.cpu_allocated += j.cpu_milli;
  });
  utilization_.push_back(s);
  while (utilization_.size() > kMaxSamples) utilization_.pop_front();
}

Result<Json> Engine::Utilization(const Identity& who, int64_t since_ms) {
  if (who.role == Role::kAgent) return Status::PermissionDenied("agents cannot read utilization");
  std::lock_guard<std::mutex> lock(mu_);
  Json samples = Json::array();
  for (const UtilizationSample& s : utilization_) {
    if (s.time_ms <= since_ms) continue;
    samples.push_back({{"time_ms", s.time_ms}, {"gpu_milli_total", s.gpu_total}, {"gpu_milli_allocated", s.gpu_allocated},
                       {"cpu_milli_total", s.cpu_total}, {"cpu_milli_allocated", s.cpu_allocated},
                       {"workers", s.workers}, {"pending", s.pending}});
  }
  return Json{{"interval_ms", config_.utilization_sample_ms}, {"samples", samples}};
}

Result<Json> Engine::Summary(const Identity& who) {
  if (who.role == Role::kAgent) return Status::PermissionDenied("agents cannot read the summary");
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<const Job*> live;
  ForLiveLocked([&](Job& j) { live.push_back(&j); });
  Json groups = Json::array();
  for (const auto& g : config_.groups) {
    if (who.role != Role::kAdmin && std::find(who.groups.begin(), who.groups.end(), g.name) == who.groups.end()) continue;
    Resources held;
    int64_t gpus_idle = 0, workers = 0, pending = 0;
    for (const Job* jp : live) {
      const Job& j = *jp;
      if (j.rec.group != g.name) continue;
      if (j.rec.state == "pending") ++pending;
      if (!Holds(j)) continue;
      const int64_t devs = static_cast<int64_t>(j.devices.size());
      held.gpu_milli += j.gpu_milli * devs;
      held.cpu_milli += j.cpu_milli;
      held.memory_mib += j.memory_mib;
      if (j.rec.state == "running") {
        ++workers;
      } else {
        gpus_idle += j.gpu_milli * devs;  // held but not yet running
      }
    }
    groups.push_back({{"group", g.name}, {"gpu_milli_total", held.gpu_milli}, {"gpu_milli_idle", gpus_idle},
                      {"cpu_milli_total", held.cpu_milli}, {"memory_mib_total", held.memory_mib},
                      {"workers", workers}, {"pending", pending},
                      {"gpu_milli_limit", g.limit.gpu_milli}, {"gpu_milli_reservation", g.reservation.gpu_milli}});
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
    const Job& j = *jp;
    if (!Holds(j) || !j.backend.empty()) continue;  // external backends' jobs hold other clusters' GPUs
    allocated += j.gpu_milli * static_cast<int64_t>(j.devices.size());
    cpu_alloc += j.cpu_milli;
  }
  return Json{{"cluster", {{"gpu_milli_total", total}, {"gpu_milli_idle", total - allocated},
                           {"cpu_milli_total", cpu_total}, {"cpu_milli_idle", cpu_total - cpu_alloc},
                           {"nodes", nodes_ready}}},
              {"groups", groups}};
}

Result<Json> Engine::Events(const Identity& who, int64_t after, int limit, const store::EventFilter& f) {
  if (who.role == Role::kAgent) return Status::PermissionDenied("agents cannot read events");
  Json out = Json::array();
  int64_t cursor = after;
  // Users see the events of the jobs they can see and of nodes; page until `limit` such events.
  for (int round = 0; round < 50 && static_cast<int>(out.size()) < limit; ++round) {
    auto evs = store_->ListEvents(cursor, limit, f);
    if (!evs.ok()) return evs.status();
    if (evs->empty()) break;
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& e : *evs) {
      cursor = e.seq;
      bool visible = who.role == Role::kAdmin;
      if (!visible) {
        if (e.kind.rfind("node.", 0) == 0) {
          visible = true;
        } else {
          auto it = jobs_.find(e.subject);
          visible = it != jobs_.end() && CanSee(who, it->second);
        }
      }
      if (!visible) continue;
      Json data = Json::parse(e.data, nullptr, false);
      out.push_back({{"seq", e.seq}, {"time_ms", e.time_ms}, {"actor", e.actor}, {"kind", e.kind},
                     {"subject", e.subject}, {"reason", e.reason}, {"data", data.is_discarded() ? Json::object() : data}});
      if (static_cast<int>(out.size()) >= limit) break;
    }
  }
  return Json{{"events", out}, {"next", cursor}};
}

Result<Json> Engine::RegisterNode(const Identity& who, const Json& body) {
  if (who.role != Role::kAgent && who.role != Role::kAdmin) return Status::PermissionDenied("only agents register nodes");
  if (!body.is_object() || !body.contains("node") || !body["node"].is_string() || body["node"].get<std::string>().empty()) {
    return Status::InvalidArgument("'node' is required");
  }
  NodeInfo n;
  n.name = body["node"].get<std::string>();
  n.cpu_milli = body.value("cpu_milli", int64_t{0});
  n.memory_mib = body.value("memory_mib", int64_t{0});
  n.simulated = body.value("simulated", false);
  if (n.cpu_milli <= 0 || n.memory_mib <= 0) return Status::InvalidArgument("'cpu_milli' and 'memory_mib' must be positive");
  if (body.contains("devices")) {
    if (!body["devices"].is_array()) return Status::InvalidArgument("'devices' must be a list");
    for (const auto& d : body["devices"]) {
      if (!d.is_object()) return Status::InvalidArgument("each device must be an object");
      DeviceInfo di{d.value("index", 0), d.value("model", ""), d.value("memory_mib", int64_t{0}), d.value("uuid", ""),
                    d.value("simulated", false)};
      if (di.model.empty() || di.memory_mib <= 0) return Status::InvalidArgument("each device needs 'model' and 'memory_mib'");
      if (di.index != static_cast<int>(n.devices.size())) return Status::InvalidArgument("device indices must be 0, 1, 2, ...");
      n.devices.push_back(di);
    }
  }
  if (n.devices.size() > static_cast<size_t>(sched::kMaxDevices)) return Status::InvalidArgument("too many devices");
  std::lock_guard<std::mutex> lock(mu_);
  n.last_heartbeat_ms = clock_();
  Json inv = body;
  inv["node"] = n.name;
  auto names = store_->GetSetting("nodes");
  if (!names.ok()) return names.status();
  Json list = names->has_value() ? Json::parse(**names, nullptr, false) : Json::array();
  if (list.is_discarded()) list = Json::array();
  if (std::find(list.begin(), list.end(), Json(n.name)) == list.end()) list.push_back(n.name);
  Status st = store_->PutSetting("node/" + n.name, inv.dump());
  if (st.ok()) st = store_->PutSetting("nodes", list.dump());
  auto old = nodes_.find(n.name);
  std::vector<store::Event> events = {
      MakeEvent(who.name, "node.registered", n.name, "", {{"devices", n.devices.size()}, {"simulated", n.simulated}})};
  if (old != nodes_.end() && old->second.lost) {
    events.push_back(MakeEvent(who.name, "node.returned", n.name, "registered again after loss"));
  }
  if (st.ok()) st = Commit(events, {});
  if (!st.ok()) return st;
  bool changed = old == nodes_.end() || old->second.devices.size() != n.devices.size() || old->second.lost;
  nodes_[n.name] = n;
  if (changed) sched_dirty_ = true;
  (void)ScheduleLocked();
  return Json{{"ok", true}, {"heartbeat_ms", 1000}};
}

Result<Json> Engine::Heartbeat(const Identity& who, const Json& body) {
  if (who.role != Role::kAgent && who.role != Role::kAdmin) return Status::PermissionDenied("only agents heartbeat");
  if (!body.is_object() || !body.contains("node") || !body["node"].is_string()) return Status::InvalidArgument("'node' is required");
  const std::string node = body["node"].get<std::string>();
  std::lock_guard<std::mutex> lock(mu_);
  auto nit = nodes_.find(node);
  if (nit == nodes_.end()) return Status::NotFound("node '" + node + "' is not registered");
  NodeInfo& n = nit->second;
  n.last_heartbeat_ms = clock_();
  std::vector<store::Event> events;
  std::vector<const Job*> changed;
  const std::string actor = "agent:" + node;
  if (n.lost) {
    n.lost = false;
    sched_dirty_ = true;
    events.push_back(MakeEvent(actor, "node.returned", node, "heartbeat after loss"));
  }
  Json ack = Json::array();
  for (const auto& f : body.value("finished", Json::array())) {
    const std::string id = f.value("job", "");
    ack.push_back(id);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) continue;
    Job& j = it->second;
    if (j.node != node || !Holds(j)) continue;
    const int code = f.value("exit_code", -1);
    const int sig = f.value("signal", 0);
    ReleaseLocked(j);
    j.rec.state = j.cancel_requested ? "cancelled" : (code == 0 && sig == 0 ? "succeeded" : "failed");
    j.rec.exit_code = code;
    j.rec.reason = sig != 0 ? "killed by signal " + std::to_string(sig) : (code == 0 ? "" : "exit code " + std::to_string(code));
    if (j.cancel_requested) j.rec.reason = "cancelled";
    j.rec.update_ms = clock_();
    events.push_back(MakeEvent(actor, "job." + j.rec.state, id, j.rec.reason, {{"exit_code", code}, {"signal", sig}}));
    changed.push_back(&j);
  }
  for (const auto& r : body.value("running", Json::array())) {
    auto it = jobs_.find(r.value("job", ""));
    if (it == jobs_.end()) continue;
    Job& j = it->second;
    if (j.node != node) continue;
    j.pid = r.value("pid", int64_t{0});
    if (j.rec.state == "starting" || j.rec.state == "placed") {
      j.rec.state = "running";
      j.rec.update_ms = clock_();
      events.push_back(MakeEvent(actor, "job.running", j.rec.id, "", {{"pid", j.pid}}));
      changed.push_back(&j);
    }
  }
  Json start = Json::array(), cancel = Json::array(), may_run = Json::array();
  for (const std::string& id : LiveIdsLocked()) {
    Job& j = jobs_[id];
    if (j.node != node || !Holds(j)) continue;
    if (j.rec.state == "placed") {
      Json devs = Json::array();
      for (int d : j.devices) {
        devs.push_back({{"index", d}, {"uuid", d < static_cast<int>(n.devices.size()) ? n.devices[d].uuid : ""}, {"mig", ""}});
      }
      Json env = j.spec.value("env", Json::object());
      env["TESSERA_QUEUE"] = j.rec.queue;
      env["TESSERA_GROUP"] = j.rec.group;
      env["TESSERA_IDENTITY"] = j.rec.identity;
      start.push_back({{"job", id}, {"command", j.spec["command"]}, {"env", env}, {"cpu_milli", j.cpu_milli},
                       {"memory_mib", j.memory_mib}, {"devices", devs},
                       {"gpu_memory_limit_bytes", j.form == "share" ? j.gpu_memory_mib * 1024 * 1024 : 0}});
      j.rec.state = "starting";
      j.rec.update_ms = clock_();
      events.push_back(MakeEvent("engine", "job.starting", id, "", {{"node", node}}));
      changed.push_back(&j);
    } else {
      may_run.push_back(id);
      if (j.cancel_requested) cancel.push_back({{"job", id}, {"grace_ms", config_.cancel_grace_ms}});
    }
  }
  if (!events.empty()) {
    Status st = Commit(events, changed);
    if (!st.ok()) return st;  // the agent retries; nothing was started
  }
  if (sched_dirty_ || !ack.empty()) (void)ScheduleLocked();
  return Json{{"start", start}, {"cancel", cancel}, {"may_run", may_run}, {"ack", ack}};
}

Status Engine::WriteOutput(const Identity& who, const std::string& job, int64_t offset, const std::string& bytes) {
  if (who.role != Role::kAgent && who.role != Role::kAdmin) return Status::PermissionDenied("only agents upload output");
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!jobs_.count(job)) return Status::NotFound("no job '" + job + "'");
  }
  int fd = ::open(OutputPath(job).c_str(), O_WRONLY | O_CREAT, 0640);
  if (fd < 0) return Status::Internal("cannot open output of '" + job + "'");
  ssize_t n = ::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(offset));
  ::close(fd);
  if (n != static_cast<ssize_t>(bytes.size())) return Status::Internal("short write of output of '" + job + "'");
  return Status::Ok();
}

Status Engine::MarkLostLocked() {
  const int64_t now = clock_();
  for (auto& [name, n] : nodes_) {
    if (n.lost || now - n.last_heartbeat_ms < config_.heartbeat_timeout_ms) continue;
    n.lost = true;
    std::vector<store::Event> events = {MakeEvent("engine", "node.lost", name, "no heartbeat for " +
                                                  std::to_string((now - n.last_heartbeat_ms) / 1000) + "s")};
    std::vector<const Job*> changed;
    for (const std::string& id : LiveIdsLocked()) {
      Job& j = jobs_[id];
      if (j.node != name || !Holds(j)) continue;
      const QueueConfig* q = config_.FindQueue(j.rec.queue);
      ReleaseLocked(j);
      j.node.clear();
      j.devices.clear();
      if (q && q->requeue_on_loss && !j.cancel_requested) {
        j.rec.state = "pending";
        j.rec.reason = "requeued: node '" + name + "' lost";
        events.push_back(MakeEvent("engine", "job.requeued", id, j.rec.reason));
      } else {
        j.rec.state = "lost";
        j.rec.reason = "node '" + name + "' lost";
        events.push_back(MakeEvent("engine", "job.lost", id, j.rec.reason));
      }
      j.rec.update_ms = now;
      changed.push_back(&j);
    }
    sched_dirty_ = true;
    Status st = Commit(events, changed);
    if (!st.ok()) return st;
  }
  return Status::Ok();
}

Status Engine::Tick() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    Status st = MarkLostLocked();
    if (!st.ok()) return st;
    st = ScheduleLocked();
    if (!st.ok()) return st;
    if (last_sample_ms_ == 0 || clock_() - last_sample_ms_ >= config_.utilization_sample_ms) SampleUtilizationLocked();
  }
  return BackendTick();
}

Status Engine::CheckInvariants() {
  std::lock_guard<std::mutex> lock(mu_);
  if (sched_) {
    Status st = sched_->state().CheckInvariants();
    if (!st.ok()) return st;
  }
  // Per device: compute and share memory within capacity.
  std::map<std::pair<std::string, int>, std::pair<MilliGpu, MiB>> use;
  for (const auto& [id, j] : jobs_) {
    if (!Holds(j) || !j.backend.empty()) continue;  // external jobs hold no agent device
    for (int d : j.devices) {
      auto& u = use[{j.node, d}];
      u.first += j.gpu_milli;
      u.second += j.gpu_memory_mib;
    }
  }
  for (const auto& [key, u] : use) {
    auto n = nodes_.find(key.first);
    if (n == nodes_.end() || key.second >= static_cast<int>(n->second.devices.size())) {
      return Status::Internal("a job holds unknown device " + key.first + "/" + std::to_string(key.second));
    }
    if (u.first > kWholeGpu || u.second > n->second.devices[key.second].memory_mib) {
      return Status::Internal("device " + key.first + "/" + std::to_string(key.second) + " is over capacity");
    }
  }
  // The incremental usage agrees with the jobs' own holdings.
  std::map<std::string, Resources> recount;
  for (const auto& [id, j] : jobs_) {
    if (!Holds(j)) continue;
    const int64_t devs = static_cast<int64_t>(j.devices.size());
    recount[j.rec.group] += Resources{j.gpu_milli * devs, j.gpu_memory_mib * devs, j.cpu_milli, j.memory_mib};
  }
  for (const auto& g : config_.groups) {
    if (!(recount[g.name] == GroupUsageLocked(g.name))) {
      return Status::Internal("group '" + g.name + "' usage drifted from its jobs' holdings");
    }
  }
  for (const auto& g : config_.groups) {
    Resources r = GroupUsageLocked(g.name);
    if ((g.limit.gpu_milli && r.gpu_milli > g.limit.gpu_milli) || (g.limit.cpu_milli && r.cpu_milli > g.limit.cpu_milli)) {
      return Status::Internal("group '" + g.name + "' is over its limit");
    }
  }
  return Status::Ok();
}

backends::JobRequest Engine::RequestFor(const Job& j) const {
  backends::JobRequest r;
  r.id = j.rec.id;
  r.name = ExternalName(j.rec.id);
  for (const auto& a : j.spec.value("command", Json::array())) r.command.push_back(a.get<std::string>());
  const Json env = j.spec.value("env", Json::object());
  for (const auto& [k, v] : env.items()) r.env[k] = v.get<std::string>();
  r.env["TESSERA_QUEUE"] = j.rec.queue;
  r.env["TESSERA_GROUP"] = j.rec.group;
  r.env["TESSERA_IDENTITY"] = j.rec.identity;
  r.form = j.spec.value("form", "");
  r.gpus = j.spec.value("gpus", 0);
  r.gpu_memory_mib = j.spec.value("gpu_memory_mib", int64_t{0});
  r.mig_profile = j.spec.value("mig_profile", "");
  r.cpu_milli = j.spec.value("cpu_milli", int64_t{1000});
  r.memory_mib = j.spec.value("memory_mib", int64_t{1024});
  std::error_code ec;
  auto abs = std::filesystem::absolute(OutputPath(j.rec.id), ec);
  r.output_path = ec ? OutputPath(j.rec.id) : abs.string();
  if (const QueueConfig* q = config_.FindQueue(j.rec.queue)) {
    r.mapping.partition = q->partition;
    r.mapping.template_path = q->template_path;
    r.mapping.gpu_type = q->gpu_type;
    r.mapping.gres_whole = q->gres_whole;
    r.mapping.gres_share = q->gres_share;
    r.mapping.gres_partition = q->gres_partition;
    r.mapping.shard_mib = q->shard_mib;
    r.mapping.cap_library = q->cap_library;
  }
  return r;
}

Status Engine::BackendTick() {
  if (backends_.empty()) return Status::Ok();
  std::unique_lock<std::mutex> serial(backend_mu_, std::try_to_lock);
  if (!serial.owns_lock()) return Status::Ok();  // another pass is running
  const std::string prefix = ExternalName("");

  // 1. Reconciliation, once after open (retried each pass until the schedulers answer).
  bool reconcile_now = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    reconcile_now = !reconciled_;
  }
  if (reconcile_now) {
    std::map<std::string, Result<std::vector<backends::ExternalJob>>> lists;
    bool all_ok = true;
    for (auto& [name, b] : backends_) {
      lists.emplace(name, b->List(prefix));
      all_ok = all_ok && lists.at(name).ok();
    }
    if (all_ok) {
      std::vector<std::pair<backends::Backend*, std::string>> to_cancel;
      std::vector<store::Event> events;
      std::vector<const Job*> changed;
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (auto& [name, list] : lists) {
          for (const backends::ExternalJob& x : *list) {
            const std::string id = x.name.substr(prefix.size());
            const bool active = x.state == "pending" || x.state == "running";
            auto it = jobs_.find(id);
            if (it == jobs_.end() || it->second.backend != name) {
              if (active) {
                to_cancel.push_back({backends_[name].get(), x.external_id});
                events.push_back(MakeEvent("engine", "backend.orphan_cancelled", id,
                                           name + " job " + x.external_id + " has no Tessera job",
                                           {{"backend", name}, {"external_id", x.external_id}}));
              }
              continue;
            }
            Job& j = it->second;
            if (j.external_id == x.external_id) continue;
            if (j.rec.state == "placed" && j.external_id.empty()) {
              j.external_id = x.external_id;
              j.lookup_first = false;
              j.rec.state = "starting";
              j.rec.reason = "adopted " + name + " job " + x.external_id + " after a restart";
              j.rec.update_ms = clock_();
              events.push_back(MakeEvent("engine", "job.adopted", id, j.rec.reason,
                                         {{"backend", name}, {"external_id", x.external_id}}));
              changed.push_back(&j);
            } else if (active) {
              // Ended in Tessera, or a second submission: the record wins.
              to_cancel.push_back({backends_[name].get(), x.external_id});
              events.push_back(MakeEvent("engine", "backend.duplicate_cancelled", id,
                                         name + " job " + x.external_id + " is not the one recorded",
                                         {{"backend", name}, {"external_id", x.external_id}}));
            }
          }
        }
        // Every unsubmitted job not found above was never submitted: safe to submit.
        for (auto& [id, j] : jobs_) {
          if (!j.backend.empty() && j.external_id.empty()) j.lookup_first = false;
        }
        reconciled_ = true;
        if (!events.empty()) {
          Status st = Commit(events, changed);
          if (!st.ok()) return st;
        }
      }
      for (auto& [b, ext] : to_cancel) (void)b->Cancel(ext);
    }
  }

  // 2. What to do this pass.
  struct SubmitWork {
    std::string id;
    backends::Backend* b;
    backends::JobRequest req;
    bool lookup;
  };
  std::vector<SubmitWork> submits;
  std::map<std::string, std::vector<std::string>> polls;  // backend -> external ids
  std::vector<std::pair<backends::Backend*, std::string>> cancels;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t now = clock_();
    const bool poll_due = now - last_poll_ms_ >= config_.backend_poll_ms;
    if (poll_due) last_poll_ms_ = now;
    for (const std::string& id : LiveIdsLocked()) {
      Job& j = jobs_[id];
      if (j.backend.empty() || !Holds(j)) continue;
      backends::Backend* b = backends_[j.backend].get();
      if (j.rec.state == "placed" && j.external_id.empty()) {
        if (now >= j.next_submit_ms && (reconciled_ || !j.lookup_first)) {
          submits.push_back({id, b, RequestFor(j), j.lookup_first});
        }
      } else if (!j.external_id.empty()) {
        if (j.cancel_requested && !j.cancel_sent) {
          cancels.push_back({b, j.external_id});
          j.cancel_sent = true;
        }
        if (poll_due) polls[j.backend].push_back(j.external_id);
      }
    }
  }
  if (submits.empty() && polls.empty() && cancels.empty()) return Status::Ok();

  // 3. The scheduler's commands, without the engine's lock.
  for (auto& [b, ext] : cancels) (void)b->Cancel(ext);
  struct SubmitDone {
    std::string id;
    std::string external_id;
    Status status;
    bool permanent = false;  // the job cannot be rendered: it fails rather than retries
    bool adopted = false;
  };
  std::vector<SubmitDone> done;
  for (SubmitWork& w : submits) {
    SubmitDone d{w.id, "", Status::Ok()};
    if (w.lookup) {
      auto found = w.b->List(w.req.name);
      if (!found.ok()) {
        d.status = found.status();
        done.push_back(d);
        continue;
      }
      for (const auto& x : *found) {
        if (x.name == w.req.name) {
          d.external_id = x.external_id;
          d.adopted = true;
        }
      }
    }
    if (!d.adopted) {
      auto script = w.b->Render(w.req);
      if (!script.ok()) {
        d.status = script.status();
        d.permanent = true;
      } else {
        auto ext = w.b->Submit(w.req, *script);
        if (ext.ok()) {
          d.external_id = *ext;
        } else {
          d.status = ext.status();
        }
      }
    }
    done.push_back(d);
  }
  std::map<std::string, Result<std::map<std::string, backends::ExternalJob>>> polled;
  for (auto& [name, ids] : polls) polled.emplace(name, backends_[name]->Poll(ids));

  // 4. Record what happened.
  std::vector<std::pair<backends::Backend*, std::string>> late_cancels;
  std::vector<store::Event> events;
  std::vector<const Job*> changed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t now = clock_();
    for (const SubmitDone& d : done) {
      Job& j = jobs_[d.id];
      if (d.status.ok()) {
        if (j.rec.state != "placed" || !j.external_id.empty()) {
          // Cancelled while the submission ran.
          if (!d.external_id.empty()) late_cancels.push_back({backends_[j.backend].get(), d.external_id});
          continue;
        }
        j.external_id = d.external_id;
        j.lookup_first = false;
        j.rec.state = "starting";
        j.rec.reason = (d.adopted ? "adopted " : "submitted to ") + j.backend + " as job " + d.external_id;
        j.rec.update_ms = now;
        events.push_back(MakeEvent("engine", "job.starting", d.id, j.rec.reason,
                                   {{"backend", j.backend}, {"external_id", d.external_id}}));
        changed.push_back(&j);
      } else if (j.rec.state == "placed") {
        if (d.permanent) {
          ReleaseLocked(j);
          j.rec.state = "failed";
          j.rec.reason = "cannot render the batch script: " + d.status.message();
          j.node.clear();
          j.devices.clear();
          j.rec.update_ms = now;
          events.push_back(MakeEvent("engine", "job.failed", d.id, j.rec.reason));
          changed.push_back(&j);
          continue;
        }
        ++j.submit_attempts;
        const int64_t backoff = std::min<int64_t>(60000, int64_t{1000} << std::min(j.submit_attempts - 1, 6));
        j.next_submit_ms = now + backoff;
        j.lookup_first = true;  // a failed or timed-out submission may still have gone through
        j.rec.reason = "admitted, not yet submitted to " + j.backend + " (attempt " + std::to_string(j.submit_attempts) +
                       ", next in " + std::to_string(backoff / 1000) + "s): " + d.status.message();
        j.rec.update_ms = now;
        events.push_back(MakeEvent("engine", "job.submit_failed", d.id, j.rec.reason,
                                   {{"backend", j.backend}, {"attempt", j.submit_attempts}}));
        changed.push_back(&j);
      }
    }
    std::map<std::string, std::set<std::string>> asked;  // backend -> the external ids polled
    for (const auto& [name, ids] : polls) asked[name].insert(ids.begin(), ids.end());
    for (auto& [name, res] : polled) {
      for (const std::string& id : LiveIdsLocked()) {
        Job& j = jobs_[id];
        if (j.backend != name || j.external_id.empty() || !Holds(j)) continue;
        if (!asked[name].count(j.external_id)) continue;
        if (!res.ok()) {
          j.rec.reason = "cannot follow " + name + " job " + j.external_id + ": " + res.status().message();
          continue;
        }
        auto it = res->find(j.external_id);
        if (it == res->end()) {
          if (++j.unknown_polls < 3) continue;
          ReleaseLocked(j);
          j.rec.state = "lost";
          j.rec.reason = name + " no longer knows job " + j.external_id;
          j.node.clear();
          j.devices.clear();
          j.rec.update_ms = now;
          events.push_back(MakeEvent("engine", "job.lost", id, j.rec.reason, {{"external_id", j.external_id}}));
          changed.push_back(&j);
          continue;
        }
        j.unknown_polls = 0;
        const backends::ExternalJob& x = it->second;
        j.native_state = x.native_state;
        if (!x.node.empty()) j.external_node = x.node;
        if (!x.gres.empty()) j.gres = x.gres;
        if (!x.devices.empty() && x.devices.size() == j.devices.size()) j.devices = x.devices;
        if (x.state == "pending") {
          j.rec.reason = name + " job " + j.external_id + ": " + x.native_state + (x.reason.empty() ? "" : " (" + x.reason + ")");
        } else if (x.state == "running") {
          if (j.rec.state != "running") {
            j.rec.state = "running";
            j.rec.reason = "";
            j.rec.update_ms = now;
            events.push_back(MakeEvent(name, "job.running", id, "",
                                       {{"external_id", j.external_id}, {"node", j.external_node}, {"gres", j.gres},
                                        {"devices", j.devices}}));
            changed.push_back(&j);
          }
        } else {
          ReleaseLocked(j);
          std::string state = x.state;
          if (j.cancel_requested && state != "succeeded") state = "cancelled";
          j.rec.state = state;
          j.rec.exit_code = x.exit_code;
          j.rec.reason = state == "cancelled" ? "cancelled"
                         : state == "succeeded" ? ""
                                                : name + " " + x.native_state +
                                                      (x.exit_code ? ", exit code " + std::to_string(*x.exit_code) : "") +
                                                      (x.signal ? ", signal " + std::to_string(x.signal) : "");
          j.rec.update_ms = now;
          events.push_back(MakeEvent(name, "job." + state, id, j.rec.reason,
                                     {{"external_id", j.external_id}, {"node", j.external_node},
                                      {"exit_code", x.exit_code ? *x.exit_code : -1}, {"signal", x.signal}}));
          changed.push_back(&j);
        }
      }
    }
    if (!events.empty()) {
      Status st = Commit(events, changed);
      if (!st.ok()) return st;
    }
    if (capacity_changed_) (void)ScheduleLocked();
  }
  for (auto& [b, ext] : late_cancels) (void)b->Cancel(ext);
  return Status::Ok();
}

}  // namespace tessera::api
