// A submission's request checked against the config and the policy (api/submit_request.h).
#include "api/submit_request.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <set>
#include <tuple>

#include "common/text.h"
#include "model/duration.h"
#include "model/quantity.h"
#include "partition/catalog.h"
#include "policy/yaml_fields.h"

namespace tessera::api {
namespace {

Result<std::vector<std::string>> StringList(const Json& j, const std::string& what) {
  std::vector<std::string> out;
  if (!j.is_array()) return Status::InvalidArgument(what + " must be a list of strings");
  for (const auto& e : j) {
    if (!e.is_string()) return Status::InvalidArgument(what + " must be a list of strings");
    // A NUL ends the string the kernel reads (exec): the job would run other arguments than
    // those stored and shown.
    if (e.get_ref<const std::string&>().find('\0') != std::string::npos) {
      return Status::InvalidArgument(what + ": argument " + std::to_string(out.size()) +
                                     " contains a NUL byte");
    }
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
    text = j.dump();  // the shortest text that reads back as the same double: 1000.125, 0.1
  } else if (j.is_number()) {
    text = j.dump();  // negative, or a memory quantity without its unit: the parser says which
  } else {
    return Status::InvalidArgument(what + " must be a quantity string");
  }
  Result<int64_t> v = memory ? ParseMemoryMiB(text) : ParseMilli(text);
  if (!v.ok()) return Status::InvalidArgument(what + ": " + v.status().message());
  return v;
}

// The caller's group for this queue: the one asked for, else the first the queue allows.
Result<std::string> GroupFor(const EngineConfig& c, const Identity& who, const quota::QueueSpec& q,
                             const Json& body) {
  auto allowed = [&](const std::string& g) {
    bool in_queue = std::find(q.groups.begin(), q.groups.end(), g) != q.groups.end();
    bool mine = who.role == Role::kAdmin ||
                std::find(who.groups.begin(), who.groups.end(), g) != who.groups.end();
    return in_queue && mine && c.FindGroup(g) != nullptr;
  };
  if (body.contains("group")) {
    if (!body["group"].is_string()) return Status::InvalidArgument("'group' must be a string");
    std::string group = body["group"].get<std::string>();
    if (!allowed(group)) {
      return Status::PermissionDenied("'" + who.name + "' may not submit to queue '" + q.name +
                                      "' as group '" + group + "'");
    }
    return group;
  }
  for (const auto& g : who.role == Role::kAdmin ? q.groups : who.groups) {
    if (allowed(g)) return g;
  }
  return Status::PermissionDenied("'" + who.name + "' may not submit to queue '" + q.name + "'");
}

// For a queue whose MIG instances an external scheduler hands out: the smallest profile of its
// model giving the memory and compute asked. Sets the request to the instance's size.
Result<std::string> MigProfileFor(const QueueRoute& route, int64_t* gpu_milli, MiB* gpu_memory) {
  const partition::GpuModel* model = partition::Catalog::BuiltIn().Find(route.mig_model);
  const int total = model->mig.compute_slices;
  const partition::MigProfile* mig = nullptr;
  for (const partition::MigProfile& p : model->mig.profiles) {
    if (p.media_extension) continue;
    if (*gpu_memory > 0 && p.memory_mib < *gpu_memory) continue;
    if (int64_t{p.compute_slices} * kWholeGpu < *gpu_milli * total) continue;
    if (mig == nullptr || std::tie(p.memory_slices, p.compute_slices) <
                              std::tie(mig->memory_slices, mig->compute_slices)) {
      mig = &p;
    }
  }
  if (mig == nullptr) {
    return Status::InvalidArgument("no MIG profile of " + model->name + " gives " +
                                   FormatMiB(*gpu_memory) + " of GPU memory and " +
                                   FormatMilli(*gpu_milli) +
                                   " of its compute (profiles: " + model->mig.ProfileNames() + ")");
  }
  *gpu_milli = (int64_t{mig->compute_slices} * kWholeGpu + total - 1) / total;
  *gpu_memory = mig->memory_mib;
  return mig->name;
}

}  // namespace

namespace {

// The command and environment of a submission.
Status ReadCommand(const Json& body, std::vector<std::string>* cmd, Json* env) {
  if (!body.contains("command")) return Status::InvalidArgument("'command' is required");
  // Bounded as a kernel bounds exec (its argument count), so that a 1 MiB body of one-letter
  // arguments cannot make each stored job tens of megabytes of parsed JSON.
  constexpr size_t kMaxArgs = 4096, kMaxEnv = 1024;
  if (body["command"].is_array() && body["command"].size() > kMaxArgs) {
    return Status::InvalidArgument("'command' has more than 4096 arguments");
  }
  auto c = StringList(body["command"], "'command'");
  if (!c.ok()) return c.status();
  if (c->empty() || (*c)[0].empty()) return Status::InvalidArgument("'command' must not be empty");
  // One string past the kernel's limit for one (MAX_ARG_STRLEN, 128 KiB with its NUL) failed only
  // at exec on the node (E2BIG); and all of them are bounded so that a user's many submissions
  // cannot take the server's memory (each stored job is held in memory until it ends).
  constexpr size_t kMaxString = 128 * 1024 - 1, kMaxTotal = 256 * 1024;
  size_t total = 0;
  for (size_t i = 0; i < c->size(); ++i) {
    if ((*c)[i].size() > kMaxString) {
      return Status::InvalidArgument("'command' argument " + std::to_string(i) + " is " +
                                     std::to_string((*c)[i].size()) + " bytes: at most " +
                                     std::to_string(kMaxString) + " (the kernel's limit for one)");
    }
    total += (*c)[i].size();
  }
  const auto too_much = [&] {
    return Status::InvalidArgument("'command' and 'env' hold " + std::to_string(total) +
                                   " bytes: at most " + std::to_string(kMaxTotal));
  };
  if (total > kMaxTotal) return too_much();
  *cmd = *c;
  *env = Json::object();
  if (!body.contains("env")) return Status::Ok();
  if (!body["env"].is_object())
    return Status::InvalidArgument("'env' must be an object of strings");
  if (body["env"].size() > kMaxEnv)
    return Status::InvalidArgument("'env' has more than 1024 variables");
  for (const auto& [k, v] : body["env"].items()) {
    // A portable shell name: it is written into batch scripts (Slurm, PBS) and exported.
    bool name = !k.empty() && k.size() <= 256 && !std::isdigit(static_cast<unsigned char>(k[0]));
    for (char ch : k) name = name && (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_');
    if (!name) {
      return Status::InvalidArgument(
          "'env': '" + k.substr(0, 64) +
          "' is not a variable name (letters, digits and _, not starting with a digit)");
    }
    if (!v.is_string())
      return Status::InvalidArgument("'env': the value of '" + k + "' must be a string");
    const std::string& value = v.get_ref<const std::string&>();
    if (value.find('\0') != std::string::npos) {
      return Status::InvalidArgument("'env': the value of '" + k + "' contains a NUL byte");
    }
    if (k.size() + 1 + value.size() > kMaxString) {
      return Status::InvalidArgument("'env': the value of '" + k + "' is " +
                                     std::to_string(value.size()) + " bytes: at most " +
                                     std::to_string(kMaxString - k.size() - 1) +
                                     " (the kernel's limit for one variable)");
    }
    total += k.size() + 1 + value.size();
    (*env)[k] = v;
  }
  return total > kMaxTotal ? too_much() : Status::Ok();
}

// What the job needs: class, form, GPUs and quantities (each defaulting to the queue's profile),
// walltime. Fills the scheduler's request.
Status ReadNeeds(const Json& body, const quota::ProfileSpec& prof, quota::JobSpec* qs) {
  for (const char* field : {"class", "form"}) {
    if (body.contains(field) && !body[field].is_string())
      return Status::InvalidArgument(std::string("'") + field + "' must be a string");
  }
  if (body.contains("class")) {
    auto c = quota::ParseWorkloadClass(body["class"].get<std::string>());
    if (!c.ok()) return Status::InvalidArgument("'class': " + c.status().message());
    qs->cls = *c;
  }
  if (body.contains("form")) {
    auto f = quota::ParseAllocationForm(body["form"].get<std::string>());
    if (!f.ok()) return Status::InvalidArgument("'form': " + f.status().message());
    qs->form = *f;
  }
  int gpus = prof.gpu_count;
  if (body.contains("gpus")) {
    if (!body["gpus"].is_number_integer() || body["gpus"].get<int64_t>() < 0 ||
        body["gpus"].get<int64_t>() > 4096) {
      return Status::InvalidArgument("'gpus' must be an integer from 0 to 4096");
    }
    gpus = static_cast<int>(body["gpus"].get<int64_t>());
  }
  auto quantity = [&](const char* field, bool memory_unit,
                      int64_t profile_value) -> Result<int64_t> {
    if (!body.contains(field)) return profile_value;
    return Quantity(body[field], memory_unit, std::string("'") + field + "'");
  };
  auto gpu_memory = quantity("gpu_memory", true, prof.gpu_memory_mib);
  if (!gpu_memory.ok()) return gpu_memory.status();
  auto cpu = quantity("cpu", false, prof.cpu_milli);
  if (!cpu.ok()) return cpu.status();
  auto memory = quantity("memory", true, prof.memory_mib);
  if (!memory.ok()) return memory.status();
  // Asked for, host CPU and memory are above 0: at 0 nothing is counted against the group's
  // limit and the node sets no cgroup limit ("max"), so a job so asked took as much as it liked.
  if (body.contains("cpu") && *cpu <= 0)
    return Status::InvalidArgument("'cpu' must be above 0 (e.g. \"100m\", a tenth of a core)");
  if (body.contains("memory") && *memory <= 0)
    return Status::InvalidArgument("'memory' must be above 0 (e.g. \"256MiB\")");
  auto fraction =
      quantity("gpu_fraction", false, gpus > 0 && prof.gpu_count == 0 ? kWholeGpu : prof.gpu_milli);
  if (!fraction.ok()) return fraction.status();
  if (*fraction > kWholeGpu) return Status::InvalidArgument("'gpu_fraction' is above 1");
  // Said, it is a share of one GPU: never dropped beside no GPUs, nor taken as a whole card at 0.
  if (body.contains("gpu_fraction")) {
    if (*fraction == 0) {
      return Status::InvalidArgument(
          "'gpu_fraction' must be above 0 (a share of a GPU; 'gpus': 0 for none)");
    }
    if (gpus == 0 || (gpus > 1 && *fraction < kWholeGpu)) {
      return Status::InvalidArgument("'gpu_fraction' is for a job of 1 GPU ('gpus' is " +
                                     std::to_string(gpus) + ")");
    }
  }
  // Said beside no GPUs, GPU memory or a form was dropped and the job ran on CPUs alone.
  if (gpus == 0 && body.contains("gpu_memory") && *gpu_memory > 0)
    return Status::InvalidArgument("'gpu_memory' is for a job with GPUs ('gpus' is 0)");
  if (gpus == 0 && body.contains("form"))
    return Status::InvalidArgument("'form' is the form of a job's GPUs ('gpus' is 0)");
  int64_t walltime = 0;
  if (body.contains("walltime")) {
    const Json& w = body["walltime"];
    // A duration in the one grammar kept in whole seconds ("2h", "90s"; "500ms" is refused), or
    // a whole number of seconds.
    Result<int64_t> d =
        Status::InvalidArgument("not a duration (a string such as \"2h\", or seconds)");
    if (w.is_string()) {
      d = ParseDurationSeconds(w.get<std::string>());
    } else if (w.is_number_unsigned()) {  // past int64 is still too long, not negative
      d = static_cast<int64_t>(std::min<uint64_t>(w.get<uint64_t>(), INT64_MAX));
    } else if (w.is_number_integer()) {
      d = w.get<int64_t>() >= 0
              ? Result<int64_t>(w.get<int64_t>())
              : Status::InvalidArgument(w.dump() + " is negative (a duration is 0 or more)");
    }
    if (!d.ok()) return Status::InvalidArgument("'walltime': " + d.status().message());
    walltime = *d;
  }
  qs->gpu_count = gpus;
  qs->gpu_milli = gpus == 0 ? 0 : *fraction;
  qs->gpu_memory_mib = *gpu_memory;
  qs->cpu_milli = *cpu;
  qs->memory_mib = *memory;
  qs->walltime_s = walltime;
  return Status::Ok();
}

// For an external queue: the form the cycle will grant, and the MIG profile its backend is asked
// for (the request resized to that instance). "" when none.
Result<std::string> ExternalForm(const EngineConfig& config, const quota::QueueSpec& q,
                                 quota::JobSpec* qs) {
  const QueueRoute* route = config.FindRoute(q.name);
  if (!route->external() || *qs->gpu_count == 0) return std::string();
  // The form the cycle will grant an external queue's job: the first the policy allows.
  auto forms = quota::FormsFor(config.policy, *config.FindProfile(q.profile),
                               qs->cls.value_or(q.default_class), qs->form);
  if (!forms.ok()) return Status::InvalidArgument(forms.status().message());
  qs->form = forms->front();
  if (forms->front() != AllocationForm::kPartition) return std::string();
  if (route->mig_model.empty() && route->gres_partition.empty()) {
    return Status::InvalidArgument(
        "queue '" + q.name + "' maps no hardware partitions (set mig_model or gres_partition)");
  }
  if (*qs->gpu_count != 1)
    return Status::InvalidArgument("a MIG instance is one slice of one device: 'gpus' must be 1");
  if (route->mig_model.empty()) return std::string();
  int64_t milli = *qs->gpu_milli;
  MiB mem = *qs->gpu_memory_mib;
  auto p = MigProfileFor(*route, &milli, &mem);
  if (!p.ok()) return p.status();
  qs->gpu_milli = milli;
  qs->gpu_memory_mib = mem;
  return *p;
}

}  // namespace

const std::set<std::string>& SubmitFields() {
  static const std::set<std::string> kFields = {
      "queue",      "command",      "env", "name",   "class", "form",     "gpus",
      "gpu_memory", "gpu_fraction", "cpu", "memory", "group", "walltime", "secret_args"};
  return kFields;
}

Result<PendingSubmit> PrepareSubmit(const EngineConfig& config, const Identity& who,
                                    const Json& body) {
  if (who.role == Role::kAgent) return Status::PermissionDenied("agents cannot submit jobs");
  if (!body.is_object()) return Status::InvalidArgument("the body must be a JSON object");
  const std::set<std::string>& kFields = SubmitFields();
  for (const auto& [k, v] : body.items()) {
    if (!kFields.count(k)) return Status::InvalidArgument("unknown field '" + k + "'");
  }
  if (!body.contains("queue") || !body["queue"].is_string())
    return Status::InvalidArgument("'queue' is required");
  if (body.contains("name")) {
    // A name is shown in tables and terminals: text without control characters.
    if (!body["name"].is_string() || body["name"].get_ref<const std::string&>().size() > 256 ||
        HasControlCharacters(body["name"].get_ref<const std::string&>())) {
      return Status::InvalidArgument(
          "'name' must be a string of at most 256 bytes without control characters");
    }
  }
  const std::string qname = body["queue"].get<std::string>();
  const quota::QueueSpec* q = config.FindQueue(qname);
  if (!q) return Status::InvalidArgument("unknown queue '" + qname + "'");
  auto group = GroupFor(config, who, *q, body);
  if (!group.ok()) return group.status();
  std::vector<std::string> cmd;
  Json env;
  if (Status st = ReadCommand(body, &cmd, &env); !st.ok()) return st;
  PendingSubmit ps;
  quota::JobSpec& qs = ps.qspec;
  qs.identity = who.name;
  qs.group = *group;
  qs.queue = qname;
  if (Status st = ReadNeeds(body, *config.FindProfile(q->profile), &qs); !st.ok()) return st;
  auto mig_profile = ExternalForm(config, *q, &qs);
  if (!mig_profile.ok()) return mig_profile.status();
  Json spec = {
      {"command", cmd},
      {"env", env},
      {"class", quota::WorkloadClassName(qs.cls.value_or(q->default_class))},
      {"gpus", *qs.gpu_count},
      {"gpu_milli", *qs.gpu_milli},
      {"gpu_memory_mib", *qs.gpu_memory_mib},
      {"cpu_milli", *qs.cpu_milli},
      {"memory_mib", *qs.memory_mib},
      {"walltime_s", qs.walltime_s},
      {"name",
       body.contains("name") && body["name"].is_string() ? body["name"].get<std::string>() : ""}};
  if (qs.form) spec["form"] = AllocationFormName(*qs.form);
  if (body.contains("secret_args")) {
    // Indices of command arguments only the owner and admins see (a password on a command line).
    // Each at most once: a megabyte of [0,0,...] was stored and kept with the job.
    const Json& sa = body["secret_args"];
    bool ok = sa.is_array() && sa.size() <= cmd.size();
    std::set<int64_t> seen;
    for (const Json& i : ok ? sa : Json::array()) {
      ok = ok && i.is_number_integer() && i.get<int64_t>() >= 0 &&
           i.get<int64_t>() < static_cast<int64_t>(cmd.size()) &&
           seen.insert(i.get<int64_t>()).second;
    }
    if (!ok)
      return Status::InvalidArgument("'secret_args' must list indices into 'command' (0 to " +
                                     std::to_string(cmd.size() - 1) + "), each once");
    spec["secret_args"] = sa;
  }
  // The Unix account its processes run under (on agent nodes, and as the submitter of Slurm and
  // PBS jobs): root on a run_as_root queue; else the identity's run_as, its group's, or its own
  // name. Never empty, so that no node runs it as whoever the agent happens to be.
  const std::string run_as =
      config.FindRoute(qname)->run_as_root ? "root" : config.AccountOf(who, *group);
  if (run_as.empty()) {
    return Status::FailedPrecondition(
        "'" + who.name + "' has no Unix account to run jobs under: " +
        (who.subject.empty()
             ? "its name is not an account name and neither it nor group '" + *group +
                   "' sets run_as"
             : (config.oidc.account_claim.empty()
                    ? std::string("the config maps no token claim to an account "
                                  "(oidc.account_claim)")
                    : "the provider's token has no '" + config.oidc.account_claim + "' claim") +
                   " and group '" + *group + "' sets no run_as"));
  }
  spec["run_as"] = run_as;
  if (!mig_profile->empty()) spec["mig_profile"] = *mig_profile;
  ps.job.spec_text = spec.dump();
  ps.job.spec = std::move(spec);
  ps.job.rec.queue = qname;
  ps.job.rec.identity = who.name;
  ps.job.rec.group = *group;
  ps.job.state = kInitialJobState;
  return ps;
}

Status ValidIdempotencyKey(const std::string& key) {
  bool ok = !key.empty() && key.size() <= 200;
  for (char c : key)
    ok =
        ok && (std::isalnum(static_cast<unsigned char>(c)) || std::strchr("-_.:/+=", c) != nullptr);
  if (ok) return Status::Ok();
  return Status::InvalidArgument(
      "Idempotency-Key: expected 1 to 200 letters, digits or -_.:/+= (a UUID, say)");
}

}  // namespace tessera::api
