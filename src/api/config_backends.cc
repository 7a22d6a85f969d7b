// Named backends and queues over several of them (issue 39).
//
//   backends:
//     kube-a: {type: kubernetes, kubeconfig: /etc/tessera/a.kubeconfig, context: prod}
//     kube-b: {type: kubernetes, kubeconfig: /etc/tessera/b.kubeconfig}
//     hpc: {type: slurm}
//   queues:
//     - {name: gpu, profile: card, backends: [kube-a, kube-b, hpc], partition: debug}
//
// A queue names one backend (`backend:`, a built-in name or a named one) or lists several in
// preference order (`backends:`); each job of the queue then goes to the one where it is
// predicted to start first. The mapping keys of each type (Slurm's partition, gpu_type, ...;
// Kubernetes' namespace, node_selector, ...) apply to the queue's backends of that type.
#include <set>

#include "api/config.h"
#include "api/config_fields.h"
#include "policy/yaml_fields.h"

namespace tessera::api {

using cfg::Bad;
using cfg::Str;

const NamedBackend* EngineConfig::FindBackend(const std::string& name) const {
  return cfg::FindBy(backends, &NamedBackend::name, name);
}

std::string EngineConfig::TypeOf(const std::string& name) const {
  const NamedBackend* b = FindBackend(name);
  return b != nullptr ? b->type : name;
}

namespace {

bool IsBackendName(const std::string& s) {
  if (s.empty() || s.size() > 40) return false;
  for (char ch : s) {
    if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '_'))
      return false;
  }
  return true;
}

std::string BuiltinNames() {
  std::string names;
  for (const auto& name : backends::BuiltinRegistry().Names())
    names += (names.empty() ? "" : ", ") + name;
  return names;
}

}  // namespace

Status ReadNamedBackends(const YAML::Node& root, EngineConfig* c) {
  const YAML::Node all = root["backends"];
  if (!all) return Status::Ok();
  if (!all.IsMap())
    return Bad("backends", "expected a map of names to backends, e.g. kube-a: {type: kubernetes}");
  for (const auto& kv : all) {
    NamedBackend b;
    b.name = kv.first.as<std::string>();
    const std::string w = "backends." + b.name;
    if (!IsBackendName(b.name)) {
      return Bad(w, "a backend's name is up to 40 lowercase letters, digits, '-' or '_'");
    }
    if (b.name == "local") return Bad(w, "'local' is Tessera's own node agents, not a backend");
    const YAML::Node& n = kv.second;
    if (!n.IsMap()) return Bad(w, "expected a map with a type (slurm, pbs, kubernetes)");
    Status st = cfg::CheckKeys(n, w, {"type", "kubeconfig", "context", "in_cluster", "namespace"});
    if (!st.ok()) return st;
    if (!n["type"]) return Bad(w + ".type", "missing (" + BuiltinNames() + ")");
    auto type = Str(n["type"], w + ".type");
    if (!type.ok()) return type.status();
    b.type = *type;
    if (b.type == "local" || !backends::BuiltinRegistry().Has(b.type)) {
      return Bad(w + ".type", "unknown backend type '" + b.type + "' (" + BuiltinNames() + ")");
    }
    if (backends::BuiltinRegistry().Has(b.name) && b.name != b.type) {
      return Bad(w + ".type", "'" + b.name + "' is the built-in " + b.name +
                                  " backend's name; name this " + b.type + " backend otherwise");
    }
    b.kube = c->kubernetes;  // what it does not set, the top-level kubernetes: gives
    const auto kube_only = [&](const std::string& field, const YAML::Node&) {
      return b.type == "kubernetes" ? Status::Ok() : Bad(field, "only for type: kubernetes");
    };
    st = cfg::ReadStrs(n, w,
                       {{"kubeconfig", &b.kube.kubeconfig},
                        {"context", &b.kube.context},
                        {"namespace", &b.kube.ns}},
                       kube_only);
    if (!st.ok()) return st;
    if (n["kubeconfig"]) b.kube.in_cluster = false;
    if (n["in_cluster"]) {
      st = kube_only(w + ".in_cluster", n["in_cluster"]);
      if (st.ok()) st = cfg::ReadBool(n["in_cluster"], w + ".in_cluster", &b.kube.in_cluster);
      if (!st.ok()) return st;
      if (b.kube.in_cluster && n["kubeconfig"])
        return Bad(w, "in_cluster and kubeconfig exclude each other");
    }
    c->backends.push_back(b);
  }
  return Status::Ok();
}

Status ParseQueueBackends(const YAML::Node& n, const std::string& w, const EngineConfig& c,
                          QueueRoute* q) {
  if (n["backend"] && n["backends"]) {
    return Bad(w + ".backends", "a queue has backend: (one) or backends: (several), not both");
  }
  const auto known = [&](const std::string& name, const std::string& field) -> Status {
    if (name == "local" || c.FindBackend(name) != nullptr || backends::BuiltinRegistry().Has(name))
      return Status::Ok();
    std::string names = "local, " + BuiltinNames();
    for (const NamedBackend& b : c.backends) names += ", " + b.name;
    return Bad(field, "unknown backend '" + name + "' (" + names + ")");
  };
  if (n["backend"]) {
    auto b = Str(n["backend"], w + ".backend");
    if (!b.ok()) return b.status();
    Status st = known(*b, w + ".backend");
    if (!st.ok()) return st;
    q->backend = *b;
    if (q->external()) {
      q->backends = {q->backend};
      q->backend_types = {c.TypeOf(q->backend)};
    }
    return Status::Ok();
  }
  if (!n["backends"]) return Status::Ok();
  const std::string f = w + ".backends";
  if (!n["backends"].IsSequence() || n["backends"].size() == 0)
    return Bad(f, "expected a list of backend names in order of preference, e.g. [kube-a, slurm]");
  auto list = cfg::StrList(n["backends"], f);
  if (!list.ok()) return list.status();
  std::set<std::string> seen;
  for (const std::string& name : *list) {
    Status st = known(name, f);
    if (!st.ok()) return st;
    if (name == "local") {
      return Bad(f,
                 "'local' (node agents) cannot share a queue with other backends; give it a "
                 "queue of its own");
    }
    if (!seen.insert(name).second) return Bad(f, "'" + name + "' is listed twice");
    q->backends.push_back(name);
    q->backend_types.push_back(c.TypeOf(name));
  }
  q->backend = q->backends.front();
  return Status::Ok();
}

}  // namespace tessera::api
