// The identities in the server's config: roles, static tokens (kept as SHA-256 hashes, with an
// optional expiry), the OpenID Connect provider's settings (auth/oidc.h), and the lookups by
// token, group, queue, profile and route. The rest of the loader is config.cc.
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <set>
#include <string>
#include <vector>

#include "api/config.h"
#include "api/config_fields.h"
#include "model/duration.h"
#include "model/timestamp.h"

namespace tessera::api {

namespace {
// Every role and its name, for both directions.
constexpr std::pair<Role, const char*> kRoleNames[] = {{Role::kAdmin, "admin"},
                                                       {Role::kUser, "user"},
                                                       {Role::kAgent, "agent"},
                                                       {Role::kViewer, "viewer"},
                                                       {Role::kMetrics, "metrics"}};
}  // namespace

const char* RoleName(Role r) {
  for (auto [role, name] : kRoleNames) {
    if (role == r) return name;
  }
  return "?";
}

Result<Role> ParseRole(const std::string& name) {
  std::string names;
  for (auto [role, role_name] : kRoleNames) {
    if (name == role_name) return role;
    names += (names.empty() ? "" : ", ") + std::string(role_name);
  }
  return Status::InvalidArgument("unknown role '" + name + "' (" + names + ")");
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
  return cfg::FindBy(identities, &Identity::token_sha256, hash);
}
const quota::GroupSpec* EngineConfig::FindGroup(const std::string& name) const {
  return cfg::FindBy(policy.groups, &quota::GroupSpec::name, name);
}
const quota::QueueSpec* EngineConfig::FindQueue(const std::string& name) const {
  return cfg::FindBy(policy.queues, &quota::QueueSpec::name, name);
}
const quota::ProfileSpec* EngineConfig::FindProfile(const std::string& name) const {
  return cfg::FindBy(policy.profiles, &quota::ProfileSpec::name, name);
}
const QueueRoute* EngineConfig::FindRoute(const std::string& queue) const {
  return cfg::FindBy(routes, &QueueRoute::queue, queue);
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

namespace cfg {

// identities: [{name, role, groups, nodes, run_as, run_as_root, token | token_sha256}]; tokens
// kept as SHA-256 hashes.
Status ReadIdentities(const YAML::Node& ids, std::vector<Identity>* out) {
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
    auto role_name = n["role"] ? Str(n["role"], w + ".role") : Result<std::string>("user");
    if (!role_name.ok()) return role_name.status();
    auto role = ParseRole(*role_name);
    if (!role.ok()) return Bad(w + ".role", role.status().message());
    id.role = *role;
    if (n["expires"]) {
      auto text = Str(n["expires"], w + ".expires");
      if (!text.ok()) return text.status();
      auto at = ParseTimestampMs(*text);
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
    // One of the two: a token beside its hash would never be checked against it.
    if (n["token_sha256"] && n["token"]) return Bad(w, "token and token_sha256 exclude each other");
    if (n["token_sha256"]) {
      auto hash = Str(n["token_sha256"], w + ".token_sha256");
      if (!hash.ok()) return hash.status();
      id.token_sha256 = *hash;
      // As sha256sum prints it; an upper-case digest (as some tools print it) is taken too.
      for (char& c : id.token_sha256)
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (id.token_sha256.size() != 64 ||
          id.token_sha256.find_first_not_of("0123456789abcdef") != std::string::npos) {
        return Bad(w + ".token_sha256", "expected 64 hex digits");
      }
    } else if (n["token"]) {
      auto token = Str(n["token"], w + ".token");
      if (!token.ok()) return token.status();
      const std::string& t = *token;
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

// `oidc: {issuer, audience, client_id, groups_claim, username_claim, account_claim, clock_skew,
// ca_file, roles: {admin: [group...], user: [...], viewer: [...], metrics: [...]}}`: tokens of an
// OpenID Connect provider accepted beside the static ones (auth/oidc.h).
Status ReadOidc(const YAML::Node& root, EngineConfig* c) {
  const YAML::Node n = root["oidc"];
  if (!n) return Status::Ok();
  if (!n.IsMap()) return Bad("oidc", "expected a map (issuer, client_id, roles, ...)");
  Status st = CheckKeys(n, "oidc",
                        {"issuer", "audience", "client_id", "groups_claim", "username_claim",
                         "account_claim", "clock_skew", "ca_file", "scopes", "roles"});
  if (!st.ok()) return st;
  auth::OidcSettings& o = c->oidc;
  st = ReadStrs(n, "oidc",
                {{"issuer", &o.issuer},
                 {"audience", &o.audience},
                 {"client_id", &o.client_id},
                 {"groups_claim", &o.groups_claim},
                 {"username_claim", &o.username_claim},
                 {"account_claim", &o.account_claim},
                 {"ca_file", &o.ca_file},
                 {"scopes", &o.scopes}},
                [](const std::string& field, const YAML::Node& v) {
                  return v.IsScalar() && v.Scalar().empty() ? Bad(field, "must not be empty")
                                                            : Status::Ok();
                });
  if (!st.ok()) return st;
  if (o.issuer.empty()) return Bad("oidc.issuer", "required (the provider's issuer URL)");
  if (o.issuer.rfind("https://", 0) != 0 && o.issuer.rfind("http://", 0) != 0)
    return Bad("oidc.issuer", "'" + o.issuer + "' is not an http(s) URL");
  if (o.client_id.empty() && o.audience.empty())
    return Bad("oidc", "needs client_id (or audience): the audience its tokens must carry");
  if (st = ReadDuration(n["clock_skew"], "oidc.clock_skew", &o.clock_skew_ms); !st.ok()) return st;
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

}  // namespace cfg
std::vector<std::string> ExpiredTokenWarnings(const EngineConfig& c, int64_t now_ms) {
  std::vector<std::string> out;
  for (const Identity& id : c.identities) {
    if (id.expires_ms > 0 && id.expires_ms <= now_ms) {
      out.push_back("identity '" + id.name + "': its token expired at " +
                    auth::FormatUtc(id.expires_ms) + ", so its requests are refused");
    }
  }
  return out;
}

}  // namespace tessera::api
