// The config loader's typed reads, shared by its files (config.cc, config_kube.cc): each error
// is an InvalidArgument "config: <where>: <what>". Internal to src/api.
#pragma once

#include <yaml-cpp/yaml.h>

#include <limits>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/quantity.h"
#include "policy/yaml_fields.h"

namespace tessera::api::cfg {

inline Status Bad(const std::string& where, const std::string& what) {
  return Status::InvalidArgument("config: " + where + ": " + what);
}

// The policy loader's typed reads (policy/yaml_fields.h), their errors prefixed "config: ".
inline Status Prefixed(const Status& s) {
  return Status::InvalidArgument("config: " + s.message());
}

inline Result<std::string> Str(const YAML::Node& n, const std::string& where) {
  auto r = policy::GetString(n, where);
  if (!r.ok()) return Prefixed(r.status());
  return r;
}

inline Result<int64_t> Duration(const YAML::Node& n, const std::string& where) {
  if (!n || !n.IsScalar()) return Bad(where, "expected a duration such as 10s or 500ms");
  std::string s = n.as<std::string>();
  int64_t mult = 1000;
  std::string num = s;
  if (s.size() > 2 && s.substr(s.size() - 2) == "ms") {
    mult = 1;
    num = s.substr(0, s.size() - 2);
  } else if (!s.empty() &&
             (s.back() == 's' || s.back() == 'm' || s.back() == 'h' || s.back() == 'd')) {
    mult = s.back() == 's' ? 1000 : s.back() == 'm' ? 60000 : s.back() == 'h' ? 3600000 : 86400000;
    num = s.substr(0, s.size() - 1);
  }
  auto v = ParseNonNegativeInt(num);
  if (!v.ok() || *v > (int64_t{1} << 40) || *v > std::numeric_limits<int64_t>::max() / mult) {
    return Bad(where, "'" + s + "' is not a duration such as 10s, 500ms, 2m, 1h, 90d");
  }
  return *v * mult;
}

inline Result<std::vector<std::string>> StrList(const YAML::Node& n, const std::string& where) {
  if (!n) return std::vector<std::string>{};  // optional: none
  auto r = policy::GetStrings(n, where);
  if (!r.ok()) return Prefixed(r.status());
  return r;
}

}  // namespace tessera::api::cfg

namespace tessera::api {
struct QueueRoute;
struct EngineConfig;
// config_kube.cc: a kubernetes queue's keys, and the `kubernetes:` block.
const std::set<std::string>& KubeQueueKeys();
Status ParseKubeRoute(const YAML::Node& n, const std::string& where, QueueRoute* q);
Status ReadKubeSettings(const YAML::Node& root, EngineConfig* c);
// The cluster name, when a queue uses Kubernetes: a label value short enough for Job names.
Status CheckKubeCluster(const std::string& cluster);
}  // namespace tessera::api
