#include "api/config.h"

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "api/config_fields.h"
#include "backends/backend.h"
#include "model/duration.h"
#include "model/isolation.h"
#include "model/quantity.h"
#include "partition/catalog.h"
#include "policy/policy_yaml.h"
#include "policy/yaml_fields.h"

namespace tessera::api {
namespace {

using cfg::Bad;
using cfg::Duration;
using cfg::Prefixed;
using cfg::Str;
using cfg::StrList;

template <typename T>
Status CheckUnique(const std::vector<T>& items, const std::string& what) {
  std::set<std::string> seen;
  for (const T& t : items) {
    if (t.name.empty()) return Bad(what, "an entry has no name");
    if (!seen.insert(t.name).second) return Bad(what, "duplicate name '" + t.name + "'");
  }
  return Status::Ok();
}

Status CheckKeys(const YAML::Node& n, const std::string& where,
                 const std::set<std::string>& known) {
  Status s = policy::KnownKeys(n, where, known);
  return s.ok() ? s : Prefixed(s);
}

// A queue's route: which backend runs its jobs and how (the keys beyond the policy's).
Result<QueueRoute> ParseRoute(const YAML::Node& n, const std::string& w) {
  QueueRoute q;
  if (n["requeue_on_loss"]) {
    auto v = policy::GetBool(n["requeue_on_loss"], w + ".requeue_on_loss");
    if (!v.ok()) return Prefixed(v.status());
    q.requeue_on_loss = *v;
  }
  if (n["backend"]) {
    auto b = Str(n["backend"], w + ".backend");
    if (!b.ok()) return b.status();
    q.backend = *b;
    const auto& reg = backends::BuiltinRegistry();
    if (q.backend != "local" && !reg.Has(q.backend)) {
      std::string names = "local";
      for (const auto& name : reg.Names()) names += ", " + name;
      return Bad(w + ".backend", "unknown backend '" + q.backend + "' (" + names + ")");
    }
  }
  for (auto [key, field] : std::initializer_list<std::pair<const char*, std::string*>>{
           {"partition", &q.partition},
           {"template", &q.template_path},
           {"gpu_type", &q.gpu_type},
           {"gres_whole", &q.gres_whole},
           {"gres_share", &q.gres_share},
           {"gres_partition", &q.gres_partition},
           {"cap_library", &q.cap_library},
           {"mig_model", &q.mig_model}}) {
    if (!n[key]) continue;
    if (!q.external())
      return Bad(w + "." + key,
                 "only for a queue with an external backend (slurm, pbs, kubernetes)");
    auto v = Str(n[key], w + "." + key);
    if (!v.ok()) return v.status();
    *field = *v;
  }
  if (n["shard_memory"]) {
    if (!n["shard_memory"].IsScalar())
      return Bad(w + ".shard_memory", "expected a size such as 1GiB");
    auto v = ParseMemoryMiB(n["shard_memory"].as<std::string>());
    if (!v.ok() || *v <= 0)
      return Bad(w + ".shard_memory", "expected a positive size such as 1GiB");
    q.shard_mib = *v;
  }
  if (n["run_as_root"]) {
    auto v = policy::GetBool(n["run_as_root"], w + ".run_as_root");
    if (!v.ok()) return Prefixed(v.status());
    q.run_as_root = *v;
  }
  if (n["overcommit"] && !n["swap"]) return Bad(w + ".overcommit", "needs swap: true");
  if (n["max_runtime"] && q.external()) {
    return Bad(w + ".max_runtime",
               "only for queues run by node agents (backend local); a batch system's queue stops "
               "its jobs at their walltime");
  }
  if (n["swap"]) {
    auto v = policy::GetBool(n["swap"], w + ".swap");
    if (!v.ok()) return Prefixed(v.status());
    if (*v && q.external()) {
      return Bad(w + ".swap", "only for queues run by node agents (backend local)");
    }
    int percent = 200;
    if (n["overcommit"]) {
      // A factor with up to two decimals, in whole percent: exact, no floating point.
      auto text = Str(n["overcommit"], w + ".overcommit");
      if (!text.ok()) return text.status();
      const std::string& t = *text;
      const size_t dot = t.find('.');
      const std::string whole = t.substr(0, dot);
      const std::string frac = dot == std::string::npos ? "" : t.substr(dot + 1);
      const auto digits = [](const std::string& s) {
        return !s.empty() && s.size() <= 3 &&
               std::all_of(s.begin(), s.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
      };
      if (!digits(whole) || (dot != std::string::npos && (!digits(frac) || frac.size() > 2))) {
        return Bad(w + ".overcommit", "expected a factor such as 2 or 1.5, not '" + t + "'");
      }
      percent = std::stoi(whole) * 100 +
                (frac.empty() ? 0 : std::stoi(frac) * (frac.size() == 1 ? 10 : 1));
      if (percent < 100 || percent > 1000) {
        return Bad(w + ".overcommit",
                   "must be from 1 to 10 (caps may sum to that many times a device)");
      }
    }
    q.swap_overcommit_percent = *v ? percent : 0;
  }
  if (n["isolation"]) {
    auto v = Str(n["isolation"], w + ".isolation");
    if (!v.ok()) return v.status();
    const int rank = IsolationRank(*v);
    if (rank < 1)
      return Bad(w + ".isolation",
                 "must be one of hardware, driver, mps, preload, not '" + *v + "'");
    q.min_isolation = rank;
  }
  if (q.backend == "pbs" && (!q.mig_model.empty() || !q.gres_partition.empty())) {
    return Bad(w + (q.mig_model.empty() ? ".gres_partition" : ".mig_model"),
               "the PBS backend maps no MIG instances");
  }
  if (!q.mig_model.empty()) {
    const partition::GpuModel* m = partition::Catalog::BuiltIn().Find(q.mig_model);
    if (m == nullptr || !m->is_mig()) {
      std::string mig;
      for (const auto& g : partition::Catalog::BuiltIn().models()) {
        if (g.is_mig()) mig += (mig.empty() ? "" : ", ") + g.name;
      }
      return Bad(w + ".mig_model", "'" + q.mig_model + "' is not a MIG model (" + mig + ")");
    }
    q.mig_model = m->name;
  }
  if (q.backend == "kubernetes") {
    Status st = ParseKubeRoute(n, w, &q);
    if (!st.ok()) return st;
  } else {
    for (const std::string& key : KubeQueueKeys()) {
      if (n[key]) return Bad(w + "." + key, "only for a queue with backend: kubernetes");
    }
  }
  if (!q.template_path.empty()) {
    std::ifstream t(q.template_path);
    if (!t) return Bad(w + ".template", "cannot read '" + q.template_path + "'");
  }
  return q;
}

}  // namespace

const char* RoleName(Role r) {
  switch (r) {
    case Role::kAdmin:
      return "admin";
    case Role::kUser:
      return "user";
    case Role::kAgent:
      return "agent";
    case Role::kViewer:
      return "viewer";
    case Role::kMetrics:
      return "metrics";
  }
  return "?";
}

Result<Role> ParseRole(const std::string& name) {
  for (Role r : {Role::kAdmin, Role::kUser, Role::kAgent, Role::kViewer, Role::kMetrics}) {
    if (name == RoleName(r)) return r;
  }
  return Status::InvalidArgument("unknown role '" + name +
                                 "' (admin, user, agent, viewer, metrics)");
}

// "2027-06-30", "2027-06-30T18:00:00Z" or with an offset ("+02:00"): milliseconds since the
// epoch (UTC), or an error saying the forms.
Result<int64_t> ParseTimestampMs(const std::string& text) {
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, se = 0;
  char tail[8] = {0};
  int consumed = 0;
  const Status bad = Status::InvalidArgument(
      "'" + text + "' is not a date (2027-06-30) or UTC time (2027-06-30T18:00:00Z)");
  if (std::sscanf(text.c_str(), "%4d-%2d-%2d%n", &y, &mo, &d, &consumed) != 3 || consumed != 10)
    return bad;
  int64_t offset_min = 0;
  if (text.size() > 10) {
    if (std::sscanf(text.c_str() + 10, "T%2d:%2d:%2d%7s", &h, &mi, &se, tail) != 4) return bad;
    const std::string z = tail;
    if (z == "Z") {
    } else if (z.size() == 6 && (z[0] == '+' || z[0] == '-') && z[3] == ':' &&
               std::isdigit(static_cast<unsigned char>(z[1])) &&
               std::isdigit(static_cast<unsigned char>(z[2])) &&
               std::isdigit(static_cast<unsigned char>(z[4])) &&
               std::isdigit(static_cast<unsigned char>(z[5]))) {
      offset_min =
          (z[0] == '-' ? -1 : 1) * (std::stoi(z.substr(1, 2)) * 60 + std::stoi(z.substr(4)));
    } else {
      return bad;
    }
  }
  if (y < 1970 || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || se > 60) return bad;
  // Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
  const int yy = mo <= 2 ? y - 1 : y;
  const int era = yy / 400;
  const int yoe = yy - era * 400;
  const int doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  const int64_t days = int64_t{era} * 146097 + doe - 719468;
  return ((days * 24 + h) * 60 + mi - offset_min) * 60'000 + int64_t{se} * 1000;
}

std::string Sha256Hex(const std::string& text) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(text.data(), text.size(), md, &len, EVP_sha256(), nullptr);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

std::string NewToken() {
  unsigned char buf[20];
  RAND_bytes(buf, sizeof buf);
  static const char* kHex = "0123456789abcdef";
  std::string out = "tsk_";
  for (unsigned char c : buf) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

const Identity* EngineConfig::FindIdentityByTokenHash(const std::string& hash) const {
  for (const Identity& i : identities) {
    if (i.token_sha256 == hash) return &i;
  }
  return nullptr;
}
const quota::GroupSpec* EngineConfig::FindGroup(const std::string& name) const {
  for (const auto& g : policy.groups) {
    if (g.name == name) return &g;
  }
  return nullptr;
}
const quota::QueueSpec* EngineConfig::FindQueue(const std::string& name) const {
  for (const auto& q : policy.queues) {
    if (q.name == name) return &q;
  }
  return nullptr;
}
const quota::ProfileSpec* EngineConfig::FindProfile(const std::string& name) const {
  for (const auto& p : policy.profiles) {
    if (p.name == name) return &p;
  }
  return nullptr;
}
const QueueRoute* EngineConfig::FindRoute(const std::string& queue) const {
  for (const auto& r : routes) {
    if (r.queue == queue) return &r;
  }
  return nullptr;
}

bool Identity::MaySpeakFor(const std::string& node) const {
  if (role == Role::kAdmin || (role == Role::kAgent && nodes.empty())) return true;
  if (role != Role::kAgent) return false;
  for (const std::string& p : nodes) {
    if (p.back() == '*' ? node.compare(0, p.size() - 1, p, 0, p.size() - 1) == 0 : node == p)
      return true;
  }
  return false;
}

// A portable Unix account name: a lower-case letter or _, then letters, digits, _ or -; 32 at most.
bool IsUnixAccountName(const std::string& s) {
  bool ok = !s.empty() && s.size() <= 32 &&
            (std::islower(static_cast<unsigned char>(s[0])) || s[0] == '_');
  for (char c : s)
    ok = ok && (std::islower(static_cast<unsigned char>(c)) ||
                std::isdigit(static_cast<unsigned char>(c)) || c == '_' || c == '-');
  return ok;
}

// identities: [{name, role, groups, nodes, run_as, run_as_root, token | token_sha256}]; tokens
// kept as SHA-256 hashes.
static Status ReadIdentities(const YAML::Node& ids, std::vector<Identity>* out) {
  Status st;
  if (!ids || !ids.IsSequence() || ids.size() == 0) {
    return Bad("identities", "at least one identity is needed");
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string w = "identities[" + std::to_string(i) + "]";
    const YAML::Node n = ids[i];
    if (n["run_as_root"]) {
      return Bad(
          w + ".run_as_root",
          "root is granted per queue: set run_as_root on the queue whose jobs must run as root");
    }
    st = CheckKeys(
        n, w, {"name", "role", "groups", "token", "token_sha256", "nodes", "run_as", "expires"});
    if (!st.ok()) return st;
    Identity id;
    auto name = Str(n["name"], w + ".name");
    if (!name.ok()) return name.status();
    id.name = *name;
    auto role = ParseRole(n["role"] ? n["role"].as<std::string>() : "user");
    if (!role.ok()) return Bad(w + ".role", role.status().message());
    id.role = *role;
    if (n["expires"]) {
      auto at = ParseTimestampMs(n["expires"].as<std::string>());
      if (!at.ok()) return Bad(w + ".expires", at.status().message());
      id.expires_ms = *at;
    }
    auto groups = StrList(n["groups"], w + ".groups");
    if (!groups.ok()) return groups.status();
    id.groups = *groups;
    auto nodes = StrList(n["nodes"], w + ".nodes");
    if (!nodes.ok()) return nodes.status();
    if (!nodes->empty() && id.role != Role::kAgent)
      return Bad(w + ".nodes", "only agents speak for nodes");
    for (const std::string& pattern : *nodes) {
      if (pattern.empty() || pattern.find('*') < pattern.size() - 1) {
        return Bad(w + ".nodes", "'" + pattern + "' is not a node name or a prefix ending in '*'");
      }
    }
    id.nodes = *nodes;
    if (n["run_as"]) {
      auto account = Str(n["run_as"], w + ".run_as");
      if (!account.ok()) return account.status();
      if (!IsUnixAccountName(*account))
        return Bad(w + ".run_as", "'" + *account + "' is not a Unix account name");
      if (*account == "root") {
        return Bad(w + ".run_as",
                   "jobs run as root only on a queue with run_as_root: true, never per identity");
      }
      id.run_as = *account;
    }
    if (n["token_sha256"]) {
      id.token_sha256 = n["token_sha256"].as<std::string>();
      // As sha256sum prints it; an upper-case digest (as some tools print it) is taken too.
      for (char& c : id.token_sha256)
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (id.token_sha256.size() != 64 ||
          id.token_sha256.find_first_not_of("0123456789abcdef") != std::string::npos) {
        return Bad(w + ".token_sha256", "expected 64 hex digits");
      }
    } else if (n["token"]) {
      std::string t = n["token"].as<std::string>();
      if (t.size() < 8) return Bad(w + ".token", "too short (at least 8 characters)");
      id.token_sha256 = Sha256Hex(t);
    } else {
      return Bad(w, "needs token or token_sha256");
    }
    (*out).push_back(id);
  }
  st = CheckUnique((*out), "identities");
  if (!st.ok()) return st;
  for (const auto& a : (*out)) {
    for (const auto& b : (*out)) {
      if (&a != &b && a.token_sha256 == b.token_sha256) {
        return Bad("identities", "'" + a.name + "' and '" + b.name + "' share a token");
      }
    }
  }
  return Status::Ok();
}

// An optional duration setting, in milliseconds; `positive` refuses 0.
static Status ReadMs(const YAML::Node& root, const char* key, bool positive, int64_t* ms) {
  if (!root[key]) return Status::Ok();
  auto d = Duration(root[key], key);
  if (!d.ok()) return d.status();
  if (positive && *d <= 0) return Bad(key, "must be positive");
  *ms = *d;
  return Status::Ok();
}

// The server's own settings: cluster name, timings, schedule_on_submit, backend_nice.
static Status ReadServerSettings(const YAML::Node& root, EngineConfig* c) {
  if (root["cluster"]) {
    auto s = Str(root["cluster"], "cluster");
    if (!s.ok()) return s.status();
    c->cluster = *s;
  }
  Status st = ReadMs(root, "heartbeat_timeout", false, &c->heartbeat_timeout_ms);
  if (st.ok()) st = ReadMs(root, "heartbeat_interval", true, &c->heartbeat_interval_ms);
  if (st.ok() && c->heartbeat_interval_ms * 2 > c->heartbeat_timeout_ms) {
    return Bad("heartbeat_interval", "must be at most half of heartbeat_timeout (" +
                                         FormatDurationMs(c->heartbeat_timeout_ms) +
                                         "), or nodes are lost between heartbeats");
  }
  if (st.ok()) st = ReadMs(root, "cancel_grace", false, &c->cancel_grace_ms);
  if (st.ok()) st = ReadMs(root, "partition_stop", false, &c->partition_stop_ms);
  if (st.ok() && c->partition_stop_ms > 0 && c->partition_stop_ms < c->heartbeat_timeout_ms) {
    return Bad("partition_stop", "must be at least heartbeat_timeout (" +
                                     FormatDurationMs(c->heartbeat_timeout_ms) +
                                     "), or agents stop their jobs before the node is lost");
  }
  if (st.ok()) st = ReadMs(root, "cycle", true, &c->cycle_ms);
  if (!st.ok()) return st;
  if (root["schedule_on_submit"]) {
    auto v = policy::GetBool(root["schedule_on_submit"], "schedule_on_submit");
    if (!v.ok()) return Prefixed(v.status());
    c->schedule_on_submit = *v;
  }
  if (root["metrics_public"]) {
    auto v = policy::GetBool(root["metrics_public"], "metrics_public");
    if (!v.ok()) return Prefixed(v.status());
    c->metrics_public = *v;
  }
  st = ReadMs(root, "backend_poll", true, &c->backend_poll_ms);
  if (st.ok()) st = ReadMs(root, "utilization_sample", true, &c->utilization_sample_ms);
  if (st.ok()) st = ReadMs(root, "retention", false, &c->retention_ms);
  if (st.ok()) st = ReadMs(root, "auth_failed_retention", false, &c->auth_failed_retention_ms);
  if (st.ok()) st = ReadMs(root, "idle_after", true, &c->idle_after_ms);
  if (st.ok() && root["unhealthy_jobs"]) {
    auto v = Str(root["unhealthy_jobs"], "unhealthy_jobs");
    if (!v.ok()) return v.status();
    if (*v != "requeue" && *v != "finish")
      return Bad("unhealthy_jobs", "must be requeue or finish, not '" + *v + "'");
    c->unhealthy_requeue = *v == "requeue";
  }
  if (st.ok()) st = ReadMs(root, "utilization_fine_keep", true, &c->utilization_fine_keep_ms);
  if (st.ok()) st = ReadMs(root, "utilization_keep", true, &c->utilization_keep_ms);
  if (st.ok() && root["max_requests_per_identity"]) {
    int64_t n = -1;
    if (!YAML::convert<int64_t>::decode(root["max_requests_per_identity"], n) || n < 1 ||
        n > 100'000) {
      return Bad("max_requests_per_identity", "must be an integer from 1 to 100000");
    }
    c->max_requests_per_identity = n;
  }
  if (st.ok() && root["max_jobs_per_identity"]) {
    int64_t n = -1;
    if (!YAML::convert<int64_t>::decode(root["max_jobs_per_identity"], n) || n < 1 ||
        n > 100'000'000) {
      return Bad("max_jobs_per_identity", "must be an integer from 1 to 100000000");
    }
    c->max_jobs_per_identity = n;
  }
  if (st.ok() && root["ended_jobs_in_memory"]) {
    int64_t n = -1;
    if (!YAML::convert<int64_t>::decode(root["ended_jobs_in_memory"], n) || n < 1 ||
        n > 10'000'000) {
      return Bad("ended_jobs_in_memory", "must be an integer from 1 to 10000000");
    }
    c->ended_jobs_in_memory = n;
  }
  if (st.ok() && root["max_output"]) {
    auto q = ParseMemoryMiB(root["max_output"].as<std::string>());
    if (!q.ok()) return Bad("max_output", q.status().message());
    if (*q <= 0 || *q > std::numeric_limits<int64_t>::max() / (1024 * 1024)) {
      return Bad("max_output", "expected a size such as 1GiB");
    }
    c->max_output_bytes = *q * 1024 * 1024;
  }
  if (!st.ok()) return st;
  if (root["backend_nice"]) {
    int n = -1;
    if (!YAML::convert<int>::decode(root["backend_nice"], n) || n < 0 || n > 19) {
      return Bad("backend_nice", "must be an integer from 0 to 19");
    }
    c->backend_nice = n;
  }
  return Status::Ok();
}

const std::set<std::string>& ServerQueueKeys() {
  static const std::set<std::string> kKeys = {
      "requeue_on_loss", "backend",    "partition",      "template",     "gpu_type",
      "gres_whole",      "gres_share", "gres_partition", "shard_memory", "cap_library",
      "mig_model",       "swap",       "overcommit",     "run_as_root",  "isolation"};
  static const std::set<std::string> kAll = [] {
    std::set<std::string> all = kKeys;
    all.insert(KubeQueueKeys().begin(), KubeQueueKeys().end());
    return all;
  }();
  return kAll;
}

// `oidc: {issuer, audience, client_id, groups_claim, username_claim, account_claim, clock_skew,
// ca_file, roles: {admin: [group...], user: [...], viewer: [...], metrics: [...]}}`: tokens of an
// OpenID Connect provider accepted beside the static ones (auth/oidc.h).
static Status ReadOidc(const YAML::Node& root, EngineConfig* c) {
  const YAML::Node n = root["oidc"];
  if (!n) return Status::Ok();
  if (!n.IsMap()) return Bad("oidc", "expected a map (issuer, client_id, roles, ...)");
  Status st = CheckKeys(n, "oidc",
                        {"issuer", "audience", "client_id", "groups_claim", "username_claim",
                         "account_claim", "clock_skew", "ca_file", "scopes", "roles"});
  if (!st.ok()) return st;
  auth::OidcSettings& o = c->oidc;
  for (auto [key, out] : {std::pair<const char*, std::string*>{"issuer", &o.issuer},
                          {"audience", &o.audience},
                          {"client_id", &o.client_id},
                          {"groups_claim", &o.groups_claim},
                          {"username_claim", &o.username_claim},
                          {"account_claim", &o.account_claim},
                          {"ca_file", &o.ca_file},
                          {"scopes", &o.scopes}}) {
    if (!n[key]) continue;
    auto v = Str(n[key], std::string("oidc.") + key);
    if (!v.ok()) return v.status();
    if (v->empty()) return Bad(std::string("oidc.") + key, "must not be empty");
    *out = *v;
  }
  if (o.issuer.empty()) return Bad("oidc.issuer", "required (the provider's issuer URL)");
  if (o.issuer.rfind("https://", 0) != 0 && o.issuer.rfind("http://", 0) != 0)
    return Bad("oidc.issuer", "'" + o.issuer + "' is not an http(s) URL");
  if (o.client_id.empty() && o.audience.empty())
    return Bad("oidc", "needs client_id (or audience): the audience its tokens must carry");
  if (n["clock_skew"]) {
    auto d = Duration(n["clock_skew"], "oidc.clock_skew");
    if (!d.ok()) return d.status();
    o.clock_skew_ms = *d;
  }
  if (n["roles"]) {
    if (!n["roles"].IsMap()) return Bad("oidc.roles", "expected a map of role: [group, ...]");
    for (const auto& kv : n["roles"]) {
      const std::string role = kv.first.as<std::string>();
      if (role != "admin" && role != "user" && role != "viewer" && role != "metrics") {
        return Bad("oidc.roles." + role,
                   "unknown role (admin, user, viewer, metrics; agents use static tokens)");
      }
      auto groups = StrList(kv.second, "oidc.roles." + role);
      if (!groups.ok()) return groups.status();
      o.roles[role] = *groups;
    }
  }
  c->oidc_verifier = std::make_shared<auth::OidcVerifier>(o, auth::HttpFetcher(o.ca_file));
  return Status::Ok();
}

// The quota policy, with the server's extra keys allowed; one pool with every form when none is
// given.
static Result<quota::PolicySpec> ReadPolicy(const YAML::Node& root) {
  policy::PolicyKeys keys;
  keys.extra_root = {"cluster",
                     "heartbeat_timeout",
                     "heartbeat_interval",
                     "cancel_grace",
                     "ended_jobs_in_memory",
                     "partition_stop",
                     "cycle",
                     "schedule_on_submit",
                     "backend_poll",
                     "backend_nice",
                     "utilization_sample",
                     "retention",
                     "auth_failed_retention",
                     "max_output",
                     "max_jobs_per_identity",
                     "max_requests_per_identity",
                     "identities",
                     "idle_after",
                     "unhealthy_jobs",
                     "utilization_fine_keep",
                     "utilization_keep",
                     "metrics_public",
                     "oidc",
                     "kubernetes"};
  keys.extra_queue = ServerQueueKeys();
  keys.require_queues = true;
  auto pol = policy::ParsePolicy(root, keys);
  if (!pol.ok()) return Prefixed(pol.status());
  if (pol->pools.empty()) {
    pol->pools.push_back(
        {"default", {AllocationForm::kWhole, AllocationForm::kPartition, AllocationForm::kShare}});
  }
  return pol;
}

static Status CheckIdentityGroups(const EngineConfig& c) {
  for (const quota::GroupSpec& g : c.policy.groups) {
    if (!g.run_as.empty() && !IsUnixAccountName(g.run_as)) {
      return Bad("groups[" + g.name + "].run_as", "'" + g.run_as + "' is not a Unix account name");
    }
    if (g.run_as == "root") {
      return Bad("groups[" + g.name + "].run_as",
                 "jobs run as root only on a queue with run_as_root: true, never per group");
    }
  }
  for (size_t i = 0; i < c.identities.size(); ++i) {
    for (const auto& g : c.identities[i].groups) {
      if (!c.FindGroup(g)) {
        return Bad("identities[" + std::to_string(i) + "].groups", "unknown group '" + g + "'");
      }
    }
  }
  return Status::Ok();
}

// The Unix account `id`'s jobs run under outside run_as_root queues: its own run_as, else its
// first group's, else its own name (when that is an account name; "" otherwise).
std::string EngineConfig::AccountOf(const Identity& id, const std::string& group) const {
  if (!id.run_as.empty()) return id.run_as;
  const quota::GroupSpec* g =
      FindGroup(group.empty() && !id.groups.empty() ? id.groups.front() : group);
  if (g != nullptr && !g->run_as.empty()) return g->run_as;
  return IsUnixAccountName(id.name) && id.name != "root" ? id.name : "";
}

std::vector<std::string> ConfigWarnings(const EngineConfig& c) {
  std::vector<std::string> out;
  std::map<std::string, std::vector<std::string>> by_account;
  for (const Identity& id : c.identities) {
    if (id.role == Role::kViewer || id.role == Role::kMetrics) continue;  // they run no jobs
    if (id.role == Role::kAgent) {
      if (id.nodes.empty()) {
        out.push_back("identity '" + id.name +
                      "' (agent) has no nodes: it speaks for every node; list its nodes (nodes: "
                      "[name, prefix*])");
      }
      continue;
    }
    for (const std::string& g : id.groups.empty() ? std::vector<std::string>{""} : id.groups) {
      const std::string account = c.AccountOf(id, g);
      if (account.empty()) {
        out.push_back("identity '" + id.name +
                      "' has no Unix account: its name is not one and neither it nor group '" + g +
                      "' sets run_as, so its jobs are refused; set run_as");
        continue;
      }
      auto& names = by_account[account];
      if (std::find(names.begin(), names.end(), id.name) == names.end()) names.push_back(id.name);
    }
  }
  for (const quota::GroupSpec& g : c.policy.groups) {
    if (g.run_as.empty()) continue;
    out.push_back(
        "group '" + g.name + "' sets run_as '" + g.run_as +
        "' for all its members: their jobs share one Unix account, so each can read the others' "
        "environments and signal their jobs; prefer run_as per identity");
  }
  for (const auto& [account, names] : by_account) {
    if (names.size() < 2) continue;
    std::string list;
    for (const std::string& n : names) list += (list.empty() ? "'" : ", '") + n + "'";
    out.push_back("identities " + list + " run their jobs as the one Unix account '" + account +
                  "': each can read the others' job environments and signal their jobs");
  }
  for (const QueueRoute& r : c.routes) {
    if (r.run_as_root)
      out.push_back("queue '" + r.queue + "' runs its jobs as root (run_as_root: true)");
  }
  return out;
}

// Each queue's route (backend and its keys), in the policy's queue order.
static Status ReadRoutes(const YAML::Node& queues, EngineConfig* c) {
  for (size_t i = 0; i < queues.size(); ++i) {
    auto route = ParseRoute(queues[i], "queues[" + policy::EntryName(queues[i], i) + "]");
    if (!route.ok()) return route.status();
    route->queue = c->policy.queues[i].name;
    if (route->backend == "kubernetes") {
      Status st = CheckKubeCluster(c->cluster);
      if (!st.ok()) return st;
    }
    c->policy.queues[i].external = route->external();
    c->policy.queues[i].swap_overcommit_percent = route->swap_overcommit_percent;
    c->policy.queues[i].min_isolation = route->min_isolation;
    // Kubernetes reports its capacity: admission keeps within it and reclaims by suspending.
    c->policy.queues[i].external_pool = route->backend == "kubernetes" ? "kubernetes" : "";
    c->routes.push_back(*route);
  }
  return Status::Ok();
}

Result<EngineConfig> ParseConfig(const std::string& yaml_text) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument("config: not valid YAML: " + std::string(e.what()));
  }
  if (!root.IsMap()) return Status::InvalidArgument("config: expected a YAML map at the top");
  try {
    EngineConfig c;
    c.source_yaml = yaml_text;
    Status st = ReadServerSettings(root, &c);
    if (st.ok()) st = ReadKubeSettings(root, &c);
    if (st.ok()) st = ReadOidc(root, &c);
    if (!st.ok()) return st;
    st = ReadIdentities(root["identities"], &c.identities);
    if (!st.ok()) return st;
    auto pol = ReadPolicy(root);
    if (!pol.ok()) return pol.status();
    c.policy = std::move(*pol);
    st = CheckIdentityGroups(c);
    if (!st.ok()) return st;
    st = ReadRoutes(root["queues"], &c);
    if (!st.ok()) return st;
    Status valid = quota::Validate(c.policy);
    if (!valid.ok()) return Prefixed(valid);
    c.warnings = ConfigWarnings(c);
    return c;
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument("config: " + std::string(e.what()));
  }
}

Result<EngineConfig> LoadConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot read config '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseConfig(ss.str());
}

}  // namespace tessera::api
