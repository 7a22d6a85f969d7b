#include "backends/kubernetes/manifest.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "common/accounts.h"
#include "model/timestamp.h"

namespace tessera::backends::kube {

const char* kDefaultJobTemplate = R"(apiVersion: batch/v1
kind: Job
metadata:
  name: set-by-tessera
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: job
          image: busybox:1.36
)";

Result<Json> RenderJobUnguarded(const JobRequest& job, const std::string& cluster,
                                const std::string& ns);

namespace {

Json Convert(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: {
      Json o = Json::object();
      for (const auto& kv : n) o[kv.first.as<std::string>()] = Convert(kv.second);
      return o;
    }
    case YAML::NodeType::Sequence: {
      Json a = Json::array();
      for (const auto& e : n) a.push_back(Convert(e));
      return a;
    }
    case YAML::NodeType::Scalar: {
      const std::string s = n.Scalar();
      if (n.Tag() == "!") return s;  // quoted
      if (s == "true" || s == "True") return true;
      if (s == "false" || s == "False") return false;
      if (s == "null" || s == "~" || s.empty()) return nullptr;
      if (!s.empty() && s.size() < 19 &&
          s.find_first_not_of("0123456789", s[0] == '-' ? 1 : 0) == std::string::npos && s != "-") {
        return std::stoll(s);
      }
      return s;
    }
    default:
      return nullptr;
  }
}

std::string Get(const std::map<std::string, std::string>& m, const std::string& k,
                const std::string& def) {
  auto it = m.find(k);
  return it == m.end() ? def : it->second;
}

std::string Fill(std::string pattern, const std::string& key, const std::string& value) {
  for (size_t at; (at = pattern.find(key)) != std::string::npos;)
    pattern.replace(at, key.size(), value);
  return pattern;
}

// The job's account in its pod, never root by default (as on a node agent): a queue with
// run_as_root (the job's run_as "root") runs as its image says; any other job's container may not
// run as root, and runs as its account's uid, gid and groups where the server's host knows the
// account (accounts shared through a directory), else as its image's own non-root user (an image
// that would run as root does not start: CreateContainerConfigError). Set on the container, where
// it overrides a template's own.
void AccountContext(const std::string& run_as, Json& pod_spec, Json& container) {
  if (run_as == "root") return;
  Json& sc = container["securityContext"];
  if (!sc.is_object()) sc = Json::object();
  sc["runAsNonRoot"] = true;
  const std::optional<AccountEntry> account = FindAccount(run_as);
  if (!account || account->uid == 0) {
    sc.erase("runAsUser");  // a template's uid (0 included) is not the job's account
    sc.erase("runAsGroup");
    return;
  }
  sc["runAsUser"] = static_cast<int64_t>(account->uid);
  sc["runAsGroup"] = static_cast<int64_t>(account->gid);
  Json groups = Json::array();
  for (gid_t g : GroupsOfAccount(run_as, account->gid)) {
    if (g != account->gid) groups.push_back(static_cast<int64_t>(g));
  }
  Json& psc = pod_spec["securityContext"];
  if (!psc.is_object()) psc = Json::object();
  psc["supplementalGroups"] = groups;
}

}  // namespace

Result<Json> YamlToJson(const std::string& text) {
  try {
    return Convert(YAML::Load(text));
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(std::string("not valid YAML: ") + e.what());
  }
}

std::string JobName(const std::string& name) {
  std::string out;
  for (char c : name) {
    const char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out.push_back(std::isalnum(static_cast<unsigned char>(l)) ? l : '-');
  }
  if (out.size() > 63) out.resize(63);
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "tessera" : out;
}

Result<Json> ResourcesFor(const JobRequest& job) {
  const KubeMapping& k = job.mapping.kube;
  Json r = Json::object();
  r["cpu"] = std::to_string(job.cpu_milli) + "m";
  r["memory"] = std::to_string(job.memory_mib) + "Mi";
  if (UsesClaim(job)) return r;  // the devices are in the job's ResourceClaim
  const std::string whole = Get(k.resources, "whole", k.vendor + ".com/gpu");
  if (job.form.empty() || (job.gpus == 0 && job.form != "share" && job.form != "partition"))
    return r;
  if (job.form == "whole") {
    r[whole] = std::to_string(std::max(job.gpus, 1));
  } else if (job.form == "partition") {
    if (k.vendor == "amd") {
      if (k.amd_partition.empty()) {
        return Status::InvalidArgument(
            "the queue maps no AMD partition (set amd_partition, e.g. cpx_nps4)");
      }
      r[Fill(Get(k.resources, "amd_partition", "amd.com/{partition}"), "{partition}",
             k.amd_partition)] = "1";
    } else {
      if (job.mig_profile.empty())
        return Status::InvalidArgument("a MIG instance needs the queue's mig_model");
      if (k.mig_strategy == "single") {
        r[whole] = "1";
      } else {
        r[Fill(Get(k.resources, "mig", "nvidia.com/mig-{profile}"), "{profile}", job.mig_profile)] =
            "1";
      }
    }
  } else if (job.form == "share") {
    r[whole] = "1";
    if (k.share_mode == "hami") {
      r[Get(k.resources, "gpumem", "nvidia.com/gpumem")] = std::to_string(job.gpu_memory_mib);
      if (job.gpu_milli > 0 && job.gpu_milli < 1000) {
        r[Get(k.resources, "gpucores", "nvidia.com/gpucores")] =
            std::to_string((job.gpu_milli + 9) / 10);
      }
    }
  } else {
    return Status::InvalidArgument("unknown form '" + job.form + "'");
  }
  return r;
}

bool UsesClaim(const JobRequest& job) {
  if (job.mapping.kube.devices != "dra" || job.form.empty()) return false;
  return job.gpus > 0 || job.form == "share" || job.form == "partition";
}

namespace {

// A value put into a CEL string literal: plain names only, so it cannot change the expression.
Status CelSafe(const std::string& v, const std::string& what) {
  if (v.empty() || v.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                       "0123456789._+-") != std::string::npos) {
    return Status::InvalidArgument(what + " '" + v +
                                   "' cannot be matched in a device selector (letters, digits, "
                                   "'.', '_', '+', '-')");
  }
  return Status::Ok();
}

// The device selector `attribute == 'value'` (a CEL expression; `value` passed CelSafe).
Json CelEquals(const std::string& attribute, const std::string& value) {
  return Json::array({{{"cel", {{"expression", attribute + " == '" + value + "'"}}}}});
}

}  // namespace

Result<Json> ClaimFor(const JobRequest& job, const std::string& cluster, const std::string& ns) {
  if (!UsesClaim(job)) return Json();
  const KubeMapping& k = job.mapping.kube;
  const bool amd = k.vendor == "amd";
  const std::string driver = amd ? "gpu.amd.com" : "gpu.nvidia.com";
  Json exactly = {{"allocationMode", "ExactCount"}, {"count", 1}};
  Json config = Json::array();
  std::string cls;
  if (job.form == "whole") {
    cls = Get(k.device_classes, "whole", driver);
    exactly["count"] = std::max(job.gpus, 1);
  } else if (job.form == "partition" && amd) {
    if (k.amd_partition.empty()) {
      return Status::InvalidArgument(
          "the queue maps no AMD partition (set amd_partition, e.g. cpx_nps4)");
    }
    if (Status st = CelSafe(k.amd_partition, "amd_partition"); !st.ok()) return st;
    cls = Get(k.device_classes, "amd_partition", "gpu.amd.com");
    exactly["selectors"] =
        CelEquals("device.attributes['gpu.amd.com'].partitionProfile", k.amd_partition);
  } else if (job.form == "partition") {
    if (job.mig_profile.empty())
      return Status::InvalidArgument("a MIG instance needs the queue's mig_model");
    if (Status st = CelSafe(job.mig_profile, "MIG profile"); !st.ok()) return st;
    cls = Get(k.device_classes, "mig", "mig.nvidia.com");
    exactly["selectors"] =
        CelEquals("device.attributes['gpu.nvidia.com'].profile", job.mig_profile);
  } else if (job.form == "share") {
    if (amd) {
      return Status::InvalidArgument(
          "the AMD DRA driver has no sharing configuration: offer AMD partitions instead");
    }
    cls = Get(k.device_classes, "share", driver);
    Json sharing;
    if (k.share_mode == "timeslice") {
      sharing = {{"strategy", "TimeSlicing"}, {"timeSlicingConfig", {{"interval", "Default"}}}};
    } else {
      Json mps = Json::object();
      if (job.gpu_milli > 0 && job.gpu_milli < 1000)
        mps["defaultActiveThreadPercentage"] = (job.gpu_milli + 9) / 10;
      if (job.gpu_memory_mib > 0)
        mps["defaultPinnedDeviceMemoryLimit"] = std::to_string(job.gpu_memory_mib) + "Mi";
      sharing = {{"strategy", "MPS"}, {"mpsConfig", mps}};
    }
    config.push_back({{"requests", Json::array({"gpu"})},
                      {"opaque",
                       {{"driver", driver},
                        {"parameters",
                         {{"apiVersion", "resource.nvidia.com/v1beta1"},
                          {"kind", "GpuConfig"},
                          {"sharing", sharing}}}}}});
  } else {
    return Status::InvalidArgument("unknown form '" + job.form + "'");
  }
  exactly["deviceClassName"] = cls;
  Json devices = {{"requests", Json::array({{{"name", "gpu"}, {"exactly", exactly}}})}};
  if (!config.empty()) devices["config"] = config;
  return Json{{"apiVersion", "resource.k8s.io/v1"},
              {"kind", "ResourceClaim"},
              {"metadata",
               {{"name", JobName(job.name)},
                {"namespace", ns},
                {"labels", {{"tessera.io/job", job.id}, {"tessera.io/cluster", cluster}}}}},
              {"spec", {{"devices", devices}}}};
}

std::string AllocationOf(const Json& claim) {
  const Json& results = At(At(At(At(claim, "status"), "allocation"), "devices"), "results");
  std::string out;
  if (!results.is_array()) return out;
  for (const Json& r : results) {
    out += (out.empty() ? "" : ",") + StrAt(r, "driver") + "/" + StrAt(r, "pool") + "/" +
           StrAt(r, "device");
  }
  return out;
}

Result<Json> SchedulingFor(const JobRequest& job, const Json& pod_spec) {
  const KubeMapping& k = job.mapping.kube;
  Json sel =
      At(pod_spec, "nodeSelector").is_object() ? At(pod_spec, "nodeSelector") : Json::object();
  for (const auto& [key, v] : k.node_selector) sel[key] = v;
  if (job.form == "partition" && k.vendor != "amd" && k.mig_strategy == "single") {
    if (k.mig_product.empty())
      return Status::InvalidArgument("the single MIG strategy needs the queue's mig_product");
    sel["nvidia.com/gpu.product"] = Fill(k.mig_product, "{profile}", job.mig_profile);
  }
  Json queue_tol =
      Json::parse(k.tolerations_json.empty() ? "[]" : k.tolerations_json, nullptr, false);
  if (!queue_tol.is_array()) return Status::InvalidArgument("tolerations: expected a list");
  Json tol = At(pod_spec, "tolerations").is_array() ? At(pod_spec, "tolerations") : Json::array();
  for (const Json& t : queue_tol) {
    if (std::find(tol.begin(), tol.end(), t) == tol.end()) tol.push_back(t);
  }
  Json out = Json::object();
  if (!sel.empty()) out["nodeSelector"] = sel;
  if (!tol.empty()) out["tolerations"] = tol;
  return out;
}

Result<Json> RenderJob(const JobRequest& job, const std::string& cluster, const std::string& ns) {
  try {
    return RenderJobUnguarded(job, cluster, ns);
  } catch (const Json::exception& e) {  // a template whose fields have other types than a Job's
    return Status::InvalidArgument("manifest template " +
                                   (job.mapping.template_path.empty()
                                        ? std::string("(default)")
                                        : "'" + job.mapping.template_path + "'") +
                                   ": not a valid Job: " + e.what());
  }
}

Result<Json> RenderJobUnguarded(const JobRequest& job, const std::string& cluster,
                                const std::string& ns) {
  std::string text = kDefaultJobTemplate;
  if (!job.mapping.template_path.empty()) {
    std::ifstream in(job.mapping.template_path);
    if (!in)
      return Status::InvalidArgument("cannot read the manifest template '" +
                                     job.mapping.template_path + "'");
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  auto parsed = YamlToJson(text);
  if (!parsed.ok())
    return Status::InvalidArgument("manifest template: " + parsed.status().message());
  Json m = std::move(*parsed);
  const std::string where = job.mapping.template_path.empty()
                                ? "the default template"
                                : "'" + job.mapping.template_path + "'";
  if (StrAt(m, "kind") != "Job" || StrAt(m, "apiVersion") != "batch/v1") {
    return Status::InvalidArgument("manifest template " + where + ": expected a batch/v1 Job");
  }
  if (!m["metadata"].is_object()) m["metadata"] = Json::object();
  if (!m["spec"].is_object())
    return Status::InvalidArgument("manifest template " + where + ": spec is not a map");
  Json& pod = m["spec"]["template"];
  if (!pod.is_object())
    return Status::InvalidArgument("manifest template " + where + ": spec.template is not a map");
  if (!pod["metadata"].is_object()) pod["metadata"] = Json::object();
  if (!pod["spec"].is_object() || !pod["spec"]["containers"].is_array() ||
      pod["spec"]["containers"].empty() || !pod["spec"]["containers"][0].is_object()) {
    return Status::InvalidArgument("manifest template " + where +
                                   ": spec.template.spec.containers needs a container");
  }
  Json labels = {{"tessera.io/job", job.id}, {"tessera.io/cluster", cluster}};
  m["metadata"]["name"] = JobName(job.name);
  m["metadata"]["namespace"] = ns;
  for (Json* meta : {&m["metadata"], &pod["metadata"]}) {
    if (!(*meta)["labels"].is_object()) (*meta)["labels"] = Json::object();
    for (const auto& [key, v] : labels.items()) (*meta)["labels"][key] = v;
  }
  m["spec"]["suspend"] = true;
  m["spec"]["backoffLimit"] = 0;  // Tessera owns retries
  // Its walltime: counted from each start (a suspended Job's timer starts again on resume); a
  // template's own deadline, where shorter, stays (the admin's limit).
  if (job.walltime_s > 0) {
    const Json& own = At(m["spec"], "activeDeadlineSeconds");
    m["spec"]["activeDeadlineSeconds"] =
        own.is_number_integer() ? std::min(own.get<int64_t>(), job.walltime_s) : job.walltime_s;
  }
  Json& spec = pod["spec"];
  if (!spec.contains("restartPolicy")) spec["restartPolicy"] = "Never";
  if (!job.mapping.kube.priority_class.empty())
    spec["priorityClassName"] = job.mapping.kube.priority_class;
  Json& c = spec["containers"][0];
  if (!job.mapping.kube.image.empty()) c["image"] = job.mapping.kube.image;
  if (!c.contains("image"))
    return Status::InvalidArgument("manifest template " + where + ": the container has no image");
  if (!job.command.empty()) {
    c["command"] = job.command;
    c.erase("args");
  }
  Json env = At(c, "env");
  if (!env.is_array()) env = Json::array();
  std::map<std::string, std::string> vars = job.env;
  if (job.form == "share") {
    vars["TESSERA_GPU_MEMORY_LIMIT"] = std::to_string(job.gpu_memory_mib * 1024 * 1024);
    if (job.mapping.kube.share_mode == "timeslice" && !job.mapping.cap_library.empty()) {
      vars["LD_PRELOAD"] = job.mapping.cap_library;
    }
  }
  for (const auto& [k, v] : vars) env.push_back(Json{{"name", k}, {"value", v}});
  c["env"] = env;
  auto res = ResourcesFor(job);
  if (!res.ok()) return res.status();
  c["resources"] = Json{{"requests", *res}, {"limits", *res}};
  if (UsesClaim(job)) {  // "Dynamic Resource Allocation": the pod names the job's claim
    c["resources"]["claims"] = Json::array({{{"name", "gpu"}}});
    Json rc = At(spec, "resourceClaims").is_array() ? spec["resourceClaims"] : Json::array();
    rc.push_back({{"name", "gpu"}, {"resourceClaimName", JobName(job.name)}});
    spec["resourceClaims"] = rc;
  }
  AccountContext(job.run_as, spec, c);
  // The pool's scheduling directives (with the template's own): set again by the admission patch.
  auto sched = SchedulingFor(job, spec);
  if (!sched.ok()) return sched.status();
  for (const auto& [key, v] : sched->items()) spec[key] = v;
  return m;
}

const Json& At(const Json& o, const char* key) {
  static const Json kNull;
  if (!o.is_object()) return kNull;
  auto it = o.find(key);
  return it == o.end() ? kNull : *it;
}

std::string StrAt(const Json& o, const char* key) {
  const Json& v = At(o, key);
  return v.is_string() ? v.get<std::string>() : std::string();
}

int64_t IntAt(const Json& o, const char* key) {
  const Json& v = At(o, key);
  return v.is_number_integer() ? v.get<int64_t>() : 0;
}

std::string KeyOf(const Json& obj) {
  const Json& m = At(obj, "metadata");
  return StrAt(m, "namespace") + "/" + StrAt(m, "name");
}

std::string RvOf(const Json& obj) { return StrAt(At(obj, "metadata"), "resourceVersion"); }

namespace {

// The terminated state of a pod's first container that has one.
// The first container state of `kind` ("terminated", "waiting") the pod reports, or null.
const Json* ContainerState(const Json& pod, const char* kind) {
  const Json& st = At(pod, "status");
  for (const char* key : {"containerStatuses", "initContainerStatuses"}) {
    const Json& list = At(st, key);
    if (!list.is_array()) continue;
    for (const Json& cs : list) {
      const Json& t = At(At(cs, "state"), kind);
      if (t.is_object()) return &t;
    }
  }
  return nullptr;
}

const Json* Terminated(const Json& pod) { return ContainerState(pod, "terminated"); }

// Why a container waits, where no wait of its own ends it: an image name that cannot be parsed,
// or one the node may never pull, or a container Kubernetes may not make as asked (an image that
// would run as root under runAsNonRoot). Kubernetes keeps such a pod pending for ever.
bool WaitsForEver(const std::string& reason) {
  return reason == "InvalidImageName" || reason == "ErrImageNeverPull" ||
         reason == "CreateContainerConfigError";
}

const Json* Condition(const Json& obj, const std::string& type) {
  const Json& list = At(At(obj, "status"), "conditions");
  if (!list.is_array()) return nullptr;
  for (const Json& c : list) {
    if (StrAt(c, "type") == type) return &c;
  }
  return nullptr;
}

bool True(const Json* c) { return c != nullptr && StrAt(*c, "status") == "True"; }

}  // namespace

ExternalJob ReadJob(const Json& job, const std::vector<const Json*>& pods) {
  ExternalJob x;
  const Json& meta = At(job, "metadata");
  x.name = StrAt(meta, "name");
  x.external_id = StrAt(meta, "namespace") + "/" + x.name;
  x.suspended = At(At(job, "spec"), "suspend") == true;
  // status.active leaves out pods being deleted: a pod not yet ended still holds its devices.
  int64_t active = IntAt(At(job, "status"), "active");
  for (const Json* p : pods) {
    const std::string phase = StrAt(At(*p, "status"), "phase");
    if (phase != "Succeeded" && phase != "Failed" &&
        !At(At(*p, "metadata"), "deletionTimestamp").is_null())
      ++active;
  }
  // The newest pod tells where and why; one being deleted (a suspended or replaced run's)
  // only when there is no other. Timestamps have whole seconds: a pod made in the same second
  // as its predecessor is told apart by the predecessor's deletion.
  const Json* pod = nullptr;
  auto rank = [](const Json* p) {
    const Json& m = At(*p, "metadata");
    return std::make_pair(At(m, "deletionTimestamp").is_null(), StrAt(m, "creationTimestamp"));
  };
  for (const Json* p : pods) {
    if (pod == nullptr || rank(p) >= rank(pod)) pod = p;
  }
  if (pod != nullptr) {
    x.node = StrAt(At(*pod, "spec"), "nodeName");
    const Json* sched = Condition(*pod, "PodScheduled");
    if (sched != nullptr && !True(sched)) {
      x.reason = StrAt(*sched, "reason") + ": " + StrAt(*sched, "message");
      x.unschedulable = StrAt(*sched, "reason") == "Unschedulable";
    }
    // A container that has not started says why (ImagePullBackOff: the image and the error).
    const Json* waiting = ContainerState(*pod, "waiting");
    if (x.reason.empty() && waiting != nullptr && !StrAt(*waiting, "reason").empty()) {
      x.reason = StrAt(*waiting, "reason") + ": " + StrAt(*waiting, "message");
    }
  }
  // How long its (first ended) container ran, where the pod says when it started and ended.
  if (const Json* t = pod != nullptr ? Terminated(*pod) : nullptr) {
    const Result<int64_t> from = ParseTimestampMs(StrAt(*t, "startedAt")),
                          to = ParseTimestampMs(StrAt(*t, "finishedAt"));
    if (from.ok() && to.ok() && *to >= *from) x.run_s = (*to - *from) / 1000;
  }
  const Json* failed = Condition(job, "Failed");
  if (True(Condition(job, "Complete"))) {
    x.state = ExternalStateName(ExternalState::kSucceeded);
    x.native_state = "Complete";
    x.exit_code = 0;
  } else if (True(failed)) {
    x.state = ExternalStateName(ExternalState::kFailed);
    x.native_state = "Failed";
    x.reason = StrAt(*failed, "reason");
    if (pod != nullptr) {
      if (const Json* t = Terminated(*pod)) {
        x.exit_code = static_cast<int>(IntAt(*t, "exitCode"));
        if (StrAt(*t, "reason") == "OOMKilled") x.reason = "OOMKilled";
        x.signal = static_cast<int>(IntAt(*t, "signal"));
      }
      const std::string pr = StrAt(At(*pod, "status"), "reason");
      if (!pr.empty()) x.reason = pr;  // Evicted, UnexpectedAdmissionError, DeadlineExceeded ...
    }
  } else if (const Json* waiting = pod != nullptr ? ContainerState(*pod, "waiting") : nullptr;
             waiting != nullptr && WaitsForEver(StrAt(*waiting, "reason")) && !x.suspended) {
    x.state = ExternalStateName(ExternalState::kFailed);  // it would wait for ever
    x.native_state = "Failed";
  } else if (x.suspended) {
    // Pods still stopping count as running.
    x.state = ExternalStateName(active > 0 ? ExternalState::kRunning : ExternalState::kSuspended);
    x.native_state = "Suspended";
  } else if (pod != nullptr && StrAt(At(*pod, "status"), "phase") == "Running" &&
             At(At(*pod, "metadata"), "deletionTimestamp").is_null()) {
    x.state = ExternalStateName(ExternalState::kRunning);
    x.native_state = "Running";
  } else {
    x.state = ExternalStateName(ExternalState::kPending);
    x.native_state = pod == nullptr ? "NoPod" : "Pending";
  }
  return x;
}

}  // namespace tessera::backends::kube
