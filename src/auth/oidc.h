// OpenID Connect token verification for a resource server (the API): a provider's tokens (ID
// tokens, or access tokens in JWT form) checked against the provider's published keys, and their
// claims mapped to a name, groups, a role and a Unix account by the config's rules.
//
//   discovery   GET {issuer}/.well-known/openid-configuration once; its "issuer" must be the
//               configured one exactly, its "jwks_uri" says where the keys are.
//   keys        GET {jwks_uri}; kept, and fetched again when a token names a key id they lack
//               (the provider rotated its keys; at most once per kMinRefetchMs) or when they are
//               older than kKeysMaxAgeMs.
//   token       RS256 or ES256 signature by a published key; "iss" the issuer; "aud" (a string or
//               a list) holds the audience; "exp" not past and "nbf"/"iat" not ahead, each with
//               `clock_skew_ms` of slack.
//
// Thread-safety: OidcVerifier is safe to call from many threads. Keys are fetched on a thread of
// its own, one fetch at a time and never under its lock: a token of a known key is verified with
// the keys at hand meanwhile; the token that started a fetch waits for it at most kKeyWaitMs,
// and another token of a key not at hand is refused at once (a slow provider and tokens naming
// unknown keys held every request up, on the server's event loops).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "auth/jwt.h"
#include "common/status.h"

namespace tessera::auth {

// What the config's `oidc:` block says (api/config.cc reads it; unknown keys are errors there).
struct OidcSettings {
  std::string issuer;     // "https://login.example.org/realms/x" exactly as tokens carry it
  std::string audience;   // the "aud" a token must hold ("" : client_id)
  std::string client_id;  // the public client `tessera login` and the dashboard sign in as
  std::string groups_claim = "groups";                // a list of strings (or one string)
  std::string username_claim = "preferred_username";  // the identity's name in Tessera
  std::string account_claim;  // the Unix account its jobs run as ("" : none from the token)
  std::string scopes =
      "openid profile offline_access";  // what `tessera login` and the dashboard ask

  // role -> the provider groups that give it, tried in the order admin, user, viewer, metrics.
  // A token in none of them: a user when no `user` list is given, refused otherwise.
  std::map<std::string, std::vector<std::string>> roles;
  int64_t clock_skew_ms = 60'000;
  std::string ca_file;  // PEM CAs for an https provider with a private CA ("" : the system's)
  bool enabled() const { return !issuer.empty(); }
  const std::string& Audience() const { return audience.empty() ? client_id : audience; }
};

// Who a verified token says its bearer is, by the settings' rules.
struct MappedClaims {
  std::string subject;              // "sub": stable at the provider
  std::string name;                 // the username claim
  std::string role;                 // "admin", "user", "viewer" or "metrics"
  std::vector<std::string> groups;  // the groups claim, as the provider sent it
  std::string account;              // the account claim ("" : none)
  int64_t expires_ms = 0;           // "exp"
};

// Claims to a name, role, groups and account; Unauthenticated / PermissionDenied naming the
// missing claim or the unmatched role.
Result<MappedClaims> MapClaims(const Json& claims, const OidcSettings& s);

// Fetches `url` (GET) and returns the body of a 200 answer, or an error naming the URL.
using Fetcher = std::function<Result<std::string>(const std::string& url)>;
// Over HTTP(S) with cpp-httplib, 5 s timeouts; `ca_file` as OidcSettings::ca_file.
Fetcher HttpFetcher(const std::string& ca_file);

class OidcVerifier {
 public:
  static constexpr int64_t kMinRefetchMs = 1000;
  static constexpr int64_t kKeysMaxAgeMs = 3600'000;
  static constexpr int64_t kKeyWaitMs = 1000;

  OidcVerifier(OidcSettings settings, Fetcher fetch);
  ~OidcVerifier();  // waits for a fetch on its way
  OidcVerifier(const OidcVerifier&) = delete;
  OidcVerifier& operator=(const OidcVerifier&) = delete;

  // The token's claims once signature, issuer, audience and times check out at `now_ms`;
  // Unauthenticated saying what failed ("expired at ...", "issued by ... not ...") otherwise,
  // Internal when the provider cannot be reached.
  Result<Json> Verify(const std::string& token, int64_t now_ms);
  // The provider's discovery document (fetched once).
  Result<Json> Discovery();
  const OidcSettings& settings() const { return settings_; }
  // True the first time `subject` is seen (its sign-in, for the audit trail), false after.
  bool FirstSignIn(const std::string& subject);
  // How many times the keys were fetched (tests: rotation fetched them again).
  int key_fetches() const;

 private:
  // The discovery document from the provider, checked (no lock held).
  Result<Json> FetchDiscovery() const;
  // Starts a fetch of the keys on fetcher_ unless one is on its way; true if it did.
  bool StartFetchLocked(int64_t now_ms);
  void FetchKeys();  // on fetcher_: discovery if not yet, then the keys; stores them under mu_

  const OidcSettings settings_;
  const Fetcher fetch_;
  mutable std::mutex mu_;
  std::optional<Json> discovery_;    // GUARDED_BY(mu_)
  std::optional<KeySet> keys_;       // GUARDED_BY(mu_)
  int64_t keys_at_ms_ = 0;           // GUARDED_BY(mu_)
  int key_fetches_ = 0;              // GUARDED_BY(mu_)
  bool fetching_ = false;            // GUARDED_BY(mu_)
  Status fetch_error_;               // GUARDED_BY(mu_): the last fetch's, when it failed
  std::set<std::string> signed_in_;  // GUARDED_BY(mu_)
  std::condition_variable fetched_;  // a fetch ended
  std::thread fetcher_;              // GUARDED_BY(mu_)
};

// "2027-06-30T18:00:00Z" for milliseconds since the epoch (messages say when a token expired).
std::string FormatUtc(int64_t ms);

}  // namespace tessera::auth
