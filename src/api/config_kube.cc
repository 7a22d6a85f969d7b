// The config of Kubernetes queues (backend: kubernetes) and of the cluster they use.
//
//   kubernetes: {kubeconfig: /etc/tessera/kubeconfig, context: prod, namespace: ml}   # or
//   in_cluster: true queues:
//     - name: k8s-train
//       backend: kubernetes
//       namespace: ml
//       node_selector: {pool: a100}
//       tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
//       priority_class: batch
//       image: nvcr.io/nvidia/pytorch:24.05-py3
//       template: examples/kubernetes/job.yaml
//       mig_model: A100-80GB     mig_strategy: mixed | single (mig_product:
//       "A100-SXM4-80GB-MIG-{profile}") share_mode: hami | timeslice     vendor: nvidia | amd
//       (amd_partition: cpx_nps4) resources: {whole: nvidia.com/gpu, mig:
//       "nvidia.com/mig-{profile}", gpumem: nvidia.com/gpumem} placement_timeout: 5m
//       devices: extended | dra       # dra: a resource.k8s.io/v1 ResourceClaim per job
//       device_classes: {whole: gpu.nvidia.com, mig: mig.nvidia.com, share: gpu.nvidia.com,
//                        amd_partition: gpu.amd.com}   share_mode (dra): mps | timeslice
#include <cctype>
#include <nlohmann/json.hpp>

#include "api/config.h"
#include "api/config_fields.h"
#include "model/quantity.h"
#include "partition/catalog.h"

namespace tessera::api {
namespace {

using cfg::Bad;
using cfg::Str;

Result<std::map<std::string, std::string>> StrMap(const YAML::Node& n, const std::string& where) {
  if (!n.IsMap()) return Bad(where, "expected a map of names to values");
  std::map<std::string, std::string> out;
  for (const auto& kv : n) {
    if (!kv.second.IsScalar())
      return Bad(where + "." + kv.first.as<std::string>(), "expected a string");
    out[kv.first.as<std::string>()] = kv.second.as<std::string>();
  }
  return out;
}

Status OneOf(const std::string& v, std::initializer_list<const char*> allowed,
             const std::string& where) {
  std::string list;
  for (const char* a : allowed) {
    if (v == a) return Status::Ok();
    list += (list.empty() ? "" : ", ") + std::string(a);
  }
  return Bad(where, "'" + v + "' is not one of " + list);
}

// A Kubernetes label key or value is short and plain; names are DNS labels.
bool DnsLabel(const std::string& s) {
  if (s.empty() || s.size() > 63) return false;
  for (char c : s) {
    if (!(std::islower(static_cast<unsigned char>(c)) ||
          std::isdigit(static_cast<unsigned char>(c)) || c == '-'))
      return false;
  }
  return s.front() != '-' && s.back() != '-';
}

}  // namespace

const std::set<std::string>& KubeQueueKeys() {
  static const std::set<std::string> kKeys = {
      "namespace", "node_selector",     "tolerations", "priority_class", "image",
      "vendor",    "mig_strategy",      "mig_product", "share_mode",     "amd_partition",
      "resources", "placement_timeout", "devices",     "device_classes"};
  return kKeys;
}

// Everything a queue's mapping puts into a Kubernetes object goes out as JSON, which holds only
// UTF-8: other bytes are refused here, naming the field (not thrown later, mid-request).
Status Utf8(const std::string& s, const std::string& field) {
  try {
    (void)nlohmann::json(s).dump();
  } catch (const nlohmann::json::exception&) {
    return Bad(field, "is not valid UTF-8");
  }
  return Status::Ok();
}

Status CheckKubeUtf8(const backends::KubeMapping& k, const std::string& w) {
  for (auto [key, value] : std::initializer_list<std::pair<const char*, const std::string*>>{
           {"priority_class", &k.priority_class},
           {"image", &k.image},
           {"mig_product", &k.mig_product},
           {"amd_partition", &k.amd_partition}}) {
    if (Status st = Utf8(*value, w + "." + key); !st.ok()) return st;
  }
  for (const auto* m : {&k.node_selector, &k.resources, &k.device_classes}) {
    const std::string what = w + (m == &k.node_selector ? ".node_selector"
                                  : m == &k.resources   ? ".resources"
                                                        : ".device_classes");
    for (const auto& [key, value] : *m) {
      if (Status st = Utf8(key + value, what); !st.ok()) return st;
    }
  }
  return Status::Ok();
}

namespace {

// A DNS subdomain (a DeviceClass name): lowercase labels joined by dots.
bool DnsSubdomain(const std::string& s) {
  if (s.empty() || s.size() > 253) return false;
  size_t start = 0;
  for (size_t dot; start <= s.size(); start = dot + 1) {
    dot = s.find('.', start);
    if (dot == std::string::npos) dot = s.size();
    if (!DnsLabel(s.substr(start, dot - start))) return false;
    if (dot == s.size()) break;
  }
  return true;
}

// What only one vendor's devices read, refused on the other's rather than ignored; an AMD
// partition named as the device plugin names it: compute mode, then memory mode.
Status CheckVendor(const YAML::Node& n, const std::string& w, const QueueRoute& q) {
  const backends::KubeMapping& k = q.kube;
  if (k.vendor != "amd" && n["amd_partition"])
    return Bad(w + ".amd_partition", "only with vendor: amd");
  if (k.vendor == "amd" && !q.mig_model.empty()) {
    return Bad(w + ".mig_model", "only with vendor: nvidia (an AMD partition is amd_partition)");
  }
  if (k.vendor == "amd" && (n["mig_strategy"] || n["mig_product"]))
    return Bad(w + (n["mig_strategy"] ? ".mig_strategy" : ".mig_product"),
               "only with vendor: nvidia");
  if (!n["amd_partition"]) return Status::Ok();
  // A compute mode and a memory mode one AMD model of the catalog has, in the device plugin's
  // lower case: "cpx_nps4".
  const std::string& p = k.amd_partition;
  const size_t bar = p.find('_');
  std::set<std::string> known;
  for (const partition::GpuModel& m : partition::Catalog::BuiltIn().models()) {
    if (!m.is_amd()) continue;
    for (const partition::AmdComputeMode& c : m.amd.compute_modes) {
      for (const partition::AmdMemoryMode& mem : m.amd.memory_modes) {
        std::string name = c.name + "_" + mem.name;
        for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        known.insert(name);
      }
    }
  }
  if (bar == std::string::npos || known.count(p) == 0) {
    std::string list;
    for (const std::string& name : known) list += (list.empty() ? "" : ", ") + name;
    return Bad(w + ".amd_partition",
               "'" + p + "' is not a compute and memory mode of an AMD model (" + list + ")");
  }
  return Status::Ok();
}

// The choice between extended resources and DRA, and what only one of them understands.
Status CheckDra(const YAML::Node& n, const std::string& w, QueueRoute* q) {
  backends::KubeMapping& k = q->kube;
  const bool dra = k.devices == "dra";
  if (dra && k.share_mode == "hami") {
    return Bad(
        w + ".share_mode",
        "'hami' shares are HAMi's extended resources; with devices: dra a share is set in its "
        "ResourceClaim: use mps or timeslice");
  }
  if (!dra && k.share_mode == "mps") {
    return Bad(w + ".share_mode",
               "'mps' is set in a ResourceClaim's configuration: it needs devices: dra");
  }
  if (dra && n["resources"]) {
    return Bad(w + ".resources",
               "names extended resources, which devices: dra does not use (set device_classes)");
  }
  if (dra && (n["mig_strategy"] || n["mig_product"])) {
    return Bad(w + (n["mig_strategy"] ? ".mig_strategy" : ".mig_product"),
               "is for MIG as extended resources; with devices: dra a MIG instance is a device of "
               "class mig.nvidia.com (device_classes.mig)");
  }
  if (!n["device_classes"]) return Status::Ok();
  if (!dra) return Bad(w + ".device_classes", "is for devices: dra");
  auto m = StrMap(n["device_classes"], w + ".device_classes");
  if (!m.ok()) return m.status();
  for (const auto& [form, name] : *m) {
    Status st = OneOf(form, {"whole", "mig", "share", "amd_partition"}, w + ".device_classes");
    if (!st.ok()) return st;
    if (!DnsSubdomain(name))
      return Bad(w + ".device_classes." + form,
                 "'" + name + "' is not a DeviceClass name such as gpu.nvidia.com");
  }
  k.device_classes = *m;
  return Status::Ok();
}

}  // namespace

Status ParseKubeRoute(const YAML::Node& n, const std::string& w, QueueRoute* q) {
  backends::KubeMapping& k = q->kube;
  Status st = cfg::ReadStrs(n, w,
                            {{"namespace", &k.ns},
                             {"priority_class", &k.priority_class},
                             {"image", &k.image},
                             {"vendor", &k.vendor},
                             {"mig_strategy", &k.mig_strategy},
                             {"mig_product", &k.mig_product},
                             {"share_mode", &k.share_mode},
                             {"amd_partition", &k.amd_partition},
                             {"devices", &k.devices}});
  if (!st.ok()) return st;
  if (!k.ns.empty() && !DnsLabel(k.ns))
    return Bad(w + ".namespace", "'" + k.ns + "' is not a Kubernetes namespace name");
  st = OneOf(k.vendor, {"nvidia", "amd"}, w + ".vendor");
  if (st.ok()) st = OneOf(k.mig_strategy, {"mixed", "single"}, w + ".mig_strategy");
  if (st.ok()) st = OneOf(k.devices, {"extended", "dra"}, w + ".devices");
  if (st.ok() && k.devices == "dra" && !n["share_mode"]) k.share_mode = "mps";
  if (st.ok()) st = OneOf(k.share_mode, {"hami", "timeslice", "mps"}, w + ".share_mode");
  if (!st.ok()) return st;
  if (st = CheckVendor(n, w, *q); !st.ok()) return st;
  if (st = CheckDra(n, w, q); !st.ok()) return st;
  if (k.mig_strategy == "single" && !q->mig_model.empty() && k.mig_product.empty()) {
    return Bad(w + ".mig_product",
               "the single MIG strategy needs the nvidia.com/gpu.product of the MIG nodes, e.g. "
               "\"A100-SXM4-80GB-MIG-{profile}\"");
  }
  if (n["node_selector"]) {
    auto m = StrMap(n["node_selector"], w + ".node_selector");
    if (!m.ok()) return m.status();
    k.node_selector = *m;
  }
  if (n["resources"]) {
    auto m = StrMap(n["resources"], w + ".resources");
    if (!m.ok()) return m.status();
    for (const auto& [form, name] : *m) {
      st = OneOf(form, {"whole", "mig", "gpumem", "gpucores", "amd_partition"}, w + ".resources");
      if (!st.ok()) return st;
      if (name.find('/') == std::string::npos)
        return Bad(w + ".resources." + form,
                   "'" + name + "' is not a resource name such as nvidia.com/gpu");
    }
    k.resources = *m;
  }
  if (n["tolerations"]) {
    if (!n["tolerations"].IsSequence())
      return Bad(w + ".tolerations", "expected a list of tolerations");
    for (size_t i = 0; i < n["tolerations"].size(); ++i) {
      const YAML::Node t = n["tolerations"][i];
      const std::string tw = w + ".tolerations[" + std::to_string(i) + "]";
      if (!t.IsMap()) return Bad(tw, "expected a map (key, operator, value, effect)");
      for (const auto& kv : t) {
        const std::string key = kv.first.as<std::string>();
        st = OneOf(key, {"key", "operator", "value", "effect", "tolerationSeconds"}, tw);
        if (!st.ok()) return st;
      }
      if (t["operator"]) {
        st = OneOf(t["operator"].IsScalar() ? t["operator"].Scalar() : "", {"Equal", "Exists"},
                   tw + ".operator");
        if (!st.ok()) return st;
      }
      if (t["effect"]) {
        st = OneOf(t["effect"].IsScalar() ? t["effect"].Scalar() : "",
                   {"NoSchedule", "PreferNoSchedule", "NoExecute"}, tw + ".effect");
        if (!st.ok()) return st;
      }
    }
    // Kubernetes takes every field as a string but tolerationSeconds (an integer).
    nlohmann::json list = nlohmann::json::array();
    for (size_t i = 0; i < n["tolerations"].size(); ++i) {
      nlohmann::json t = nlohmann::json::object();
      for (const auto& kv : n["tolerations"][i]) {
        const std::string key = kv.first.as<std::string>();
        const std::string tw = w + ".tolerations[" + std::to_string(i) + "]." + key;
        if (!kv.second.IsScalar()) return Bad(tw, "expected a single value");
        if (key == "tolerationSeconds") {
          auto secs = ParseNonNegativeInt(kv.second.Scalar());
          if (!secs.ok()) return Bad(tw, "expected a whole number of seconds");
          t[key] = *secs;
        } else {
          if (Status u = Utf8(key + kv.second.Scalar(), tw); !u.ok()) return u;
          t[key] = kv.second.Scalar();
        }
      }
      list.push_back(std::move(t));
    }
    k.tolerations_json = list.dump();
  }
  st = cfg::ReadDuration(n["placement_timeout"], w + ".placement_timeout", &k.placement_timeout_ms);
  return st.ok() ? CheckKubeUtf8(k, w) : st;
}

Status ReadKubeSettings(const YAML::Node& root, EngineConfig* c) {
  const YAML::Node n = root["kubernetes"];
  if (!n) return Status::Ok();
  if (!n.IsMap())
    return Bad("kubernetes", "expected a map (kubeconfig, context, in_cluster, namespace)");
  for (const auto& kv : n) {
    Status st = OneOf(kv.first.as<std::string>(),
                      {"kubeconfig", "context", "in_cluster", "namespace"}, "kubernetes");
    if (!st.ok()) return st;
  }
  KubeSettings& k = c->kubernetes;
  Status st =
      cfg::ReadStrs(n, "kubernetes",
                    {{"kubeconfig", &k.kubeconfig}, {"context", &k.context}, {"namespace", &k.ns}});
  if (st.ok()) st = cfg::ReadBool(n["in_cluster"], "kubernetes.in_cluster", &k.in_cluster);
  if (!st.ok()) return st;
  if (k.in_cluster && !k.kubeconfig.empty())
    return Bad("kubernetes", "in_cluster and kubeconfig exclude each other");
  return Status::Ok();
}

Status CheckKubeCluster(const std::string& cl) {
  // The cluster's name is the tessera.io/cluster label and part of every Job's name.
  bool label = !cl.empty() && cl.size() <= 40 &&
               std::isalnum(static_cast<unsigned char>(cl.front())) &&
               std::isalnum(static_cast<unsigned char>(cl.back()));
  for (char ch : cl)
    label = label &&
            (std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.');
  if (!label) {
    return Bad("cluster",
               "'" + cl +
                   "' cannot name Kubernetes objects: up to 40 letters, digits, '-', '_' or '.', "
                   "starting and ending with a letter or digit");
  }
  return Status::Ok();
}

}  // namespace tessera::api
