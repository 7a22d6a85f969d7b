// The quota engine: shared helpers, setup, submission and completion (see engine.h).
#include "sched/quota/engine_impl.h"

namespace tessera::quota::internal {

// Within `cap` on every component the charge uses.
bool Within(const Resources& usage, const Resources& charge, const Resources& cap,
            const char** which) {
  Resources after = usage + charge;
  if (charge.gpu_milli > 0 && after.gpu_milli > cap.gpu_milli) return *which = "gpu", false;
  if (charge.gpu_memory_mib > 0 && after.gpu_memory_mib > cap.gpu_memory_mib) {
    return *which = "gpu_memory", false;
  }
  if (charge.cpu_milli > 0 && after.cpu_milli > cap.cpu_milli) return *which = "cpu", false;
  if (charge.memory_mib > 0 && after.memory_mib > cap.memory_mib) return *which = "memory", false;
  return true;
}

bool WithinReservation(const Resources& usage, const Resources& charge, const Resources& res) {
  Resources after = usage + charge;
  bool named = false;
  auto check = [&](int64_t r, int64_t c, int64_t a) {
    if (r <= 0) return true;
    named = true;
    return c <= 0 || a <= r;
  };
  bool ok = check(res.gpu_milli, charge.gpu_milli, after.gpu_milli) &&
            check(res.gpu_memory_mib, charge.gpu_memory_mib, after.gpu_memory_mib) &&
            check(res.cpu_milli, charge.cpu_milli, after.cpu_milli) &&
            check(res.memory_mib, charge.memory_mib, after.memory_mib);
  return ok && named;
}

std::string Amount(const char* which, int64_t v) {
  std::string w = which;
  if (w == "gpu" || w == "cpu") return FormatMilli(v);
  return FormatMiB(v);
}
int64_t Component(const Resources& r, const std::string& w) {
  if (w == "gpu") return r.gpu_milli;
  if (w == "gpu_memory") return r.gpu_memory_mib;
  if (w == "cpu") return r.cpu_milli;
  return r.memory_mib;
}

std::string T(int64_t t) { return "t=" + std::to_string(t) + "s"; }

// ------------------------------------------------------------------------------------------
// Setup

Status Engine::Init(const PolicySpec& policy, const std::vector<NodeSpec>& nodes, EngineOptions o) {
  policy_ = policy;
  options_ = o;
  // Pools: declared ones; with none declared, every node pool offers every form.
  if (policy_.pools.empty()) {
    std::set<std::string> names;
    for (const NodeSpec& n : nodes) names.insert(n.pool.empty() ? "default" : n.pool);
    for (const std::string& n : names) {
      policy_.pools.push_back(
          {n, {AllocationForm::kWhole, AllocationForm::kPartition, AllocationForm::kShare}});
    }
  }
  if (policy_.pools.size() > 64) return Status::InvalidArgument("pools: at most 64");
  Status v = Validate(policy_);
  if (!v.ok()) return v;
  for (size_t i = 0; i < policy_.groups.size(); ++i) {
    group_index_[policy_.groups[i].name] = static_cast<int>(i);
  }
  for (size_t i = 0; i < policy_.groups.size(); ++i) {
    GroupRt g;
    g.spec = policy_.groups[i];
    g.parent = g.spec.parent.empty() ? -1 : group_index_[g.spec.parent];
    groups_.push_back(g);
  }
  for (size_t i = 0; i < groups_.size(); ++i) {
    if (groups_[i].parent >= 0) groups_[groups_[i].parent].children.push_back(static_cast<int>(i));
  }
  for (size_t i = 0; i < groups_.size(); ++i) {
    for (const MemberSpec& m : groups_[i].spec.members) MemberOf(static_cast<int>(i), m.identity);
  }
  for (size_t i = 0; i < policy_.queues.size(); ++i) {
    queue_index_[policy_.queues[i].name] = static_cast<int>(i);
  }
  for (size_t i = 0; i < policy_.profiles.size(); ++i) {
    profile_index_[policy_.profiles[i].name] = static_cast<int>(i);
  }
  if (Status m = InitModels(); !m.ok()) return m;  // quotas per GPU model (engine_models.cc)
  for (size_t i = 0; i < nodes.size(); ++i) {
    const NodeSpec& ns = nodes[i];
    std::string field = "nodes[" + (ns.name.empty() ? std::to_string(i) : ns.name) + "]";
    if (node_index_.count(ns.name)) return Status::InvalidArgument(field + ".name is used twice");
    Status s = AddNodeRt(ns, field);
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

int Engine::NodeByName(const std::string& name) const {
  auto it = node_index_.find(name);
  return it == node_index_.end() ? -1 : it->second;
}

Status Engine::AddNodeRt(const NodeSpec& ns, const std::string& field) {
  const part::Catalog& catalog = part::Catalog::BuiltIn();
  if (ns.name.empty()) return Status::InvalidArgument(field + ".name is empty");
  {
    std::string pool = ns.pool.empty() ? "default" : ns.pool;
    int pool_id = -1;
    for (size_t p = 0; p < policy_.pools.size(); ++p) {
      if (policy_.pools[p].name == pool) pool_id = static_cast<int>(p);
    }
    if (pool_id < 0) return Status::InvalidArgument(field + ".pool '" + pool + "' is not a pool");
    if (ns.cpu_milli < 0 || ns.memory_mib < 0 || ns.gpu_count < 0) {
      return Status::InvalidArgument(field + " has a negative amount");
    }
    // The cluster's totals are sums over nodes and devices: amounts past 2^40 (a billion cores,
    // an exbibyte) are refused rather than let the sums overflow.
    constexpr int64_t kMaxAmount = int64_t{1} << 40;
    if (ns.cpu_milli > kMaxAmount || ns.memory_mib > kMaxAmount || ns.gpu_memory_mib > kMaxAmount) {
      return Status::InvalidArgument(field + " has an amount above 2^40");
    }
    NodeRt n;
    n.name = ns.name;
    n.pool = pool_id;
    n.cpu_total = n.cpu_free = ns.cpu_milli;
    n.mem_total = n.mem_free = ns.memory_mib;
    const part::GpuModel* model = ns.gpu_model.empty() ? nullptr : catalog.Find(ns.gpu_model);
    MiB dev_mem = model ? model->memory_mib : ns.gpu_memory_mib;
    if (ns.gpu_memory_mib > 0) dev_mem = ns.gpu_memory_mib;
    if (ns.gpu_count > 0 && dev_mem <= 0) {
      return Status::InvalidArgument(field + ".gpu.model '" + ns.gpu_model +
                                     "' is not in the catalog; give gpu.memory");
    }
    if (!ns.mig_layout.empty() && !(model && model->is_mig())) {
      return Status::InvalidArgument(field + ".mig: model '" + ns.gpu_model +
                                     "' is not a MIG model");
    }
    if (!ns.amd_mode.empty() && !(model && model->is_amd())) {
      return Status::InvalidArgument(field + ".amd_mode: model '" + ns.gpu_model +
                                     "' is not an AMD model");
    }
    int node_id = static_cast<int>(nodes_.size());
    const int model_id = ns.gpu_count > 0 ? ModelId(model ? model->name : ns.gpu_model) : -1;
    if (ns.gpu_count > 0 && model_id < 0) {
      return Status::InvalidArgument(field + ".gpu.model '" + ns.gpu_model +
                                     "': at most 64 GPU models in one cluster");
    }
    n.model_id = model_id;
    // Every device is made before any is added: a refusal changes nothing.
    std::vector<Dev> made;
    for (int k = 0; k < ns.gpu_count; ++k) {
      Dev d;
      d.node = node_id;
      d.index = k;
      d.pool = pool_id;
      d.model = model;
      d.model_id = model_id;
      d.memory = dev_mem;
      if (Status split = SplitNewDevice(d, ns, field); !split.ok()) return split;
      made.push_back(std::move(d));
    }
    for (Dev& d : made) {
      gpu_memory_capacity_ += d.memory;
      gpu_capacity_ += kWholeGpu;
      n.devs.push_back(static_cast<int>(devs_.size()));
      devs_.push_back(std::move(d));
    }
    max_devs_per_node_ = std::max(max_devs_per_node_, ns.gpu_count);
    n.spec = ns;
    cpu_capacity_ += n.cpu_total;
    host_memory_capacity_ += n.mem_total;
    node_index_[ns.name] = node_id;
    nodes_.push_back(std::move(n));
    for (int d : nodes_.back().devs) Reindex(d);
    MirrorAddNode(node_id);
  }
  return Status::Ok();
}

Status Engine::SplitNewDevice(Dev& d, const NodeSpec& ns, const std::string& field) {
  const part::GpuModel* model = d.model;
  if (!ns.mig_layout.empty()) {
    auto plan = part::Plan(*model, ns.mig_layout);
    if (!plan.ok()) return Status::InvalidArgument(field + ".mig: " + plan.status().message());
    d.mig = d.split = true;
    for (const part::Instance& in : plan->layout.instances) {
      const part::MigProfile* p = model->mig.FindProfile(in.profile);
      d.slots.push_back({in.ToString(), p->name, in.start, p->memory_mib,
                         p->compute_slices * kWholeGpu / model->mig.compute_slices, -1, true,
                         p->memory_slices});
    }
  }
  if (d.amd_capable()) {
    std::string pair = ns.amd_mode.empty() ? "SPX+NPS1" : ns.amd_mode;
    auto parsed = part::ParsePair(*model, pair);
    if (!parsed.ok())
      return Status::InvalidArgument(field + ".amd_mode: " + parsed.status().message());
    auto shape = part::Partition(*model, *parsed);
    if (!shape.ok())
      return Status::InvalidArgument(field + ".amd_mode: " + shape.status().message());
    d.amd_pair = parsed->ToString();
    RebuildAmdSlots(d);
  }
  return Status::Ok();
}

void Engine::RebuildAmdSlots(Dev& d) {
  d.slots.clear();
  d.split = false;
  auto pair = part::ParsePair(*d.model, d.amd_pair);
  auto shape = part::Partition(*d.model, *pair);
  if (!shape.ok() || shape->partitions <= 1) return;
  d.split = true;
  for (int i = 0; i < shape->partitions; ++i) {
    d.slots.push_back({pair->compute + "#" + std::to_string(i), pair->compute, i,
                       shape->memory_per_partition_mib, kWholeGpu / shape->partitions, -1});
  }
}

int Engine::BestMigProfile(const part::GpuModel* m, MilliGpu milli, MiB mem) const {
  auto key = std::make_tuple(m, milli, mem);
  auto it = mig_profile_cache_.find(key);
  if (it != mig_profile_cache_.end()) return it->second;
  int best = -1;
  const auto& ps = m->mig.profiles;
  for (size_t i = 0; i < ps.size(); ++i) {
    const part::MigProfile& p = ps[i];
    if (p.media_extension) continue;
    MilliGpu compute = p.compute_slices * kWholeGpu / m->mig.compute_slices;
    if (compute < milli || p.memory_mib < mem) continue;
    if (best < 0 ||
        std::tie(p.memory_slices, p.compute_slices, p.memory_mib) <
            std::tie(ps[best].memory_slices, ps[best].compute_slices, ps[best].memory_mib)) {
      best = static_cast<int>(i);
    }
  }
  mig_profile_cache_[key] = best;
  return best;
}

// ------------------------------------------------------------------------------------------
// Submission, completion

// Why no device in the job's pools could ever hold it in any allowed form, even empty ("" when
// some could). Cached by request shape until the nodes change.
std::string Engine::NeverSchedulable(const Job& j) const {
  uint64_t form_bits = 0;
  for (AllocationForm f : j.forms) form_bits |= uint64_t{1} << static_cast<int>(f);
  // The queue too: the verdict names its models as it spells them.
  auto fkey = std::make_tuple(j.gpu_count, j.pools, static_cast<int>(form_bits), j.gpu_milli,
                              j.gpu_mem, j.queue_models, j.queue);
  auto cached = feasible_cache_.find(fkey);
  if (cached != feasible_cache_.end()) return cached->second;
  std::string& verdict = feasible_cache_[fkey];
  bool any = false;
  int devices_in_pools = 0;
  for (const Dev& d : devs_) {
    if (!Serves(j, d)) continue;
    ++devices_in_pools;
    for (AllocationForm f : j.forms) {
      if (!PoolAllows(d.pool, f)) continue;
      if (f == AllocationForm::kWhole && d.memory >= j.gpu_mem) any = true;
      if (f == AllocationForm::kShare && d.memory >= j.gpu_mem) any = true;
      if (f == AllocationForm::kPartition) {
        if (d.mig_capable() && BestMigProfile(d.model, j.gpu_milli, j.gpu_mem) >= 0) any = true;
        if (d.amd_capable()) {
          auto plan = part::PlanAmd(*d.model, {std::max<MiB>(j.gpu_mem, 1)});
          if (plan.ok()) any = true;
        }
      }
    }
  }
  // Devices in its pools that its queue's models leave out: the models said, and theirs (a new
  // user's queue of A100-80GB on H100s read only "no device in pools [default] can hold ...").
  std::set<std::string> others;
  for (const Dev& d : devs_) {
    if (InPools(j, d.pool) && !Serves(j, d) && d.model_id >= 0)
      others.insert(model_names_[d.model_id]);
  }
  std::string models;
  const std::vector<std::string>& wanted = policy_.queues[j.queue].models;
  if (!others.empty() && !wanted.empty()) {
    const auto join = [](auto names) {
      std::string out;
      for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
      return out;
    };
    models = " of model " + join(wanted) + " (its queue's models; the devices there are " +
             join(others) + ")";
  }
  if (!any) {
    verdict = "never schedulable: no device" + models + " in pools " + PoolNames(j) + " can hold " +
              std::to_string(j.gpu_count) + " x (gpu " + FormatMilli(j.gpu_milli) + ", " +
              FormatMiB(j.gpu_mem) + ") in any allowed form";
  } else if (j.gpu_count > devices_in_pools) {
    verdict = "never schedulable: wants " + std::to_string(j.gpu_count) + " devices" + models +
              ", pools " + PoolNames(j) + " have " + std::to_string(devices_in_pools);
  }
  return verdict;
}

Result<Job> Engine::Build(const JobSpec& spec) const {
  Job j;
  j.id = spec.id;
  j.identity = spec.identity;
  auto reject = [&](const std::string& why) -> Result<Job> { return Status::InvalidArgument(why); };
  if (spec.identity.empty()) return reject("no identity");
  auto q = queue_index_.find(spec.queue);
  if (q == queue_index_.end()) return reject("queue '" + spec.queue + "' does not exist");
  const QueueSpec& queue = policy_.queues[q->second];
  std::string group = spec.group.empty() ? queue.groups.front() : spec.group;
  if (std::find(queue.groups.begin(), queue.groups.end(), group) == queue.groups.end()) {
    return reject("group '" + group + "' may not use queue '" + queue.name + "'");
  }
  j.queue = q->second;
  j.swap_oc = queue.swap_overcommit_percent;
  j.min_isolation = queue.min_isolation;
  j.sm_percent = queue.compute_percent;
  j.max_runtime = queue.max_runtime_s;
  j.min_runtime = queue.min_runtime_s;
  j.preempt_delay = queue.preemption_delay_s;
  j.idle_timeout = queue.idle_timeout_s;
  j.idle_stop = queue.idle_action == QueueSpec::IdleAction::kStop;
  j.hold_limit = queue.swap_hold_limit_s;
  j.group = group_index_.at(group);
  j.profile = profile_index_.at(queue.profile);
  const ProfileSpec& pr = policy_.profiles[j.profile];
  j.cls = spec.cls.value_or(queue.default_class);
  j.gpu_count = spec.gpu_count.value_or(pr.gpu_count);
  j.gpu_milli = spec.gpu_milli.value_or(pr.gpu_milli);
  // The request's own fraction, not its queue's (the server passes the profile's on as asked).
  const bool own_fraction = spec.gpu_milli && *spec.gpu_milli != pr.gpu_milli;
  j.gpu_mem = spec.gpu_memory_mib.value_or(pr.gpu_memory_mib);
  j.cpu = spec.cpu_milli.value_or(pr.cpu_milli);
  j.mem = spec.memory_mib.value_or(pr.memory_mib);
  if (j.gpu_count < 0 || j.gpu_milli < 0 || j.gpu_milli > kWholeGpu || j.gpu_mem < 0 || j.cpu < 0 ||
      j.mem < 0) {
    return reject("request has an amount out of range");
  }
  // Bounded as nodes are (2^40: a billion cores, an exbibyte), so that amounts times GPUs and
  // sums of usage cannot overflow; a walltime of at most ten years.
  constexpr int64_t kMaxAmount = int64_t{1} << 40;
  if (j.cpu > kMaxAmount || j.mem > kMaxAmount || j.gpu_mem > kMaxAmount) {
    return reject("request has an amount above 2^40 (cpu in milli, memory in MiB)");
  }
  if (j.gpu_count > 4096) return reject("request has more than 4096 GPUs");
  if (spec.walltime_s < 0 || spec.walltime_s > 10LL * 365 * 24 * 3600) {
    return reject("walltime must be between 0 and ten years");
  }
  if (j.gpu_count > 1 && j.gpu_milli != kWholeGpu) {
    // Whose fraction: the request's, or the queue's profile (a new user asked for 2 GPUs of a
    // queue of shares, and read of a fraction they never asked for).
    return reject("a fraction of a GPU (" + FormatMilli(j.gpu_milli) + ", " +
                  (own_fraction ? std::string("asked") : "queue '" + queue.name + "' gives") +
                  ") needs gpu_count 1; " + std::to_string(j.gpu_count) + " GPUs are whole");
  }
  if (j.gpu_count > 0 && j.gpu_milli == 0) j.gpu_milli = kWholeGpu;
  if (pr.max_gpus > 0 && j.gpu_count > pr.max_gpus) {
    return reject("queue '" + queue.name + "' allows at most " + std::to_string(pr.max_gpus) +
                  " GPUs (profile '" + pr.name + "')");
  }
  if (pr.max_gpu_memory_mib > 0 && j.gpu_mem > pr.max_gpu_memory_mib) {
    return reject("queue '" + queue.name + "' allows at most " + FormatMiB(pr.max_gpu_memory_mib) +
                  " of GPU memory per device (profile '" + pr.name + "')");
  }
  j.external = queue.external;
  j.ext_pool = queue.external ? queue.external_pool : "";
  if (queue.external && queue.external_pools.size() > 1) j.ext_pools = queue.external_pools;
  auto forms = FormsFor(policy_, pr, j.cls, spec.form);
  if (!forms.ok()) return reject(forms.status().message());
  j.forms = *forms;
  if (j.gpu_count > 1) {
    // Several devices are whole devices (or several partitions/shares are not offered).
    j.forms.erase(std::remove_if(j.forms.begin(), j.forms.end(),
                                 [](AllocationForm f) { return f != AllocationForm::kWhole; }),
                  j.forms.end());
    if (j.forms.empty()) return reject("several devices are granted only as whole devices");
  }
  // A fraction asked of a queue of whole cards alone would hold a whole card, charged whole (a
  // new user's --gpu-fraction 0.5 ran on a whole card without a word).
  if (!spec.restoring && own_fraction && *spec.gpu_milli > 0 && *spec.gpu_milli < kWholeGpu &&
      j.forms == std::vector<AllocationForm>{AllocationForm::kWhole}) {
    // What narrowed it to whole cards: the form asked, the class asked, or the queue.
    const std::string why =
        spec.form ? std::string("form whole is asked")
        : spec.cls
            ? std::string("class ") + WorkloadClassName(*spec.cls) + " gets whole GPUs only"
            : "queue '" + queue.name + "' grants whole GPUs only (profile '" + pr.name + "')";
    return reject(why + ", so a fraction (" + FormatMilli(*spec.gpu_milli) +
                  ") would hold a whole one: ask a queue of shares or partitions, or no fraction");
  }
  for (size_t p = 0; p < policy_.pools.size(); ++p) {
    bool listed = pr.pools.empty() || std::find(pr.pools.begin(), pr.pools.end(),
                                                policy_.pools[p].name) != pr.pools.end();
    if (listed) j.pools |= uint64_t{1} << p;
  }
  j.queue_models = j.models = queue_model_mask_[j.queue];
  j.model_order = queue_model_order_[j.queue];
  // What its group's limits (or an ancestor's) could never allow, even with nothing else held,
  // is refused naming the resource: the nominal charge (as admission counts it) against each
  // limit. Restored jobs were accepted once.
  if (!spec.restoring || !spec.holds) {
    Resources nominal{j.gpu_count * j.gpu_milli, j.gpu_count * j.gpu_mem,
                      j.cpu * std::max(j.gpu_count, 1), j.mem * std::max(j.gpu_count, 1)};
    if (j.forms.size() == 1 && j.forms.front() == AllocationForm::kWhole) {
      nominal.gpu_milli = j.gpu_count * kWholeGpu;
      // A whole card is charged its memory: the least of a card that could hold it (a new user's
      // 4 x 80 GiB against a limit of 200 GiB waited forever at Admission).
      bool memory_limited = false;
      for (int g = j.group; g >= 0; g = groups_[g].parent)
        memory_limited = memory_limited || groups_[g].spec.limit.gpu_memory_mib < kUnlimited;
      MiB least = 0;
      for (size_t di = 0; memory_limited && di < devs_.size(); ++di) {
        const Dev& d = devs_[di];
        if (Serves(j, d) && PoolAllows(d.pool, AllocationForm::kWhole) && d.memory >= j.gpu_mem)
          least = least == 0 ? d.memory : std::min(least, d.memory);
      }
      nominal.gpu_memory_mib = std::max(nominal.gpu_memory_mib, j.gpu_count * least);
    }
    for (int g = j.group; g >= 0; g = groups_[g].parent) {
      const char* which = nullptr;
      if (!Within(Resources{}, nominal, groups_[g].spec.limit, &which)) {
        const std::string w = which;
        return reject("never schedulable: group '" + groups_[g].spec.name + "' may hold at most " +
                      Amount(which, Component(groups_[g].spec.limit, w)) + " of " + w +
                      " at once (its limit), and this job needs " +
                      Amount(which, Component(nominal, w)));
      }
    }
  }
  // Restored jobs were accepted once; external queues have no nodes here; with no node known
  // yet (a control plane before its agents), nothing can be judged.
  if (!spec.restoring && !j.external && !devs_.empty() && j.gpu_count > 0) {
    const std::string verdict = NeverSchedulable(j);
    if (!verdict.empty()) return reject(verdict);
  }
  j.priority = queue.priority;
  j.preemptible = queue.preemptible;
  j.walltime = spec.walltime_s;
  // A declared walltime is a limit (backfill counted on it); an external queue's batch system
  // is given it and keeps it.
  const bool kept = !j.external && options_.engine_break != EngineOptions::Break::kIgnoreWalltime;
  const int64_t walltime_limit = kept ? j.walltime : 0;
  const int64_t max_runtime =
      options_.engine_break == EngineOptions::Break::kIgnoreMaxRuntime ? 0 : j.max_runtime;
  j.run_limit = max_runtime > 0 && (walltime_limit <= 0 || max_runtime <= walltime_limit)
                    ? max_runtime
                    : walltime_limit;
  return j;
}

Status Engine::Check(const JobSpec& spec) const {
  auto j = Build(spec);
  return j.ok() ? Status::Ok() : j.status();
}

Result<int> Engine::Submit(const JobSpec& spec, int64_t now) {
  now_ = std::max(now_, now);
  auto built = Build(spec);
  if (!built.ok()) {
    Event e;
    e.time = now_;
    e.kind = EventKind::kRejected;
    e.job = spec.id;
    e.identity = spec.identity;
    e.group = spec.group;
    e.detail = built.status().message();
    events_.push_back(e);
    return Status::InvalidArgument("job '" + spec.id + "': " + built.status().message());
  }
  Job j = std::move(*built);
  const QueueSpec& queue = policy_.queues[j.queue];
  j.submit = now_;
  j.waiting_since = now_;
  j.seq = seq_++;
  j.member = MemberOf(j.group, j.identity);
  j.wait_step = "Queued";
  j.wait_reason = "waiting for the next scheduling cycle";
  int handle = static_cast<int>(jobs_.size());
  jobs_.push_back(std::move(j));
  pending_.push_back(handle);
  Emit(EventKind::kSubmitted, &jobs_[handle],
       std::string("queue ") + queue.name + ", class " + WorkloadClassName(jobs_[handle].cls));
  return handle;
}

void Engine::Complete(int handle, int64_t now) {
  now_ = std::max(now_, now);
  Job& j = jobs_[handle];
  if (j.state != JobState::kRunning && j.state != JobState::kTerminating) return;
  int claimant = j.claimant;
  Release(handle);
  SetState(handle, JobState::kDone);
  if (claimant >= 0 && jobs_[claimant].awaiting > 0) --jobs_[claimant].awaiting;
  j.claimant = -1;
  Emit(EventKind::kCompleted, &j, "finished");
  if (active_plans_ > 0) ApplyReadyPlans();
  StepCheck("completion");
}

}  // namespace tessera::quota::internal
