// The config loader's typed reads, shared by its files (config.cc, config_identities.cc,
// config_kube.cc): each error is an InvalidArgument "config: <where>: <what>". Internal to src/api.
#pragma once

#include <yaml-cpp/yaml.h>

#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "api/config.h"
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

// A duration in milliseconds, in the one grammar (model/duration.h): "500ms", "10s", "1.5m".
inline Result<int64_t> Duration(const YAML::Node& n, const std::string& where) {
  if (!n || !n.IsScalar()) return Bad(where, "expected a duration such as 10s or 500ms");
  auto r = policy::GetDurationMs(n, where);
  if (!r.ok()) return Prefixed(r.status());
  return r;
}

inline Result<std::vector<std::string>> StrList(const YAML::Node& n, const std::string& where) {
  if (!n) return std::vector<std::string>{};  // optional: none
  auto r = policy::GetStrings(n, where);
  if (!r.ok()) return Prefixed(r.status());
  return r;
}

// An optional true/false field: `v` (undefined when the key is absent) into *out.
inline Status ReadBool(const YAML::Node& v, const std::string& where, bool* out) {
  if (!v) return Status::Ok();
  auto r = policy::GetBool(v, where);
  if (!r.ok()) return Prefixed(r.status());
  *out = *r;
  return Status::Ok();
}

// An optional duration field: `v` (undefined when the key is absent) into *ms.
inline Status ReadDuration(const YAML::Node& v, const std::string& where, int64_t* ms) {
  if (!v) return Status::Ok();
  auto r = Duration(v, where);
  if (!r.ok()) return r.status();
  *ms = *r;
  return Status::Ok();
}

// The optional string fields of map `n`: each key of `fields` that `n` has, read into its target;
// errors name "<where>.<key>". `check`, when given, sees each present field's name and node
// before it is read: an error from it refuses the field.
using StrFields = std::initializer_list<std::pair<const char*, std::string*>>;
using FieldCheck = std::function<Status(const std::string& field, const YAML::Node& v)>;
inline Status ReadStrs(const YAML::Node& n, const std::string& where, StrFields fields,
                       const FieldCheck& check = nullptr) {
  for (auto [key, out] : fields) {
    if (!n[key]) continue;
    const std::string field = where + "." + key;
    if (check) {
      if (Status st = check(field, n[key]); !st.ok()) return st;
    }
    auto v = Str(n[key], field);
    if (!v.ok()) return v.status();
    *out = *v;
  }
  return Status::Ok();
}

// The first of `items` whose `key` is `value`, or nullptr.
template <typename T>
const T* FindBy(const std::vector<T>& items, std::string T::*key, const std::string& value) {
  for (const T& t : items) {
    if (t.*key == value) return &t;
  }
  return nullptr;
}

// Each named entry's name is set and unique.
template <typename T>
inline Status CheckUnique(const std::vector<T>& items, const std::string& what) {
  std::set<std::string> seen;
  for (const T& t : items) {
    if (t.name.empty()) return Bad(what, "an entry has no name");
    if (!seen.insert(t.name).second) return Bad(what, "duplicate name '" + t.name + "'");
  }
  return Status::Ok();
}

// Only `known` keys in `n`.
inline Status CheckKeys(const YAML::Node& n, const std::string& where,
                        const std::set<std::string>& known) {
  Status s = policy::KnownKeys(n, where, known);
  return s.ok() ? s : Prefixed(s);
}

// identities: (config_identities.cc).
Status ReadIdentities(const YAML::Node& ids, std::vector<Identity>* out);
// oidc: (config_identities.cc).
Status ReadOidc(const YAML::Node& root, EngineConfig* c);

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
// config_backends.cc: the `backends:` block, and a queue's `backend:`/`backends:`.
Status ReadNamedBackends(const YAML::Node& root, EngineConfig* c);
Status ParseQueueBackends(const YAML::Node& n, const std::string& where, const EngineConfig& c,
                          QueueRoute* q);
}  // namespace tessera::api
