// OpenID Connect token verification (oidc.h).
#include "auth/oidc.h"

#include <algorithm>
#include <chrono>
#include <ctime>

#include "net/http_client.h"

namespace tessera::auth {

std::string FormatUtc(int64_t ms) {
  const std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

Result<MappedClaims> MapClaims(const Json& claims, const OidcSettings& s) {
  MappedClaims m;
  m.subject = claims.value("sub", "");
  if (m.subject.empty()) return Status::Unauthenticated("token has no 'sub' claim");
  if (!claims.contains(s.username_claim) || !claims[s.username_claim].is_string() ||
      claims[s.username_claim].get<std::string>().empty()) {
    return Status::Unauthenticated("token has no '" + s.username_claim +
                                   "' claim (oidc.username_claim) naming its bearer");
  }
  m.name = claims[s.username_claim].get<std::string>();
  if (claims.contains(s.groups_claim)) {
    const Json& g = claims[s.groups_claim];
    if (g.is_string()) m.groups.push_back(g.get<std::string>());
    if (g.is_array()) {
      for (const Json& v : g) {
        if (v.is_string()) m.groups.push_back(v.get<std::string>());
      }
    }
  }
  if (!s.account_claim.empty() && claims.contains(s.account_claim) &&
      claims[s.account_claim].is_string()) {
    m.account = claims[s.account_claim].get<std::string>();
  }
  if (claims.contains("exp") && claims["exp"].is_number()) {
    m.expires_ms = static_cast<int64_t>(claims["exp"].get<double>()) * 1000;
  }
  for (const char* role : {"admin", "user", "viewer", "metrics"}) {
    auto it = s.roles.find(role);
    if (it == s.roles.end()) continue;
    for (const std::string& g : it->second) {
      if (std::find(m.groups.begin(), m.groups.end(), g) != m.groups.end()) {
        m.role = role;
        return m;
      }
    }
  }
  if (s.roles.count("user")) {
    return Status::PermissionDenied("'" + m.name + "' is in none of the groups oidc.roles names");
  }
  m.role = "user";
  return m;
}

Fetcher HttpFetcher(const std::string& ca_file) {
  return [ca_file](const std::string& url) -> Result<std::string> {
    if (!net::IsHttpUrl(url)) return Status::InvalidArgument("'" + url + "' is not an http(s) URL");
    const size_t slash = url.find('/', url.find("//") + 2);
    const std::string base = slash == std::string::npos ? url : url.substr(0, slash);
    const std::string path = slash == std::string::npos ? "/" : url.substr(slash);
    net::ClientTls tls;
    tls.ca_file = ca_file;
    auto client = net::NewHttpClient(base, tls);
    client->set_connection_timeout(5);
    client->set_read_timeout(5);
    auto r = client->Get(path);
    if (!r) {
      return Status::Internal("identity provider: GET " + url + " failed (" +
                              httplib::to_string(r.error()) + ")");
    }
    if (r->status != 200) {
      return Status::Internal("identity provider: GET " + url + " answered " +
                              std::to_string(r->status));
    }
    return r->body;
  };
}

OidcVerifier::OidcVerifier(OidcSettings settings, Fetcher fetch)
    : settings_(std::move(settings)), fetch_(std::move(fetch)) {}

OidcVerifier::~OidcVerifier() {
  std::thread t;
  {
    std::lock_guard<std::mutex> lock(mu_);
    t = std::move(fetcher_);
  }
  if (t.joinable()) t.join();
}

bool OidcVerifier::FirstSignIn(const std::string& subject) {
  std::lock_guard<std::mutex> lock(mu_);
  return signed_in_.insert(subject).second;
}

int OidcVerifier::key_fetches() const {
  std::lock_guard<std::mutex> lock(mu_);
  return key_fetches_;
}

Result<Json> OidcVerifier::Discovery() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (discovery_) return *discovery_;
  }
  // Fetched outside the lock, as the keys are: a slow provider held every verification up
  // behind a public GET /v1/auth/config until the document was first fetched.
  Result<Json> d = FetchDiscovery();
  if (!d.ok()) return d;
  std::lock_guard<std::mutex> lock(mu_);
  if (!discovery_) discovery_ = *d;
  return *discovery_;
}

Result<Json> OidcVerifier::FetchDiscovery() const {
  std::string issuer = settings_.issuer;
  while (!issuer.empty() && issuer.back() == '/') issuer.pop_back();
  auto body = fetch_(issuer + "/.well-known/openid-configuration");
  if (!body.ok()) return body.status();
  Json d = Json::parse(*body, nullptr, false);
  if (!d.is_object() || !d.contains("jwks_uri") || !d["jwks_uri"].is_string())
    return Status::Internal("identity provider: its discovery document has no jwks_uri");
  if (d.value("issuer", "") != settings_.issuer) {
    return Status::Internal("identity provider: its discovery document names issuer '" +
                            d.value("issuer", "") + "', not the configured '" + settings_.issuer +
                            "'");
  }
  return d;
}

bool OidcVerifier::StartFetchLocked(int64_t now_ms) {
  if (fetching_) return false;
  fetching_ = true;
  keys_at_ms_ = now_ms;  // a failed fetch, too, waits kMinRefetchMs before the next
  ++key_fetches_;
  if (fetcher_.joinable()) fetcher_.join();  // ended: fetching_ was false
  fetcher_ = std::thread([this] { FetchKeys(); });
  return true;
}

void OidcVerifier::FetchKeys() {
  std::optional<Json> discovery;
  {
    std::lock_guard<std::mutex> lock(mu_);
    discovery = discovery_;
  }
  Status st;
  std::optional<KeySet> keys;
  if (!discovery) {
    Result<Json> d = FetchDiscovery();
    if (d.ok()) discovery = *d;
    st = d.status();
  }
  if (discovery) {
    auto body = fetch_((*discovery)["jwks_uri"].get<std::string>());
    st = body.status();
    if (body.ok()) {
      auto set = KeySet::Parse(Json::parse(*body, nullptr, false));
      if (set.ok()) keys = std::move(*set);
      st = set.ok() ? Status::Ok()
                    : Status::Internal("identity provider: " + set.status().message());
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (discovery && !discovery_) discovery_ = discovery;
  if (keys) keys_ = std::move(keys);
  fetch_error_ = st;
  fetching_ = false;
  fetched_.notify_all();
}

Result<Json> OidcVerifier::Verify(const std::string& token, int64_t now_ms) {
  auto jwt = ParseJwt(token);
  if (!jwt.ok()) return Status::Unauthenticated(jwt.status().message());
  // The issuer first: a token of another provider is refused without fetching anything.
  const std::string iss = jwt->claims.value("iss", "");
  if (iss != settings_.issuer) {
    return Status::Unauthenticated("token issued by '" + iss + "', not by '" + settings_.issuer +
                                   "'");
  }
  {
    std::unique_lock<std::mutex> lock(mu_);
    // Old keys are fetched again on the side; the token is checked with those at hand.
    if (keys_ && now_ms - keys_at_ms_ > kKeysMaxAgeMs) StartFetchLocked(now_ms);
    Status st = keys_ ? keys_->Verify(*jwt) : Status::NotFound("no keys of the provider yet");
    if (st.code() == StatusCode::kNotFound) {
      // No keys yet, or a key id not seen yet (the provider may have rotated its keys): the token
      // that starts a fetch waits for it a moment; one that comes while a fetch is on its way, or
      // within kMinRefetchMs of the last, is refused at once.
      const bool started =
          (key_fetches_ == 0 || now_ms - keys_at_ms_ >= kMinRefetchMs) && StartFetchLocked(now_ms);
      if (started) {
        fetched_.wait_for(lock, std::chrono::milliseconds(kKeyWaitMs), [&] { return !fetching_; });
        if (!fetching_ && !fetch_error_.ok() && !keys_) return fetch_error_;
        st = keys_ ? keys_->Verify(*jwt) : Status::NotFound("no keys of the provider yet");
      }
      if (st.code() == StatusCode::kNotFound) {
        return Status::Unauthenticated(st.message() +
                                       (fetching_ ? " (the provider's keys are being fetched: "
                                                    "try again in a moment)"
                                                  : ""));
      }
    }
    if (!st.ok()) return st;
  }
  const Json& c = jwt->claims;
  const std::string& aud = settings_.Audience();
  bool aud_ok = false;
  if (c.contains("aud") && c["aud"].is_string()) aud_ok = c["aud"] == aud;
  if (c.contains("aud") && c["aud"].is_array()) {
    for (const Json& a : c["aud"]) aud_ok = aud_ok || a == aud;
  }
  if (!aud_ok) {
    const std::string said = !c.contains("aud")     ? std::string("(none)")
                             : c["aud"].is_string() ? "'" + c["aud"].get<std::string>() + "'"
                                                    : c["aud"].dump();
    return Status::Unauthenticated("token is for audience " + said + ", not '" + aud + "'");
  }
  if (!c.contains("exp") || !c["exp"].is_number())
    return Status::Unauthenticated("token has no 'exp' claim");
  const int64_t exp_ms = static_cast<int64_t>(c["exp"].get<double>()) * 1000;
  if (now_ms > exp_ms + settings_.clock_skew_ms)
    return Status::Unauthenticated("token expired at " + FormatUtc(exp_ms) + ": sign in again");
  for (const char* early : {"nbf", "iat"}) {
    if (c.contains(early) && c[early].is_number() &&
        static_cast<int64_t>(c[early].get<double>()) * 1000 > now_ms + settings_.clock_skew_ms) {
      return Status::Unauthenticated(std::string("token's '") + early + "' is in the future");
    }
  }
  return c;
}

}  // namespace tessera::auth
